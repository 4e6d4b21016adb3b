"""GPUs handed out through Dynamic Resource Allocation, as the cluster says them (pure): the devices a
ResourceSlice publishes and the ones a ResourceClaim was allocated (resource.k8s.io/v1, as API JSON).

A device is named `<driver>/<pool>/<device>` (`device_key`), as a claim's allocation results name it. Only the
NVIDIA driver's (`gpu.nvidia.com`) devices on slices of one node (`spec.nodeName`, as the driver publishes them)
count, each under the quota name the device plugin would give it (`nvidia.com/gpu` for type gpu,
`nvidia.com/mig-<profile>` for type mig): a dra pool's numbers are then in the same units as any other pool's.
The picker's live capacity (hub/dra_capacity.py) and showback (services/usage) read them here.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping

from jupyterhub_gpu.model.dra import DRIVER, choice_index
from jupyterhub_gpu.model.gpus import mig_resource_name

FULL_GPU = "nvidia.com/gpu"
#: One device of a slice: (its key, the quota name it counts under).
Device = tuple[str, str]


def device_key(driver: str, pool: str, device: str) -> str:
    return f"{driver}/{pool}/{device}"


def attribute(device: Mapping[str, Any], name: str, driver: str = DRIVER) -> Any:
    """A device attribute's value: the name bare (the driver's own domain) or qualified with it."""
    attrs = device.get("attributes") or {}
    value = attrs.get(name, attrs.get(f"{driver}/{name}"))
    if not isinstance(value, dict):
        return None
    return next((value[k] for k in ("string", "int", "bool", "version") if k in value), None)


def quota_name(device: Mapping[str, Any]) -> str | None:
    """The name a device counts under: a whole GPU's, or its MIG slice's; None for anything else (vfio)."""
    kind = attribute(device, "type")
    if kind == "gpu":
        return FULL_GPU
    profile = attribute(device, "profile")
    return mig_resource_name(profile) if kind == "mig" and isinstance(profile, str) and profile else None


def is_partitioned(device: Any) -> bool:
    """A partitionable device (dynamic MIG): it consumes its GPU's shared counters with the others cut from it."""
    return isinstance(device, dict) and bool(device.get("consumesCounters"))


def slice_devices(resource_slice: Mapping[str, Any]) -> tuple[str | None, tuple[Device, ...]]:
    """(the node, its GPUs and MIG slices) a ResourceSlice publishes; (None, ()) for another driver's or one
    not bound to one node."""
    spec = resource_slice.get("spec") or {}
    node, pool = spec.get("nodeName"), (spec.get("pool") or {}).get("name")
    if spec.get("driver") != DRIVER or not isinstance(node, str) or not node or not isinstance(pool, str):
        return None, ()
    out = []
    for device in spec.get("devices") or []:
        name = device.get("name") if isinstance(device, dict) else None
        if is_partitioned(device):
            continue  # not a unit of its own; doctor says gpuhub does not count it
        if isinstance(name, str) and (quota := quota_name(device)) is not None:
            out.append((device_key(DRIVER, pool, name), quota))
    return node, tuple(out)


def partitionable(resource_slice: Mapping[str, Any]) -> bool:
    """Whether the NVIDIA driver publishes partitionable devices in this slice (dynamic MIG: a GPU and the slices
    it could be cut into, each consuming the GPU's shared counters), which gpuhub does not count."""
    spec = resource_slice.get("spec") or {}
    return spec.get("driver") == DRIVER and any(is_partitioned(d) for d in spec.get("devices") or [])


def allocation_results(claim: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The claim's allocation results (request, driver, pool, device), [] while it is not allocated."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [r for r in results if isinstance(r, dict) and all(isinstance(r.get(k), str)
                                                               for k in ("driver", "pool", "device"))]


def gpu_results(claim: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The claim's allocation results of the NVIDIA driver that hold their device (not admin access)."""
    return [r for r in allocation_results(claim) if r.get("driver") == DRIVER and not r.get("adminAccess")]


def claimed_devices(claim: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys of the NVIDIA GPUs a claim holds: its allocation results of the driver, less admin access (a
    monitoring claim that does not keep the device from anyone); other drivers' devices (NICs...) are not kept."""
    return tuple(device_key(r["driver"], r["pool"], r["device"]) for r in gpu_results(claim))


def chosen(claim: Mapping[str, Any]) -> int | None:
    """Which choice of its prioritized list a claim was allocated (`model.dra.choice_index`); None while it is not."""
    results = gpu_results(claim)
    request = results[0].get("request") if results else None
    return choice_index(request) if isinstance(request, str) else None


def pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The ResourceClaims a pod got (`status.resourceClaimStatuses`, and the one for extended resources that
    a DeviceClass serves), in its namespace."""
    status = pod.get("status") or {}
    names = [s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or [] if isinstance(s, dict)]
    names.append((status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName"))
    return [n for n in names if isinstance(n, str) and n]


def device_counts(slices: Iterable[Mapping[str, Any]],
                  claims: Iterable[Mapping[str, Any]]) -> dict[str, Counter]:
    """node → Counter of (quota name, "total" | "used"): every published device once (a pool republished under a
    new generation may list one twice for a moment; were two slices to place it differently, the first
    (node, quota) in sort order wins), used when some claim holds it. The full fold the incremental one
    (hub/dra_capacity.py) must equal."""
    where: dict[str, tuple[str, str]] = {}
    for s in slices:
        node, devices = slice_devices(s)
        for key, quota in devices:
            where[key] = min(where.get(key, (node, quota)), (node, quota))
    held = {key for c in claims for key in claimed_devices(c)}
    out: dict[str, Counter] = {}
    for key, (node, quota) in where.items():
        counts = out.setdefault(node, Counter())
        counts[quota, "total"] += 1
        counts[quota, "used"] += key in held
    return out
