"""A server that fits a pool's node only if the node were empty (issue 50 item 14): a 2-CPU CPU profile on a
2-CPU node where the hub's own pods already hold part of it waits with a plain reason, not Kubernetes' words; when
the pool cannot grow it never starts, and the spawn ends at once saying why."""
from __future__ import annotations

from jupyterhub_gpu.hub import progress
from jupyterhub_gpu.hub.capacity import ClusterState
from jupyterhub_gpu.model.validation import parse_profiles_text

PROFILES = """
pools:
  system:
    node_selector: {kubernetes.azure.com/agentpool: system}
    max_nodes: %d
profiles:
  - {slug: cpu, display_name: CPU only, pool: system, cpu: 2, memory: 4Gi, default: true}
  - {slug: small, display_name: Small, pool: system, cpu: 1, memory: 2Gi}
"""
UNSCHEDULABLE = {"reason": "FailedScheduling", "message": "0/1 nodes are available: 1 Insufficient cpu."}


def state(max_nodes: int, gpu_jobs_cpu: str = "200m", server_cpu: str | None = None) -> ClusterState:
    cfg = parse_profiles_text(PROFILES % max_nodes)
    st = ClusterState(cfg)
    labels = {"kubernetes.azure.com/agentpool": "system"}
    st.apply_node("ADDED", {"metadata": {"name": "aks-system-0", "labels": labels},
                            "spec": {}, "status": {"allocatable": {"cpu": "2", "memory": "23Gi", "pods": "110"},
                                                   "conditions": [{"type": "Ready", "status": "True"}]}})
    pods = [("gpu-jobs-0", gpu_jobs_cpu, {})]
    if server_cpu:
        pods.append(("jupyter-bob", server_cpu, {"gpuhub.io/profile": "small", "component": "singleuser-server"}))
    for name, cpu, labels in pods:
        st.apply_pod("ADDED", {"metadata": {"name": name, "namespace": "jhub", "labels": labels},
                               "spec": {"nodeName": "aks-system-0", "containers": [
                                   {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]},
                               "status": {"phase": "Running"}})
    return st


def test_a_server_that_fits_only_an_empty_node_says_so_while_the_pool_may_grow():
    st = state(max_nodes=5)
    said = progress.explain_event(UNSCHEDULABLE, st.cfg.profile("cpu"), st)
    assert said.startswith("'CPU only' needs 2 CPUs and 5 GiB; the CPU node aks-system-0 offers pods 2 CPUs and 23 GiB")
    assert "hold 0.2 CPUs and 256 MiB of it, so it fits only on an empty node" in said
    assert said.endswith("You are waiting for the pool to add a node.")
    assert progress.never_fits(st.cfg.profile("cpu"), st) is None  # a new node would be empty


def test_it_never_starts_when_the_pool_cannot_grow():
    st = state(max_nodes=1)
    said = progress.never_fits(st.cfg.profile("cpu"), st)
    assert "fits only on an empty node" in said and "can never start" in said


def test_servers_and_jobs_on_the_node_are_a_wait_not_a_never():
    """Another server holds the room: it will leave, so this is the usual 'no room left' wait."""
    st = state(max_nodes=1, gpu_jobs_cpu="0", server_cpu="1")
    assert progress.fits_only_empty(st.cfg.profile("cpu"), st) is None
    assert progress.never_fits(st.cfg.profile("cpu"), st) is None
    said = progress.explain_event(UNSCHEDULABLE, st.cfg.profile("cpu"), st)
    assert said.startswith("The CPU nodes have no cpu left for a server this size")  # not "cpu." (the event's dot)


def test_a_profile_that_fits_beside_the_hubs_pods_is_not_held():
    st = state(max_nodes=1)
    assert progress.fits_only_empty(st.cfg.profile("small"), st) is None
