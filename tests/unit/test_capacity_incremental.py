"""Incremental capacity equals the full recompute after every watch event (property test).

Random sequences of node and pod events — pods that appear, change phase, get scheduled, go away;
nodes that change allocatable, labels (pool), taints, readiness or MIG state, disappear and come back;
relists of either kind — are folded into one `ClusterState`. After each event every profile's counters
must equal `recompute` (the exact scan over the records) and a fresh state listed from the same
objects (so history cannot matter), and the hub's server metrics must match the pods.
"""
from __future__ import annotations

import copy
from collections import Counter

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.contract import PROFILE_LABEL
from jupyterhub_gpu.hub.capacity import ClusterState, milli, pod_requests
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import parse_profiles_text
from jupyterhub_gpu_dev.nodes import build_nodes

POOL_LABEL = "kubernetes.azure.com/agentpool"


def _config():
    doc = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    # a profile without a pool: it counts every node outside the GPU pools (the CPU scope)
    doc["profiles"].append({"slug": "plain", "display_name": "Plain", "cpu": "500m", "memory": "1Gi"})
    return parse_profiles_text(yaml.safe_dump(doc))


CFG = _config()
TEMPLATES = {n["metadata"]["labels"][POOL_LABEL]: n for n in build_nodes(CFG, 1)}
POOLS = sorted(TEMPLATES) + ["elsewhere"]  # "elsewhere": a node in no pool of the file
NODE_NAMES = [f"node-{i}" for i in range(4)]
GPU_RESOURCES = sorted({CFG.resource_name(p) for p in CFG.profiles if CFG.resource_name(p)})

node_events = st.fixed_dictionaries({
    "event": st.just("node"),
    "kind": st.sampled_from(["ADDED", "MODIFIED", "MODIFIED", "DELETED"]),
    "name": st.sampled_from(NODE_NAMES),
    "pool": st.sampled_from(POOLS),
    "ready": st.booleans(),
    "cordoned": st.booleans(),
    "taint": st.sampled_from([None, None, ("node.kubernetes.io/unschedulable", "NoSchedule"),
                              ("ToBeDeletedByClusterAutoscaler", "NoSchedule"),
                              ("node.kubernetes.io/not-ready", "PreferNoSchedule"), ("team", "NoSchedule")]),
    "cpu": st.sampled_from(["0", "1", "2500m", "8", "23.66"]),
    "memory": st.sampled_from(["0", "4Gi", "32Gi", "226666479616"]),
    "gpus": st.one_of(st.none(), st.integers(0, 8)),
    "mig": st.sampled_from([None, "success", "pending"]),
})

pod_events = st.fixed_dictionaries({
    "event": st.just("pod"),
    "kind": st.sampled_from(["ADDED", "MODIFIED", "MODIFIED", "DELETED"]),
    "name": st.sampled_from([f"p{i}" for i in range(8)]),
    "namespace": st.sampled_from(["jhub", "team-a"]),
    "node": st.sampled_from([None, None, "ghost"] + NODE_NAMES),
    "selector": st.sampled_from(POOLS + [None]),
    "cpu": st.sampled_from(["100m", "900m", "1", "2", "0.3333"]),
    "memory": st.sampled_from(["256Mi", "1Gi", "9126805504"]),
    "gpu": st.one_of(st.none(), st.tuples(st.sampled_from(GPU_RESOURCES), st.integers(0, 4), st.booleans())),
    "init_cpu": st.one_of(st.none(), st.sampled_from(["1", "4"])),
    "phase": st.sampled_from(["Pending", "Running", "Running", "Succeeded", "Failed", None]),
    "server": st.booleans(),
    "profile": st.sampled_from([None, "t4-shared", "a100-mig-1g10gb"]),
})

relists = st.fixed_dictionaries({"event": st.just("relist"), "kind": st.sampled_from(["nodes", "pods"])})

events = st.lists(st.one_of(node_events, node_events, pod_events, pod_events, pod_events, relists),
                  min_size=1, max_size=50)


def node_manifest(e) -> dict:
    template = TEMPLATES.get(e["pool"]) or TEMPLATES["system"]
    node = copy.deepcopy(template)
    node["metadata"]["name"] = e["name"]
    labels = node["metadata"]["labels"]
    labels[POOL_LABEL] = e["pool"]
    labels.pop("nvidia.com/mig.config.state", None)
    if e["mig"]:
        labels["nvidia.com/mig.config.state"] = e["mig"]
    alloc = node["status"]["allocatable"]
    alloc.update(cpu=e["cpu"], memory=e["memory"])
    if e["gpus"] is not None:
        for r in GPU_RESOURCES:
            if r in alloc or e["pool"] == "elsewhere":
                alloc[r] = str(e["gpus"])
    spec = node.setdefault("spec", {})
    if e["cordoned"]:
        spec["unschedulable"] = True
    if e["taint"]:
        spec.setdefault("taints", []).append({"key": e["taint"][0], "effect": e["taint"][1]})
    node["status"]["conditions"] = [{"type": "Ready", "status": "True" if e["ready"] else "False"}]
    return node


