"""Pool ↔ node matching (model/node_pools.py), the one rule live capacity and `gpuhub doctor` use; nodes
written out with the labels AKS puts on them."""
from __future__ import annotations

import pytest

from jupyterhub_gpu.hub.capacity import ClusterState
from jupyterhub_gpu.model.node_pools import in_pool, label_selector, nodes_in_pool, pool_of
from jupyterhub_gpu.model.profiles import Pool
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.tools.doctor import pool_nodes

AGENTPOOL = "kubernetes.azure.com/agentpool"


def node(name, **labels):
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


NODES = [
    node("aks-gput4-1", **{AGENTPOOL: "gput4", "nvidia.com/gpu.product": "Tesla-T4"}),
    node("aks-gpumig-1", **{AGENTPOOL: "gpumig", "kubernetes.io/os": "linux"}),
    node("aks-system-1", **{AGENTPOOL: "system"}),
    node("aks-other-1", **{AGENTPOOL: "userpool"}),       # a pool the file does not know
    {"metadata": {"name": "bare"}},                       # no labels at all
]
WANT = {"aks-gput4-1": "gput4", "aks-gpumig-1": "gpumig", "aks-system-1": "system", "aks-other-1": None,
        "bare": None}


@pytest.fixture(scope="module")
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def test_each_node_in_the_pool_its_labels_name(cfg):
    assert {n["metadata"]["name"]: pool_of(cfg.pools, n["metadata"].get("labels") or {}) for n in NODES} == WANT


def test_capacity_and_doctor_agree(cfg):
    state = ClusterState(cfg)
    for n in NODES:
        state.apply_node("ADDED", n)
    assert {name: s.pool for name, s in state.nodes.items()} == WANT
    for pool_name, pool in cfg.pools.items():
        mine = sorted(n["metadata"]["name"] for n in pool_nodes(pool, NODES))
        assert mine == sorted(n for n, p in WANT.items() if p == pool_name)
        assert mine == sorted(n["metadata"]["name"] for n in nodes_in_pool(pool_name, cfg.pools, NODES))


def test_every_selector_label_must_match():
    pool = Pool(node_selector={AGENTPOOL: "gpu", "gpu.example/model": "a100"})
    assert in_pool(pool, {AGENTPOOL: "gpu", "gpu.example/model": "a100", "extra": "x"})
    assert not in_pool(pool, {AGENTPOOL: "gpu"})
    assert not in_pool(pool, {AGENTPOOL: "gpu", "gpu.example/model": "h100"})
    assert label_selector(pool) == f"{AGENTPOOL}=gpu,gpu.example/model=a100"


def test_the_first_pool_listed_owns_a_node_two_selectors_match():
    broad, narrow = Pool(node_selector={"tier": "gpu"}), Pool(node_selector={"tier": "gpu", "zone": "1"})
    labels = {"tier": "gpu", "zone": "1"}
    assert pool_of({"broad": broad, "narrow": narrow}, labels) == "broad"
    assert pool_of({"narrow": narrow, "broad": broad}, labels) == "narrow"
    assert pool_of({"narrow": narrow}, {"tier": "gpu"}) is None
