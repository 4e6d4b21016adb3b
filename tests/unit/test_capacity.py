"""Live capacity folded from watch events, the picker entries and the plain-language explanations (pure)."""
from __future__ import annotations

import pytest

from jupyterhub_gpu.hub import picker
from jupyterhub_gpu.hub import progress as explain
from jupyterhub_gpu.hub.capacity import ClusterState
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu_dev.nodes import build_nodes


@pytest.fixture
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def ready(node):
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return node


def pod(name, profile_resource=None, count=1, node=None, pool=None, phase="Pending", cpu="1", ns="jhub",
        labels=None):
    limits = {"cpu": cpu, "memory": "1Gi"}
    if profile_resource:
        limits[profile_resource] = str(count)
    spec = {"containers": [{"name": "c", "resources": {"limits": limits, "requests": dict(limits)}}]}
    if node:
        spec["nodeName"] = node
    if pool:
        spec["nodeSelector"] = {"kubernetes.azure.com/agentpool": pool}
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}}, "spec": spec,
            "status": {"phase": phase}}


@pytest.fixture
def state(cfg):
    s = ClusterState(cfg)
    s.replace("nodes", [ready(n) for n in build_nodes(cfg, 2)])
    return s


MIG = "nvidia.com/mig-1g.10gb"
MIG_NODE = "aks-gpumig-00000001-vmss000000"


def test_free_slots_follow_pod_events(state, cfg):
    prof = cfg.by_slug["a100-mig-1g10gb"]
    assert state.profile_capacity(prof).summary == "14 of 14 A100 80GB MIG 1g.10gb slices free"
    state.apply_pod("ADDED", pod("a", MIG, 3, node=MIG_NODE, phase="Running"))
    cap = state.profile_capacity(prof)
    assert (cap.free_slots, cap.total_slots) == (11, 14)
    state.apply_pod("MODIFIED", pod("a", MIG, 3, node=MIG_NODE, phase="Succeeded"))
    assert state.profile_capacity(prof).free_slots == 14
    state.apply_pod("ADDED", pod("b", MIG, 2, node=MIG_NODE, phase="Running"))
    state.apply_pod("DELETED", pod("b", MIG, 2, node=MIG_NODE, phase="Running"))
    assert state.profile_capacity(prof).free_slots == 14


def test_full_pool_says_who_waits_and_what_happens(state, cfg):
    prof = cfg.by_slug["h100-full"]
    for i, node in enumerate(n for n in state.nodes if "gpuh100" in n):
        state.apply_pod("ADDED", pod(f"u{i}", "nvidia.com/gpu", node=node, phase="Running"))
    state.apply_pod("ADDED", pod("w1", "nvidia.com/gpu", pool="gpuh100"))
    state.apply_pod("ADDED", pod("w2", "nvidia.com/gpu", pool="gpuh100"))
    cap = state.profile_capacity(prof)
    assert cap.full and cap.waiting == 2
    # the example's H100 pool has max_nodes 2 and both run, so it cannot grow
    assert (cap.summary, cap.outlook) == ("pool full — 2 waiting", "you will wait until someone else's server stops")


def test_pool_that_can_grow_and_pool_scaled_to_zero(cfg):
    s = ClusterState(cfg)
    s.replace("nodes", [ready(n) for n in build_nodes(cfg, {"system": 1, "gput4": 1})])
    t4 = cfg.by_slug["t4-shared"]
    for i in range(4):
        s.apply_pod("ADDED", pod(f"t{i}", "nvidia.com/gpu", node="aks-gput4-00000001-vmss000000", phase="Running"))
    assert s.profile_capacity(t4).outlook == "you will queue while the pool adds a node (a few minutes)"
    mig = s.profile_capacity(cfg.by_slug["a100-mig-1g10gb"])
    assert mig.summary == "no A100 80GB MIG 1g.10gb slices running now"
    assert mig.outlook.startswith("the pool scales up from zero")


def test_cpu_profile_counts_cpu_memory_not_gpu_nodes(state, cfg):
    cap = state.profile_capacity(cfg.by_slug["cpu"])
    # two D8s_v5 nodes (8 CPU, 32 GiB): 2 CPU + 8.5 GiB each → 3 per node by memory
    assert cap.fits_now == 6 and cap.summary == "room for 6 more servers"


def test_relist_replaces_old_knowledge(state, cfg):
    state.apply_pod("ADDED", pod("a", MIG, 7, node=MIG_NODE, phase="Running"))
    state.replace("pods", [])
    assert state.profile_capacity(cfg.by_slug["a100-mig-1g10gb"]).free_slots == 14


