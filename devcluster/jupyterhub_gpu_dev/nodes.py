"""KWOK Node manifests shaped like the AKS node pools of a profiles file (pure functions).

Each node carries what AKS, the NVIDIA device plugin and GPU feature discovery (GFD) would
publish on a real node of that pool: pool and instance labels, GPU product/count/memory/sharing
labels, MIG labels, the pool's taints (plus the AKS spot taint) and allocatable with the GPU
extended resources (none on a `dra` pool: its GPUs are in the DRA driver's ResourceSlices, dra_driver.py).
The NVIDIA labels are the product's own facts (`jupyterhub_gpu.model.node_facts`); the simulator builds from
them, never the reverse. Everything is labelled as simulated.
"""
from __future__ import annotations

import re
from typing import Any

from jupyterhub_gpu.contract import SIMULATED_NODE_LABEL
from jupyterhub_gpu.model.node_facts import gpu_labels
from jupyterhub_gpu.model.profiles import NodeShape, Pool, ProfilesConfig
from jupyterhub_gpu_dev.simulator_keys import SIMULATOR_ANNOTATION

AGENTPOOL = "kubernetes.azure.com/agentpool"
SIMULATED_LABEL = SIMULATED_NODE_LABEL
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
SYSTEM_POOL = "system"
SYSTEM_INSTANCE_TYPE = "Standard_D8s_v5"


def with_system_pool(cfg: ProfilesConfig) -> dict[str, Pool]:
    """The file's pools, plus an untainted CPU system pool when the file has no CPU pool."""
    pools = dict(cfg.pools)
    if not any(not p.is_gpu for p in pools.values()):
        name = SYSTEM_POOL if SYSTEM_POOL not in pools else "gpuhub-system"
        pools[name] = Pool(node_selector={AGENTPOOL: name}, instance_type=SYSTEM_INSTANCE_TYPE)
    return pools


def pool_labels(name: str, pool: Pool) -> dict[str, str]:
    """Labels shared by every node of the pool (hostname is added per node)."""
    labels = {
        AGENTPOOL: name,
        "kubernetes.azure.com/mode": "user" if pool.is_gpu else "system",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": pool.instance_type or "simulated",
        SIMULATED_LABEL: "true",
    }
    if pool.is_gpu:
        labels["kubernetes.azure.com/accelerator"] = "nvidia"
    if pool.spot:
        labels["kubernetes.azure.com/scalesetpriority"] = "spot"
    labels.update(pool.node_selector)
    labels.update(gpu_labels(pool))
    return labels


#: SIMULATOR: the size of a dev node whose pool names neither a known instance_type nor `node`.
UNKNOWN_SHAPE = NodeShape(cpu=16, memory="64Gi")


def resources(pool: Pool) -> dict[str, str]:
    """Allocatable (= capacity here): the node shape plus the GPU slots the device plugin advertises; a `dra`
    pool runs no device plugin (its GPUs are in the DRA driver's ResourceSlice, dra_driver.py), so none. A KWOK
    node must be given some size: a pool whose size the file does not know gets UNKNOWN_SHAPE (a real node
    reports its own; the product never assumes one)."""
    shape = pool.shape() or UNKNOWN_SHAPE
    out = {"cpu": str(shape.cpu), "memory": str(int(shape.memory)), "pods": str(shape.max_pods),
           "ephemeral-storage": str(128 * 2**30)}
    if not pool.is_dra:
        out.update({k: str(v) for k, v in pool.slots_per_node().items()})
    return out


def node_name(pool_name: str, index: int) -> str:
    """AKS-style VMSS node name, e.g. aks-gput4-00000001-vmss000000."""
    safe = re.sub(r"[^a-z0-9-]+", "-", pool_name.lower()).strip("-")
    return f"aks-{safe}-00000001-vmss{index:06d}"


def node_manifest(pool_name: str, pool: Pool, index: int) -> dict[str, Any]:
    name = node_name(pool_name, index)
    res = resources(pool)
    spec: dict[str, Any] = {}
    if pool.effective_taints:
        spec["taints"] = [t.model_dump() for t in pool.effective_taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {**pool_labels(pool_name, pool), "kubernetes.io/hostname": name},
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0",
                            SIMULATOR_ANNOTATION: "kwok: this node runs no containers"},
        },
        "spec": spec,
        "status": {"allocatable": res, "capacity": dict(res)},
    }


def build_nodes(cfg: ProfilesConfig, nodes_per_pool: int | dict[str, int] = 2) -> list[dict[str, Any]]:
    """Node manifests for every pool (and the added system pool): N per pool, or a per-pool count."""
    out = []
    for name, pool in with_system_pool(cfg).items():
        count = nodes_per_pool if isinstance(nodes_per_pool, int) else nodes_per_pool.get(name, 0)
        out += [node_manifest(name, pool, i) for i in range(count)]
    return out
