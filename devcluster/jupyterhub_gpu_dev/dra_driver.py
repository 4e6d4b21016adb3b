"""SIMULATOR — the NVIDIA DRA driver's kubelet plugin for KWOK nodes: what it publishes about a node's GPUs.

On a real node the driver (kubernetes-sigs/dra-driver-nvidia-gpu, driver `gpu.nvidia.com`) reads the GPUs from
NVML and publishes one ResourceSlice per node (pool = node name); its Helm chart installs the DeviceClasses
`gpu.nvidia.com` and `mig.nvidia.com`. KWOK nodes have no GPUs and no plugin, so this module writes the same
objects from the profiles file's pool: devices named and attributed as the driver does (v0.4.1 deviceinfo.go,
mig.go; v25.12.0 partitions.go), from the product's GPU model facts (jupyterhub_gpu.model.gpus). Static MIG only:
a MIG-enabled GPU publishes its MIG devices and not itself, as the driver does without DynamicMIG. The scheduler
then allocates from these slices exactly as on a cluster with the driver. Pure builders plus `publish`.
"""
from __future__ import annotations

import uuid
from typing import Any

from jupyterhub_gpu.builders.dra import RESOURCE_API, driver_device_classes
from jupyterhub_gpu.model import dra
from jupyterhub_gpu.model.gpus import GPU_COMPUTE_SLICES, GPU_MEMORY_SLICES, MIG_PROFILE_RE, GPUModel
from jupyterhub_gpu.model.profiles import Pool, ProfilesConfig

#: SIMULATOR: the driver stack a simulated node reports (semver, as the driver normalizes NVML's strings).
DRIVER_VERSION = "580.95.5"
CUDA_DRIVER_VERSION = "13.0.0"
#: SIMULATOR: what NVML says of each model beyond gpus.py's facts: (architecture, CUDA compute capability).
ARCHITECTURES = {"T4": ("Turing", "7.5.0"), "L4": ("Ada Lovelace", "8.9.0"), "A10": ("Ampere", "8.6.0"),
                 "V100": ("Volta", "7.0.0"), "L40S": ("Ada Lovelace", "8.9.0"), "A100-40GB": ("Ampere", "8.0.0"),
                 "A100-80GB": ("Ampere", "8.0.0"), "H100-80GB": ("Hopper", "9.0.0"),
                 "H100-NVL-94GB": ("Hopper", "9.0.0"), "H200-141GB": ("Hopper", "9.0.0")}
#: NVML's GPU-instance profile ids by compute slices (`nvidia-smi mig -lgip`); a 1g slice with twice the smallest
#: memory (1g.20gb on an 80 GB GPU) is id 15.
GI_PROFILE_IDS = {7: 0, 4: 5, 3: 9, 2: 14, 1: 19}
GI_PROFILE_1G_DOUBLE = 15
_UUIDS = uuid.UUID("5e1f1c9a-6d0e-4c55-9a8e-6a1d3f0c2b7e")  # namespace of the simulated, stable UUIDs


def _string(v: str) -> dict[str, str]:
    return {"string": v}


def _version(v: str) -> dict[str, str]:
    return {"version": v}


def gpu_uuid(node: str, minor: int) -> str:
    """A stable UUID in NVML's form for one simulated GPU (the same node and minor give the same UUID)."""
    return f"GPU-{uuid.uuid5(_UUIDS, f'{node}/gpu-{minor}')}"


def mig_uuid(node: str, device_name: str) -> str:
    return f"MIG-{uuid.uuid5(_UUIDS, f'{node}/{device_name}')}"


def product_name(model: GPUModel) -> str:
    """NVML's name, from the product label GFD made of it by replacing spaces (e.g. NVIDIA A100 80GB PCIe)."""
    return model.product.replace("-", " ")


def common_attributes(model: GPUModel, minor: int) -> dict[str, dict[str, str]]:
    """What the driver says of a GPU and of each MIG device cut from it (the parent's name, brand, versions)."""
    arch, cc = ARCHITECTURES.get(model.name, ("Unknown", "0.0.0"))
    return {"productName": _string(product_name(model)),
            "brand": _string("Tesla" if model.product.startswith("Tesla") else "Nvidia"),
            "architecture": _string(arch), "cudaComputeCapability": _version(cc),
            "driverVersion": _version(DRIVER_VERSION), "cudaDriverVersion": _version(CUDA_DRIVER_VERSION),
            "resource.kubernetes.io/pciBusID": _string(f"0000:{0x41 + minor:02x}:00.0")}


def gpu_device(node: str, model: GPUModel, minor: int) -> dict[str, Any]:
    return {"name": f"gpu-{minor}",
            "attributes": {"type": _string("gpu"), "uuid": _string(gpu_uuid(node, minor)),
                           **common_attributes(model, minor)},
            "capacity": {"memory": {"value": str(dra.device_memory_bytes(model.memory_gib))}}}


def gi_profile_id(model: GPUModel, slice_name: str) -> int:
    g = int(MIG_PROFILE_RE.match(slice_name)["g"])
    if g == 1 and model.mig_memory_units(slice_name) > 1:
        return GI_PROFILE_1G_DOUBLE
    return GI_PROFILE_IDS[g]