def test_servers_by_profile_for_metrics(state):
    su = {"component": "singleuser-server", "gpuhub.io/profile": "t4-shared"}
    state.apply_pod("ADDED", pod("r", "nvidia.com/gpu", node="aks-gput4-00000001-vmss000000", phase="Running",
                                 labels=su))
    state.apply_pod("ADDED", pod("p", "nvidia.com/gpu", pool="gput4", labels=su))
    running, pending = state.servers_by_profile()
    assert running["t4-shared"] == 1 and pending["t4-shared"] == 1


def test_picker_entry(cfg, state):
    prof = cfg.by_slug["a100-mig-1g10gb"]
    entry = picker.profile_entry(cfg, prof, False, state.profile_capacity(prof))
    g = entry["gpuhub"]
    assert g["gpu"] == "NVIDIA A100 80GB · MIG slice 1g.10gb · 10 GB GPU memory, its own compute"
    assert g["size"] == "3 CPU · 24 GiB RAM · 2 GiB /dev/shm"
    assert g["cost"] == "$0.52/hour"  # 3.67 / 7 slices
    assert g["capacity"] == "14 of 14 A100 80GB MIG 1g.10gb slices free" and g["free"] == 14
    assert entry["kubespawner_override"]["extra_resource_limits"] == {MIG: "1"}


def test_explain_insufficient_gpu(cfg, state):
    prof = cfg.by_slug["a100-mig-1g10gb"]
    for node in (n for n in state.nodes if "gpumig" in n):
        state.apply_pod("ADDED", pod(node, MIG, 7, node=node, phase="Running"))
    event = {"reason": "FailedScheduling", "message": "0/12 nodes are available: 2 Insufficient "
             "nvidia.com/mig-1g.10gb, 10 node(s) didn't match Pod's node affinity/selector. preemption: ..."}
    assert explain.explain_event(event, prof, state) == (
        "All 14 A100 80GB MIG 1g.10gb slices are in use; you are waiting for one to free up or for the pool to grow.")


def test_explain_mig_not_ready(cfg, state):
    prof = cfg.by_slug["a100-mig-1g10gb"]
    node = next(n for n in build_nodes(cfg, 2) if n["metadata"]["name"] == MIG_NODE)
    node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "pending"
    state.apply_node("MODIFIED", ready(node))
    event = {"reason": "FailedScheduling",
             "message": "0/12 nodes are available: 2 Insufficient nvidia.com/mig-1g.10gb."}
    assert "still being partitioned into MIG slices (mig.config.state: pending)" in explain.explain_event(
        event, prof, state)


@pytest.mark.parametrize("reason, message, expected", [
    ("Pulling", "Pulling image \"x\"", "Downloading the notebook image"),
    ("Failed", "Failed to pull image \"nvcr.io/x:bad\": not found", "could not be downloaded"),
    ("TriggeredScaleUp", "pod triggered scale-up", "adding a node for you"),
    ("Scheduled", "Successfully assigned jhub/jupyter-a to aks-gput4-0", "placed on aks-gput4-0"),
    ("FailedScheduling", "0/3 nodes are available: 3 node(s) had untolerated taint {sku: gpu}.", "gpuhub doctor"),
])
def test_explain_other_events(cfg, state, reason, message, expected):
    assert expected in explain.explain_event({"reason": reason, "message": message}, cfg.by_slug["t4-shared"], state)


def test_never_fits(cfg):
    s = ClusterState(cfg)
    nodes = [ready(n) for n in build_nodes(cfg, {"system": 1, "gpuh100": 2})]
    s.replace("nodes", nodes)
    assert explain.never_fits(cfg.by_slug["h100-full"], s) is None
    for n in nodes:  # the H100 nodes' device plugin reports no GPU
        if "gpuh100" in n["metadata"]["name"]:
            n["status"]["allocatable"]["nvidia.com/gpu"] = "0"
            s.apply_node("MODIFIED", n)
    msg = explain.never_fits(cfg.by_slug["h100-full"], s)
    assert "No node of the NVIDIA H100 NVL pool offers 1 x nvidia.com/gpu" in msg and "gpuhub doctor" in msg
    # a pool that can still grow is never declared impossible
    assert explain.never_fits(cfg.by_slug["t4-shared"], s) is None


def test_container_failure_message():
    pod_ = {"spec": {"nodeName": "n1"}, "status": {"containerStatuses": [
        {"ready": False, "state": {"terminated": {"exitCode": 3, "message": "GPU check failed on node n1: ..."}}}]}}
    # the server container's own words (user code runs there) are quoted, never taken for the GPU check's
    assert explain.container_failure(pod_) == "The server stopped on n1 before it was ready: GPU check failed on " \
        "node n1: ..."
    assert explain.gpu_check_failure(pod_) is None
    pod_["status"]["containerStatuses"][0]["state"]["terminated"] = {"exitCode": 1, "reason": "Error"}
    assert explain.container_failure(pod_) == "The server stopped on n1 before it was ready (exit code 1, Error)."
