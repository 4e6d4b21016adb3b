"""KWOK node manifests carry what AKS, the device plugin and GFD would publish (no cluster needed)."""
from __future__ import annotations

import pytest

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.model.validation import parse_profiles
from jupyterhub_gpu_dev.nodes import KWOK_ANNOTATION, SIMULATED_LABEL, build_nodes, gpu_labels, with_system_pool


@pytest.fixture(scope="module")
def example():
    return load_profiles(EXAMPLE_PROFILES)


def by_pool(nodes):
    out = {}
    for n in nodes:
        out.setdefault(n["metadata"]["labels"]["kubernetes.azure.com/agentpool"], []).append(n)
    return out


TAINT = [{"key": "sku", "value": "gpu"}]


def cfg_with(pools):
    return parse_profiles({"pools": pools, "profiles": [{"slug": "x", "display_name": "X"}]})


def test_n_nodes_per_pool_with_unique_names(example):
    nodes = build_nodes(example, 3)
    pools = by_pool(nodes)
    assert set(pools) == set(example.pools)
    assert all(len(v) == 3 for v in pools.values())
    assert len({n["metadata"]["name"] for n in nodes}) == len(nodes)
    assert len(build_nodes(example, {"gput4": 5})) == 5


def test_every_node_is_marked_simulated_and_managed_by_kwok(example):
    for n in build_nodes(example, 1):
        assert n["metadata"]["annotations"][KWOK_ANNOTATION] == "fake"
        assert n["metadata"]["labels"][SIMULATED_LABEL] == "true"
        assert n["metadata"]["labels"]["kubernetes.io/hostname"] == n["metadata"]["name"]


def test_time_sliced_t4_pool(example):
    (node,) = by_pool(build_nodes(example, 1))["gput4"]
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.azure.com/accelerator"] == "nvidia"
    assert labels["node.kubernetes.io/instance-type"] == "Standard_NC4as_T4_v3"
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.count"] == "1"
    assert labels["nvidia.com/gpu.memory"] == str(16 * 1024)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node["status"]["allocatable"]["cpu"] == "3.86"  # NC4as_T4_v3 as AKS allocates it (model/vm_sizes.py)
    assert node["spec"]["taints"] == [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]


def test_mig_mixed_pool(example):
    (node,) = by_pool(build_nodes(example, 1))["gpumig"]
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig.config"] == "all-1g.10gb"
    assert labels["nvidia.com/mig.config.state"] == "success"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "7"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-80GB-PCIe"
    assert node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "7"
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]


def test_spot_pool_has_the_aks_spot_label_and_taint(example):
    (node,) = by_pool(build_nodes(example, 1))["spota100"]
    assert node["metadata"]["labels"]["kubernetes.azure.com/scalesetpriority"] == "spot"
    assert {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"} \
        in node["spec"]["taints"]


def test_cpu_pool_is_untainted_without_gpu_labels(example):
    (node,) = by_pool(build_nodes(example, 1))["system"]
    assert "taints" not in node["spec"]
    assert not [k for k in node["metadata"]["labels"] if k.startswith("nvidia.com/")]
    assert "kubernetes.azure.com/accelerator" not in node["metadata"]["labels"]


def test_a_system_pool_is_added_when_the_file_has_no_cpu_pool():
    cfg = cfg_with({"h100": {"node_selector": {"kubernetes.azure.com/agentpool": "h100"},
                             "gpu": {"model": "H100-80GB"}, "taints": TAINT}})
    assert set(with_system_pool(cfg)) == {"h100", "system"}
    pools = by_pool(build_nodes(cfg, 1))
    assert "taints" not in pools["system"][0]["spec"]


def test_mig_single_and_renamed_time_slicing():
    cfg = cfg_with({
        "single": {"node_selector": {"pool": "single"}, "taints": TAINT,
                   "gpu": {"model": "A100-40GB", "count_per_node": 2},
                   "sharing": {"strategy": "mig", "mig_strategy": "single", "layout": "all-3g.20gb"}},
        "renamed": {"node_selector": {"pool": "renamed"}, "gpu": {"model": "T4"}, "taints": TAINT,
                    "sharing": {"strategy": "time-slicing", "replicas": 2, "rename_by_default": True}},
    })
    single = gpu_labels(cfg.pools["single"])
    assert single["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"
    assert single["nvidia.com/gpu.count"] == "4"
    assert single["nvidia.com/mig-3g.20gb.count"] == "4"
    renamed = gpu_labels(cfg.pools["renamed"])
    assert renamed["nvidia.com/gpu.product"] == "Tesla-T4"
    nodes = by_pool(build_nodes(cfg, 1))
    # the pool's own node_selector labels are on the node (the agentpool label is the pool name)
    assert nodes["single"][0]["metadata"]["labels"]["pool"] == "single"
    assert nodes["single"][0]["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert nodes["renamed"][0]["status"]["allocatable"]["nvidia.com/gpu.shared"] == "2"
