"""A GPU pool's measured time to add a node (hub/node_add_times.py): the samples from real-shaped Node and Pod
watch objects, their bounds, the picker's words once wired into the informers, the spawn page's countdown,
and the samples kept across a hub restart in the pool history file."""
from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.hub import progress as explain
from jupyterhub_gpu.hub.capacity import ClusterState
from jupyterhub_gpu.hub.capacity_text import node_add_countdown
from jupyterhub_gpu.hub.informers import CapacityInformers
from jupyterhub_gpu.hub.node_add_times import (
    MAX_SAMPLE_S,
    NodeAddTimes,
    asked_at,
    ready_at,
    sample_seconds,
    unschedulable_since,
    watch,
    with_sample,
)
from jupyterhub_gpu.hub.pool_history_file import HistoryFile, dump, load_into
from jupyterhub_gpu.hub.pool_wait_estimate import PoolHistory
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

CFG = load_profiles(EXAMPLE_PROFILES)
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
START = T0 - timedelta(hours=1)  # the hub started watching before everything here
Z = "%Y-%m-%dT%H:%M:%SZ"  # how the API server writes times


def node(name, pool="gput4", created=T0, ready=None, uid=None):
    """A Node as the API sends it (an AKS GPU node; Ready False until the kubelet reports, as a new node is)."""
    conds = [{"type": t, "status": "False", "reason": f"KubeletHasNo{t}", "lastHeartbeatTime": created.strftime(Z),
              "lastTransitionTime": created.strftime(Z)} for t in ("MemoryPressure", "DiskPressure", "PIDPressure")]
    conds.append({"type": "Ready", "status": "True" if ready else "False",
                  "reason": "KubeletReady" if ready else "KubeletNotReady",
                  "message": "kubelet is posting ready status" if ready else "container runtime network not ready",
                  "lastHeartbeatTime": (ready or created).strftime(Z),
                  "lastTransitionTime": (ready or created).strftime(Z)})
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "uid": uid or f"uid-{name}", "creationTimestamp": created.strftime(Z),
                         "resourceVersion": "1",
                         "labels": {"kubernetes.azure.com/agentpool": pool, "kubernetes.io/hostname": name,
                                    "nvidia.com/gpu.product": "Tesla-T4"}},
            "spec": {"providerID": f"azure:///subscriptions/x/{name}",
                     "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "3860m", "memory": "24000Mi", "nvidia.com/gpu": "4", "pods": "110"},
                       "conditions": conds}}