def pod_manifest(e) -> dict:
    requests = {"cpu": e["cpu"], "memory": e["memory"]}
    limits = dict(requests)
    if e["gpu"]:
        resource, count, as_limit_only = e["gpu"]
        limits[resource] = str(count)
        if not as_limit_only:
            requests[resource] = str(count)
    spec = {"containers": [{"name": "c", "resources": {"requests": requests, "limits": limits}}]}
    if e["init_cpu"]:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": e["init_cpu"]}}}]
    if e["node"]:
        spec["nodeName"] = e["node"]
    if e["selector"]:
        spec["nodeSelector"] = {POOL_LABEL: e["selector"]}
    labels = {}
    if e["server"]:
        labels["component"] = "singleuser-server"
    if e["profile"]:
        labels[PROFILE_LABEL] = e["profile"]
    return {"metadata": {"name": e["name"], "namespace": e["namespace"], "labels": labels}, "spec": spec,
            "status": {"phase": e["phase"]} if e["phase"] else {}}


def servers(pods) -> tuple[Counter, Counter]:
    running, pending = Counter(), Counter()
    for p in pods:
        labels, phase = p["metadata"]["labels"], p["status"].get("phase")
        if labels.get("component") == "singleuser-server" and labels.get(PROFILE_LABEL) \
                and phase not in ("Succeeded", "Failed"):
            (running if phase == "Running" else pending)[labels[PROFILE_LABEL]] += 1
    return running, pending


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events)
def test_incremental_equals_recompute_after_every_event(sequence):
    state = ClusterState(CFG)
    nodes: dict[str, dict] = {}
    pods: dict[str, dict] = {}
    for e in sequence:
        if e["event"] == "node":
            obj = node_manifest(e)
            state.apply_node(e["kind"], copy.deepcopy(obj))
            if e["kind"] == "DELETED":
                nodes.pop(e["name"], None)
            else:
                nodes[e["name"]] = obj
        elif e["event"] == "pod":
            obj, key = pod_manifest(e), f"{e['namespace']}/{e['name']}"
            state.apply_pod(e["kind"], copy.deepcopy(obj))
            if e["kind"] == "DELETED":
                pods.pop(key, None)
            else:
                pods[key] = obj
        else:
            state.replace(e["kind"], copy.deepcopy(list((nodes if e["kind"] == "nodes" else pods).values())))
        fresh = ClusterState(CFG)
        fresh.replace("nodes", copy.deepcopy(list(nodes.values())))
        fresh.replace("pods", copy.deepcopy(list(pods.values())))
        for profile in CFG.profiles:
            incremental = state.profile_capacity(profile)
            assert incremental == state.recompute(profile), (profile.slug, e)
            assert incremental == fresh.profile_capacity(profile), (profile.slug, e)
        assert state.servers_by_profile() == servers(pods.values())
    # no counter is left behind once everything is gone
    for key, obj in list(pods.items()):
        state.apply_pod("DELETED", obj)
    for name, obj in list(nodes.items()):
        state.apply_node("DELETED", obj)
    for counts in (state._node_count, state._total, state._free, state._fits, state._waiting, state._servers):
        assert not +counts and not -counts
    assert state._used == {}


def test_quantities_are_exact_thousandths():
    assert milli("100m") == 100 and milli("0.3333") == 334  # rounded up, as the API server does
    assert milli("1Gi") == 2**30 * 1000 and milli(True) is None and milli("many") is None and milli([1]) is None
    pod = {"spec": {"containers": [
        {"resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1", "nvidia.com/gpu": "2"}}},
        {"resources": {"requests": {"cpu": "200m", "nvidia.com/gpu": "1"}}}],
        "initContainers": [{"resources": {"requests": {"cpu": "1", "memory": "bad"}}}]}}
    assert pod_requests(pod) == {"cpu": 1000, "nvidia.com/gpu": 3000}


def test_unready_cordoned_or_tainted_nodes_take_no_server():
    """Their slots still count (total and free), but nothing fits there now; the pool's own taint is tolerated."""
    state = ClusterState(CFG)
    t4 = CFG.by_slug["t4-shared"]
    base = dict(name="node-0", pool="gput4", ready=True, cordoned=False, taint=None, cpu="8", memory="32Gi",
                gpus=4, mig=None)
    state.apply_node("ADDED", node_manifest(base))
    fits = state.profile_capacity(t4).fits_now
    assert fits == 4 and (state.profile_capacity(t4).free_slots, state.profile_capacity(t4).total_slots) == (4, 4)
    for change in ({"ready": False}, {"cordoned": True}, {"taint": ("node.kubernetes.io/unschedulable", "NoSchedule")},
                   {"taint": ("ToBeDeletedByClusterAutoscaler", "NoSchedule")}):
        state.apply_node("MODIFIED", node_manifest({**base, **change}))
        cap = state.profile_capacity(t4)
        assert (cap.fits_now, cap.free_slots, cap.total_slots, cap.full) == (0, 4, 4, True), change
    for harmless in ({"taint": ("node.kubernetes.io/not-ready", "PreferNoSchedule")}, {}):
        state.apply_node("MODIFIED", node_manifest({**base, **harmless}))  # the template keeps the pool's sku=gpu taint
        assert state.profile_capacity(t4).fits_now == fits, harmless
    state.apply_node("MODIFIED", node_manifest({**base, "pool": "gpuh100"}))  # relabelled into another pool
    assert state.profile_capacity(t4).nodes == 0
    assert state.profile_capacity(CFG.by_slug["h100-full"]).nodes == 1
