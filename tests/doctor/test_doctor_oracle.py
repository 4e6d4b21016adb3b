"""`gpuhub doctor` against nodes written out by hand, label by label, as an AKS node pool with the NVIDIA
GPU Operator (GFD, device plugin, mig-manager) shows them in `kubectl get node -o json`: an oracle that
does not come from the product's own node facts, so a wrong fact in the product fails here."""
from __future__ import annotations

import copy

import pytest

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.tools.doctor import FAIL, OK, check_pool

#: Standard_NC4as_T4_v3 in pool gput4, time-slicing with 4 replicas and renameByDefault: false (so the
#: product label gets -SHARED and the resource stays nvidia.com/gpu, 1 GPU x 4 replicas).
T4_NODE = {
    "metadata": {"name": "aks-gput4-12345678-vmss000000", "labels": {
        "kubernetes.azure.com/agentpool": "gput4",
        "kubernetes.azure.com/accelerator": "nvidia",
        "node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "Tesla-T4-SHARED",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.memory": "15360",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/mig.capable": "false",
        "nvidia.com/mig.strategy": "none",
    }},
    "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
    "status": {"allocatable": {"cpu": "3860m", "memory": "24000000Ki", "nvidia.com/gpu": "4", "pods": "110"}},
}

#: Standard_NC24ads_A100_v4 (one A100 80GB PCIe) in pool gpumig, MIG mixed, mig-parted config all-1g.10gb.
A100_MIG_NODE = {
    "metadata": {"name": "aks-gpumig-12345678-vmss000000", "labels": {
        "kubernetes.azure.com/agentpool": "gpumig",
        "kubernetes.azure.com/accelerator": "nvidia",
        "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.config": "all-1g.10gb",
        "nvidia.com/mig.config.state": "success",
        "nvidia.com/mig-1g.10gb.count": "7",
        "nvidia.com/mig-1g.10gb.memory": "9728",
        "nvidia.com/mig-1g.10gb.product": "NVIDIA-A100-80GB-PCIe-MIG-1g.10gb",
    }},
    "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
    "status": {"allocatable": {"cpu": "23660m", "memory": "214000000Ki", "nvidia.com/mig-1g.10gb": "7",
                               "pods": "110"}},
}


@pytest.fixture(scope="module")
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def checks(cfg, pool: str, node: dict) -> dict[str, object]:
    return {c.name: c for c in check_pool(pool, cfg.pools[pool], [node], "profiles.yaml")}


@pytest.mark.parametrize("pool,node", [("gput4", T4_NODE), ("gpumig", A100_MIG_NODE)])
def test_a_healthy_node_as_the_gpu_operator_labels_it_passes(cfg, pool, node):
    result = checks(cfg, pool, node)
    assert {name: c.status for name, c in result.items() if c.status != OK} == {}
    assert {"nodes", "labels", "taints", "allocatable"} <= set(result)


@pytest.mark.parametrize("label,value,check", [
    ("nvidia.com/gpu.replicas", "1", "labels"),               # time-slicing config not applied to the node
    ("nvidia.com/gpu.sharing-strategy", "none", "labels"),
])
def test_t4_without_time_slicing_fails(cfg, label, value, check):
    node = copy.deepcopy(T4_NODE)
    node["metadata"]["labels"][label] = value
    node["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    result = checks(cfg, "gput4", node)
    assert result[check].status == FAIL and label in result[check].detail
    assert result["allocatable"].status == FAIL and "nvidia.com/gpu=1 (want 4)" in result["allocatable"].detail


@pytest.mark.parametrize("label,value,check", [
    ("nvidia.com/mig.config", "all-disabled", "MIG layout"),
    ("nvidia.com/mig.config.state", "failed", "MIG state"),
    ("nvidia.com/mig.strategy", "single", "labels"),
])
def test_a100_with_the_wrong_mig_setup_fails(cfg, label, value, check):
    node = copy.deepcopy(A100_MIG_NODE)
    node["metadata"]["labels"][label] = value
    result = checks(cfg, "gpumig", node)
    assert result[check].status == FAIL and value in result[check].detail


def test_a_gpu_node_without_the_pool_taint_fails(cfg):
    node = copy.deepcopy(T4_NODE)
    node["spec"]["taints"] = []
    result = checks(cfg, "gput4", node)
    assert result["taints"].status == FAIL and "sku=gpu:NoSchedule" in result["taints"].detail


@pytest.mark.parametrize("pool,node", [("gput4", T4_NODE), ("gpumig", A100_MIG_NODE)])
def test_the_products_node_facts_agree_with_the_gpu_operator(cfg, pool, node):
    """What the dev cluster puts on its simulated nodes must be what a real node carries (gpu.memory
    aside: NVML reports a little less than the board's size, and it varies by driver)."""
    from jupyterhub_gpu.model.node_facts import gpu_labels

    facts = {k: v for k, v in gpu_labels(cfg.pools[pool]).items() if k != "nvidia.com/gpu.memory"}
    real = node["metadata"]["labels"]
    assert {k: (v, real.get(k)) for k, v in facts.items() if real.get(k) != v} == {}