def placements(model: GPUModel, layout: dict[str, int]) -> list[tuple[str, int]]:
    """(slice, first memory slice) for each MIG device of one GPU: the biggest first, each at the highest start
    NVML allows (a multiple of its size, within the 7 compute slices) that is still free, so a valid layout
    always fits (all-balanced on an A100: 3g at 4, 2g at 2, 1g at 1 and 0)."""
    used: set[int] = set()
    out = []
    order = sorted(layout.items(), key=lambda kv: (-int(MIG_PROFILE_RE.match(kv[0])["g"]),
                                                    -model.mig_memory_units(kv[0])))
    for slice_name, count in order:
        size, g = model.mig_memory_units(slice_name), int(MIG_PROFILE_RE.match(slice_name)["g"])
        starts = [s for s in range(0, GPU_MEMORY_SLICES, size)
                  if s + size <= GPU_MEMORY_SLICES and s + g <= GPU_COMPUTE_SLICES]
        for _ in range(count):
            free = [s for s in starts if not used & set(range(s, s + size))]
            if not free:
                raise ValueError(f"{model.name}: no free placement for {slice_name} in {layout}")
            used |= set(range(free[-1], free[-1] + size))
            out.append((slice_name, free[-1]))
    return sorted(out, key=lambda p: p[1])


def mig_device(node: str, model: GPUModel, minor: int, slice_name: str, start: int) -> dict[str, Any]:
    """One MIG device as the driver names it: gpu-<parent minor>-mig-<profile without dots>-<GI id>-<start>."""
    name = f"gpu-{minor}-mig-{slice_name.replace('.', '')}-{gi_profile_id(model, slice_name)}-{start}"
    mem_gib = int(MIG_PROFILE_RE.match(slice_name)["mem"])
    slices = {f"memorySlice{i}": {"value": "1"} for i in range(start, start + model.mig_memory_units(slice_name))}
    return {"name": name,
            "attributes": {"type": _string("mig"), "uuid": _string(mig_uuid(node, name)),
                           "parentUUID": _string(gpu_uuid(node, minor)), "profile": _string(slice_name),
                           **common_attributes(model, minor)},
            "capacity": {"memory": {"value": str(dra.device_memory_bytes(mem_gib))}, **slices}}


def node_devices(node: str, pool: Pool) -> list[dict[str, Any]]:
    """Every device the driver publishes for one node of a dra pool: its GPUs, or their static MIG devices."""
    model, layout = pool.gpu.spec, pool.mig_layout
    out = []
    for minor in range(pool.gpu.count_per_node):
        if layout:
            out += [mig_device(node, model, minor, s, start) for s, start in placements(model, layout)]
        else:
            out.append(gpu_device(node, model, minor))
    return out


def slice_name(node: str) -> str:
    return f"{node}-{dra.DRIVER}"


def resource_slice(node: str, pool: Pool, node_uid: str | None = None) -> dict[str, Any]:
    """The node's one ResourceSlice (pool = node name, generation 1, one slice), owned by its Node as the
    driver's are (so it goes when the node goes)."""
    meta: dict[str, Any] = {"name": slice_name(node)}
    if node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid,
                                    "controller": True}]
    return {"apiVersion": RESOURCE_API, "kind": "ResourceSlice", "metadata": meta,
            "spec": {"driver": dra.DRIVER, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "nodeName": node, "devices": node_devices(node, pool)}}


def dra_pool_of(node: dict[str, Any], pools: dict[str, Pool]) -> Pool | None:
    """The dra pool a node manifest belongs to (by the pool's node selector), or None."""
    labels = node["metadata"].get("labels") or {}
    for pool in pools.values():
        if pool.is_dra and pool.node_selector and all(labels.get(k) == v for k, v in pool.node_selector.items()):
            return pool
    return None


def build_slices(cfg: ProfilesConfig, nodes: list[dict[str, Any]],
                 uids: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """A ResourceSlice for every node (manifest) of a dra pool of `cfg`; other nodes have none."""
    out = []
    for node in nodes:
        pool = dra_pool_of(node, cfg.pools)
        if pool is not None:
            name = node["metadata"]["name"]
            out.append(resource_slice(name, pool, (uids or {}).get(name)))
    return out


def publish(kube, cfg: ProfilesConfig, nodes: list[dict[str, Any]]) -> int:
    """What the driver does once installed: its chart's DeviceClasses, and each dra node's slice (`kube`: a
    jupyterhub_gpu_dev.kube.Kube). Nothing when `cfg` has no dra pool. Returns the number of slices."""
    if not any(p.is_dra for p in cfg.pools.values()):
        return 0
    for obj in driver_device_classes():
        kube.apply(obj)
    names = {n["metadata"]["name"] for n in nodes}
    uids = {n["metadata"]["name"]: n["metadata"]["uid"] for n in kube.list("v1", "Node")
            if n["metadata"]["name"] in names}
    slices = build_slices(cfg, nodes, uids)
    for obj in slices:
        kube.apply(obj)
    return len(slices)
