"""SIMULATOR — what the dev node agent gives a container on a DRA node: only the devices the scheduler allocated
to the claims the container uses, as the NVIDIA DRA driver's CDI spec for a claim does on a real node.

A DRA node runs no device plugin (no nvidia.com/* in its allocatable): a container sees a GPU only through a
claim. The kubelet asks the driver to prepare the pod's claims; the driver's per-claim CDI spec adds the device
nodes of exactly the allocated GPUs (a MIG device: its parent's node and its capability files) and sets
NVIDIA_VISIBLE_DEVICES=void, so the container runtime's own hook adds nothing (dra-driver-nvidia-gpu v0.4.1
cmd/gpu-kubelet-plugin/cdi.go with nvidia-container-toolkit pkg/nvcdi/wrapper.go GetCommonEdits). Here: a device
folder and an `nvidia-smi -L` listing those devices, found from pod.status.resourceClaimStatuses → the claim's
status.allocation.devices.results (driver/pool/device) → the device in the driver's ResourceSlice.
"""
from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from jupyterhub_gpu.contract import ENV_DEVICE_ROOT
from jupyterhub_gpu.model.dra import DRIVER
from jupyterhub_gpu_dev.agent_env import simulated_gpu
from jupyterhub_gpu_dev.simulator_keys import SIM_PATH_ENV

log = logging.getLogger("gpuhub.dev-agent")

RESOURCE_GROUP, RESOURCE_VERSION = "resource.k8s.io", "v1"
#: What the driver's CDI spec sets: the runtime hook must not add devices of its own.
VISIBLE_DEVICES = "void"
_MINOR = re.compile(r"^gpu-(\d+)")


def is_dra_node(node: dict[str, Any]) -> bool:
    """A GPU node whose GPUs no device plugin advertises: they come only through DRA claims."""
    labels = node["metadata"].get("labels") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return labels.get("nvidia.com/gpu.present") == "true" and not any(k.startswith("nvidia.com/") for k in allocatable)


def container_claims(pod: dict[str, Any], container: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(ResourceClaim name, request or None for all of it) for each claim the container uses: its
    resources.claims through the pod's claims (a template's claim is named in status.resourceClaimStatuses), and
    an extended resource backed by a DeviceClass (status.extendedResourceClaimStatus)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    made = {s["name"]: s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    out = []
    for ref in (container.get("resources") or {}).get("claims") or []:
        pod_claim = next((c for c in spec.get("resourceClaims") or [] if c["name"] == ref["name"]), {})
        name = pod_claim.get("resourceClaimName") or made.get(ref["name"])
        if name:
            out.append((name, ref.get("request") or None))
    ext = status.get("extendedResourceClaimStatus") or {}
    for m in ext.get("requestMappings") or []:
        if m.get("containerName") == container["name"] and ext.get("resourceClaimName"):
            out.append((ext["resourceClaimName"], m.get("requestName")))
    return out


def allocated(claim: dict[str, Any], request: str | None) -> list[tuple[str, str]]:
    """(pool, device) of the driver's devices allocated to the claim (to one request: its own results, or a
    chosen subrequest's, `<request>/<subrequest>`)."""
    results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or []
    return [(r["pool"], r["device"]) for r in results if r.get("driver") == DRIVER
            and (request is None or r["request"] == request or r["request"].startswith(request + "/"))]


def _attr(device: dict[str, Any], name: str) -> str:
    value = (device.get("attributes") or {}).get(name) or {}
    return str(next(iter(value.values()), ""))


def write_devices(root: Path, devices: list[dict[str, Any]]) -> dict[str, str]:
    """The container's view of its devices (ResourceSlice devices): device files and an `nvidia-smi -L` listing
    them, renumbered from 0 as in a container; the env a pod's process gets."""
    shutil.rmtree(root, ignore_errors=True)
    dev, bin_dir = root / "dev", root / "bin"
    (dev / "nvidia-caps").mkdir(parents=True)
    bin_dir.mkdir(parents=True)
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        (dev / name).touch()
    gpus: dict[str, dict[str, Any]] = {}  # parent UUID → {"name": productName, "migs": [device]}
    for d in devices:
        minor = _MINOR.match(d["name"])
        (dev / f"nvidia{minor.group(1) if minor else 0}").touch()
        if _attr(d, "type") == "mig":
            gpus.setdefault(_attr(d, "parentUUID"), {"name": _attr(d, "productName"), "migs": []})["migs"].append(d)
            (dev / "nvidia-caps" / f"nvidia-cap-{d['name']}").touch()
        else:
            gpus.setdefault(_attr(d, "uuid"), {"name": _attr(d, "productName"), "migs": []})
    lines = []
    for i, (gpu_uuid, gpu) in enumerate(gpus.items()):
        lines.append(f"GPU {i}: {gpu['name']} (UUID: {gpu_uuid})")
        lines += [f"  MIG {_attr(m, 'profile'):<12} Device {j:>2}: (UUID: {_attr(m, 'uuid')})"
                  for j, m in enumerate(gpu["migs"])]
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n# SIMULATED nvidia-smi written by the gpuhub dev agent (DRA claim)\ncat <<'EOF'\n"
                   + "\n".join(lines) + "\nEOF\n")
    smi.chmod(0o755)
    return {ENV_DEVICE_ROOT: str(dev), "NVIDIA_VISIBLE_DEVICES": VISIBLE_DEVICES, SIM_PATH_ENV: str(bin_dir)}


async def claimed_devices(api_client, pod: dict[str, Any], container: dict[str, Any]) -> list[dict[str, Any]]:
    """The ResourceSlice devices allocated to the container's claims (kubernetes_asyncio ApiClient)."""
    wanted = container_claims(pod, container)
    if not wanted:
        return []
    api = client.CustomObjectsApi(api_client)
    ns = pod["metadata"]["namespace"]
    slices = (await api.list_cluster_custom_object(RESOURCE_GROUP, RESOURCE_VERSION, "resourceslices",
                                                   field_selector=f"spec.driver={DRIVER}"))["items"]
    by_id = {(s["spec"]["pool"]["name"], d["name"]): d for s in slices for d in s["spec"].get("devices") or []}
    out = []
    for name, request in wanted:
        claim = await api.get_namespaced_custom_object(RESOURCE_GROUP, RESOURCE_VERSION, ns, "resourceclaims", name)
        for pool, device in allocated(claim, request):
            if (pool, device) in by_id:
                out.append(by_id[(pool, device)])
            else:
                log.warning("[dev-agent SIMULATOR] %s: device %s/%s of claim %s is in no ResourceSlice",
                            pod["metadata"]["name"], pool, device, name)
    return out


async def gpu_env(api_client, state_dir: Path, key: str, pod: dict[str, Any], container: dict[str, Any],
                  node: dict[str, Any]) -> dict[str, str]:
    """A container's GPU env: a device-plugin node's simulated GPUs (agent_env.simulated_gpu), or on a DRA node
    the devices of its claims (none when it uses no claim, as a container there without one)."""
    if not is_dra_node(node):
        return simulated_gpu(state_dir, node)
    try:
        devices = await claimed_devices(api_client, pod, container)
    except client.ApiException as e:  # a kubelet would retry preparing; the container here gets no GPU
        log.warning("[dev-agent SIMULATOR] %s: its claims could not be read: %s", key, e.reason)
        devices = []
    if not devices:
        return {}
    return write_devices(state_dir / "gpus" / "claims" / key.replace("/", "_") / container["name"], devices)