def pod(name, since=None, pool="gput4", bound=None, ns="jhub"):
    """A server pod as the API sends it: unschedulable since `since`, or bound to a node."""
    if bound:
        cond = {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                "lastTransitionTime": bound.strftime(Z)}
    else:
        cond = {"type": "PodScheduled", "status": "False", "lastProbeTime": None, "reason": "Unschedulable",
                "lastTransitionTime": since.strftime(Z),
                "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. "
                           "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."}
    spec = {"nodeSelector": {"kubernetes.azure.com/agentpool": pool},
            "containers": [{"name": "notebook", "image": "quay.io/jupyter/pytorch-notebook",
                            "resources": {"limits": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"},
                                          "requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}}}]}
    if bound:
        spec["nodeName"] = "aks-gput4-1"
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}",
                         "creationTimestamp": (since or bound).strftime(Z),
                         "labels": {"component": "singleuser-server"}},
            "spec": spec, "status": {"phase": "Running" if bound else "Pending", "conditions": [cond]}}


def adds(since=START):
    return NodeAddTimes(lambda: CFG, since)


# ---------------------------------------------------------------------------------------------- pure pieces
def test_the_times_are_read_from_the_conditions():
    assert unschedulable_since(pod("a", T0)) == T0
    assert unschedulable_since(pod("a", bound=T0)) is None
    gated = pod("g", T0)
    gated["status"]["conditions"][0]["reason"] = "SchedulingGated"  # Kueue's gate: not waiting for a node
    assert unschedulable_since(gated) is None
    assert ready_at(node("n", ready=T0 + timedelta(minutes=5))) == T0 + timedelta(minutes=5)
    assert ready_at(node("n")) is None
    assert ready_at({"metadata": {}, "status": {"conditions": [{"type": "Ready", "status": "True",
                                                                "lastTransitionTime": "not a time"}]}}) is None


def test_the_earliest_pod_still_waiting_when_the_node_was_created_asked():
    t = [(T0 + timedelta(minutes=m), None) for m in (3, 1, 7)]
    assert asked_at(t, T0 + timedelta(minutes=5)) == T0 + timedelta(minutes=1)
    assert asked_at(t[2:], T0 + timedelta(minutes=5)) is None  # it came after the node: not the one that asked
    gone = [(T0, T0 + timedelta(minutes=4)), (T0 + timedelta(minutes=2), T0 + timedelta(minutes=6))]
    assert asked_at(gone, T0 + timedelta(minutes=5)) == T0 + timedelta(minutes=2)  # the first left before
    assert sample_seconds(T0, T0 + timedelta(minutes=6)) == 360
    assert sample_seconds(T0, T0 - timedelta(seconds=1)) is None
    assert sample_seconds(T0, T0 + timedelta(seconds=MAX_SAMPLE_S + 1)) is None
    assert with_sample(list(range(20)), 99) == list(range(1, 20)) + [99]


def test_a_node_added_while_a_server_waits_is_a_sample():
    a = adds()
    a.apply_pod("ADDED", pod("jupyter-ann", T0), "gput4")
    a.apply_pod("ADDED", pod("jupyter-bob", T0 + timedelta(minutes=1)), "gput4")
    created = T0 + timedelta(minutes=2)
    assert not a.apply_node("ADDED", node("aks-gput4-1", created=created))  # NotReady: not yet
    assert a.samples == {}
    a.apply_pod("MODIFIED", pod("jupyter-ann", T0), "gput4")  # the scheduler tries again, still waiting
    assert a.apply_node("MODIFIED", node("aks-gput4-1", created=created, ready=T0 + timedelta(minutes=6)))
    assert a.samples == {"gput4": [360.0]}  # from ann's unschedulable time (the earliest) to Ready
    assert not a.apply_node("MODIFIED", node("aks-gput4-1", created=created, ready=T0 + timedelta(minutes=6)))
    a.replace_nodes([node("aks-gput4-1", created=created, ready=T0 + timedelta(minutes=6))])  # a relist
    assert a.samples == {"gput4": [360.0]}  # once per node


def test_a_node_seen_after_the_pod_it_was_added_for_was_bound_still_counts():
    """A node Ready at once (KWOK's): the scheduler binds the pod before the hub sees the node's ADDED."""
    a = adds()
    created = T0 + timedelta(minutes=5)
    a.apply_pod("ADDED", pod("jupyter-ann", T0), "gput4")
    a.apply_pod("MODIFIED", pod("jupyter-ann", bound=created + timedelta(seconds=1)), "gput4")
    assert a.apply_node("ADDED", node("aks-gput4-1", created=created, ready=created))
    assert a.samples == {"gput4": [300.0]}
    a.apply_pod("ADDED", pod("jupyter-bob", T0 + timedelta(hours=1)), "gput4")
    a.apply_pod("DELETED", pod("jupyter-bob", T0 + timedelta(hours=1)), "gput4")  # gave up: gone now, not later
    late = datetime.now(timezone.utc) + timedelta(minutes=1)
    assert not a.apply_node("ADDED", node("aks-gput4-2", created=late, ready=late))


def test_a_node_created_in_the_second_the_hub_began_watching_counts():
    """creationTimestamp has whole seconds: a node made 0.4 s after the watch began reads as before it."""
    a = adds(since=T0 + timedelta(seconds=0.6))
    a.apply_pod("ADDED", pod("jupyter-ann", T0), "gput4")
    assert a.apply_node("ADDED", node("aks-gput4-1", created=T0, ready=T0 + timedelta(seconds=3)))


def test_nodes_that_are_not_samples():
    a = adds(since=T0)
    a.apply_pod("ADDED", pod("ann", T0 - timedelta(minutes=30)), "gput4")
    a.apply_node("ADDED", node("old", created=T0 - timedelta(minutes=1), ready=T0))  # before the hub watched
    a.apply_node("ADDED", node("cpu", pool="system", created=T0 + timedelta(minutes=1), ready=T0 + timedelta(1)))
    a.apply_node("ADDED", node("other", pool="gpuh100", created=T0 + timedelta(minutes=1),
                               ready=T0 + timedelta(minutes=5)))  # nobody waited for that pool
    a.apply_node("ADDED", node("late", created=T0 + timedelta(hours=3), ready=T0 + timedelta(hours=3, minutes=1)))
    assert a.samples == {}  # ann waited 3.5 h by then: over the bound, not a time to add a node
    a.apply_pod("DELETED", pod("ann", T0 - timedelta(minutes=30)), "gput4")
    a.apply_node("ADDED", node("n2", created=T0 + timedelta(hours=4), ready=T0 + timedelta(hours=4, minutes=5)))
    assert a.samples == {}  # nobody waits any more


def test_the_pool_at_zero_is_remembered_per_waiting_pod():
    a = adds()
    a.apply_pod("ADDED", pod("ann", T0), "gput4")
    a.apply_node("ADDED", node("n1", created=T0 + timedelta(minutes=1)))
    a.apply_pod("ADDED", pod("bob", T0 + timedelta(minutes=2)), "gput4")  # the pool has a node now
    a.apply_pod("MODIFIED", pod("ann", T0), "gput4")
    assert a.waiting["jhub/ann"].at_zero and not a.waiting["jhub/bob"].at_zero
    a.forget_pods()  # a pod relist: ann still waits since the pool was at zero
    for name, since in (("ann", T0), ("bob", T0 + timedelta(minutes=2))):
        a.apply_pod("ADDED", pod(name, since), "gput4")
    assert a.waiting["jhub/ann"].at_zero and not a.waiting["jhub/bob"].at_zero
    a.samples["gput4"] = [300.0]
    assert a.countdown("jhub", "ann", T0 + timedelta(minutes=1)) == "a node is being added: about 4 min left"
    assert a.countdown("jhub", "bob", T0 + timedelta(minutes=3)) is None
    a.apply_pod("MODIFIED", pod("ann", bound=T0 + timedelta(minutes=6)), "gput4")
    assert a.countdown("jhub", "ann") is None  # placed: nothing to count down


WHEN = st.integers(min_value=-4 * 3600, max_value=4 * 3600).map(lambda s: T0 + timedelta(seconds=s))


@settings(max_examples=200)
@given(st.lists(WHEN, min_size=0, max_size=8), WHEN, st.integers(min_value=-600, max_value=3 * 3600),
       st.randoms(use_true_random=False))
def test_any_order_of_pod_events_gives_the_same_bounded_sample(waits, created, ready_after, rnd):
    ready = created + timedelta(seconds=ready_after)
    pods = [pod(f"p{i}", t) for i, t in enumerate(waits)]
    rnd.shuffle(pods)
    a = adds(since=T0 - timedelta(hours=5))
    for p in pods:
        a.apply_pod("ADDED", p, "gput4")
    a.apply_node("ADDED", node("n", created=created))
    a.apply_node("MODIFIED", node("n", created=created, ready=ready))
    asked = [t for t in waits if t <= created]
    want = (ready - min(asked)).total_seconds() if asked else None
    if want is None or not 0 <= want <= MAX_SAMPLE_S:
        assert a.samples == {}
    else:
        assert a.samples == {"gput4": [want]}


@given(st.lists(st.integers(min_value=0, max_value=3 * 3600), max_size=60))
def test_at_most_the_last_20_are_kept_each_in_bounds(durations):
    a = adds()
    for i, d in enumerate(durations):
        created = T0 + timedelta(hours=7 * i)  # apart: each pod bound before the next node
        a.apply_pod("ADDED", pod(f"p{i}", created), "gput4")
        a.apply_node("ADDED", node(f"n{i}", created=created, ready=created + timedelta(seconds=d)))
        a.apply_pod("MODIFIED", pod(f"p{i}", bound=created + timedelta(seconds=d)), "gput4")  # on its node
    kept = [float(d) for d in durations if d <= MAX_SAMPLE_S][-20:]
    assert a.samples.get("gput4", []) == kept


@given(st.floats(min_value=0, max_value=MAX_SAMPLE_S), st.floats(allow_nan=True, allow_infinity=True))
def test_the_countdown_is_never_negative(node_add_s, waited_s):
    text = node_add_countdown(node_add_s, waited_s)
    waited = max(0.0, waited_s) if math.isfinite(waited_s) else math.inf  # a clock behind: nothing waited yet
    if text.startswith("a node is being added: about "):
        n = int(text.split("about ")[1].split()[0])
        assert 1 <= n <= max(1, math.ceil(node_add_s / 60)) and waited < node_add_s
    else:
        assert "taking longer than usual" in text and waited >= node_add_s
    assert "-" not in text


# ---------------------------------------------------------------------------------------------- wiring
def informers():
    inf = CapacityInformers(CFG, SimpleNamespace(list_node=None, list_pod_for_all_namespaces=None))
    history = PoolHistory(lambda: inf.state.cfg)
    history.watch(inf)
    history.node_adds.since = START
    inf.nodes.synced.set()  # as after their first lists (nothing is started here)
    inf.pods.synced.set()
    return inf, history


def test_the_picker_says_the_measured_time_once_a_node_was_added():
    inf, history = informers()
    t4 = CFG.profile("t4-shared")
    inf.nodes.replace([])
    inf._replace_pods([])
    assert inf.state.profile_capacity(t4).outlook == "the pool scales up from zero: a node takes a few minutes"
    inf._apply_pod("ADDED", pod("jupyter-ann", T0))
    inf.nodes.apply("ADDED", node("aks-gput4-1", created=T0 + timedelta(seconds=30)))
    inf.nodes.apply("MODIFIED", node("aks-gput4-1", created=T0 + timedelta(seconds=30),
                                     ready=T0 + timedelta(minutes=6, seconds=1)))
    assert history.node_adds.samples == {"gput4": [361.0]}
    inf.nodes.apply("DELETED", node("aks-gput4-1"))  # scaled back to zero later
    assert inf.state.profile_capacity(t4).outlook == "starts in ~7 min (a node is added)"
    assert inf.state.profile_capacity(CFG.profile("h100-full")).outlook.startswith("the pool scales up")  # own pool
    inf.state = ClusterState(CFG)  # a profiles change: a new state, filled by the next node list
    inf.nodes.replace([])
    assert inf.state.profile_capacity(t4).outlook == "starts in ~7 min (a node is added)"


def test_the_spawn_page_counts_the_wait_down():
    inf, history = informers()
    t4 = CFG.profile("t4-shared")
    history.node_adds.samples["gput4"] = [300.0, 360.0, 420.0]
    inf.nodes.replace([])
    inf._apply_pod("ADDED", pod("jupyter-ann", T0))
    event = {"reason": "TriggeredScaleUp", "involvedObject": {"kind": "Pod", "namespace": "jhub",
                                                              "name": "jupyter-ann"},
             "message": "pod triggered scale-up: [{aks-gput4-vmss 0->1 (max: 4)}]"}
    said = explain.node_add_message(inf.state, t4, "jhub", "jupyter-ann", T0 + timedelta(minutes=2))
    assert said == "The NVIDIA T4 pool had no nodes when your server asked; a node is being added: about 4 min left."
    assert explain.explain_event(event, t4, inf.state).startswith("The NVIDIA T4 pool had no nodes when your server")
    late = explain.node_add_message(inf.state, t4, "jhub", "jupyter-ann", T0 + timedelta(minutes=7))
    assert late.endswith("a node is being added and is taking longer than usual (it usually takes about 6 min).")
    assert explain.node_add_event(inf.state, t4, "jhub", "jupyter-ann")["message"].startswith("The NVIDIA T4 pool")
    assert explain.node_add_event(inf.state, t4, "jhub", "jupyter-bob") is None  # not this server's pod
    assert history.pod_eta("uid-jupyter-ann", t4) is None  # no "usually frees in" after the countdown
    history.node_adds.samples.clear()  # no record: KubeSpawner's words as before
    assert explain.explain_event(event, t4, inf.state).startswith("The pool is adding a node for you")
    assert explain.node_add_event(inf.state, t4, "jhub", "jupyter-ann") is None


# ---------------------------------------------------------------------------------------------- the file
def test_the_samples_survive_a_restart_and_old_files_still_load(tmp_path):
    path = tmp_path / "history.json"
    before = PoolHistory(lambda: CFG)
    HistoryFile(path).attach(before)
    before.node_adds.samples = {"gput4": [300.0, 420.0], "gpuh100": [600.0]}
    before.apply("MODIFIED", pod("late", bound=T0))  # a change: saved (no loop here: at once)
    doc = json.loads(path.read_bytes())
    assert doc["version"] == 1 and {"pool": "gput4", "seconds": [300.0, 420.0]} in doc["node_adds"]
    after = HistoryFile(path).attach(PoolHistory(lambda: CFG))
    assert after.node_adds.samples == before.node_adds.samples and after.node_adds.seconds("gput4") == 360
    old = {"version": 1, "pools": [{"pool": "gput4", "resource": "nvidia.com/gpu", "bindings": [
        ["u1", T0.isoformat(), (T0 + timedelta(minutes=3)).isoformat()]]}]}
    h = PoolHistory(lambda: CFG)
    assert load_into(h, json.dumps(old).encode()) == 1 and h.node_adds.samples == {}
    assert json.loads(dump(h))["node_adds"] == []


@given(st.lists(st.one_of(st.none(), st.text(max_size=5), st.dictionaries(
    st.sampled_from(["pool", "seconds"]), st.one_of(st.text(max_size=5), st.lists(st.one_of(
        st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.booleans(), st.text(max_size=3)),
        max_size=30)))), max_size=5))
def test_hostile_samples_are_skipped(entries):
    h = PoolHistory(lambda: CFG)
    load_into(h, json.dumps({"version": 1, "pools": [], "node_adds": entries}).encode())
    for pool, seconds in h.node_adds.samples.items():
        assert pool and 0 < len(seconds) <= 20
        assert all(isinstance(s, float) and 0 <= s <= MAX_SAMPLE_S for s in seconds)


def test_watch_keeps_the_state_callbacks():
    inf = CapacityInformers(CFG, SimpleNamespace(list_node=None, list_pod_for_all_namespaces=None))
    watch(inf, adds())
    inf.nodes.replace([node("aks-gput4-1", ready=T0)])
    assert set(inf.state.nodes) == {"aks-gput4-1"} and inf.state.node_adds is not None
