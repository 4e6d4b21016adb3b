"""Live capacity of `dra` pools (pure): a node's GPUs are the devices its ResourceSlices publish, the used ones
those ResourceClaims were allocated (cluster/dra_devices.py, hub/dra_capacity.py), in the picker's counters.
The objects are shaped like the NVIDIA DRA driver's (resource.k8s.io/v1: pool = node name, devices `gpu-<i>` with
type gpu, MIG devices `gpu-<i>-mig-<profile>-<gi>-<start>` with type mig and `profile`)."""
from __future__ import annotations

import copy
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.cluster.dra_devices import (
    claimed_devices,
    device_counts,
    pod_claim_names,
    quota_name,
    slice_devices,
)
from jupyterhub_gpu.contract import PROFILE_LABEL
from jupyterhub_gpu.hub import progress
from jupyterhub_gpu.hub.capacity import ClusterState
from jupyterhub_gpu.hub.gpu_faults import gpu_gone
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

CFG = load_profiles(EXAMPLE_PROFILES.with_name("profiles-dra.yaml"))
POOL_LABEL = "kubernetes.azure.com/agentpool"
AGENT_POOL = {"dra-a100": "draa100", "dra-a100mig": "draa100mig", "gput4": "gput4", "system": "system"}
DRIVER = "gpu.nvidia.com"
FULL, SLICE = CFG.by_slug["a100-dra"], CFG.by_slug["a100-3g"]


def node(name: str, pool: str, ready: bool = True, cpu: str = "40", memory: str = "400Gi") -> dict:
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    if pool == "gput4":
        alloc["nvidia.com/gpu"] = "4"
    return {"metadata": {"name": name, "labels": {POOL_LABEL: AGENT_POOL.get(pool, pool)}},
            "spec": {}, "status": {"allocatable": alloc,
                                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def gpu(i: int) -> dict:
    return {"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": f"GPU-{i}"},
                                                "productName": {"string": "NVIDIA A100 80GB PCIe"},
                                                "cudaComputeCapability": {"version": "8.0.0"}},
            "capacity": {"memory": {"value": "80Gi"}}}


def mig(parent: int, start: int, profile: str = "3g.40gb") -> dict:
    return {"name": f"gpu-{parent}-mig-{profile.replace('.', '')}-9-{start}",
            "attributes": {"type": {"string": "mig"}, "profile": {"string": profile},
                           "parentUUID": {"string": f"GPU-{parent}"}},
            "capacity": {"memory": {"value": "40Gi"}, "multiprocessors": {"value": "42"}}}


def rslice(node_name: str, devices: list[dict], name: str | None = None, driver: str = DRIVER) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node_name}-{driver}-x7k2p"},
            "spec": {"driver": driver, "nodeName": node_name, "pool": {"name": node_name, "generation": 1,
                                                                       "resourceSliceCount": 1},
                     "devices": devices}}


def claim(name: str, devices: list[tuple[str, str]], ns: str = "jhub", admin: bool = False) -> dict:
    results = [{"request": "gpu", "driver": DRIVER, "pool": pool, "device": dev} | ({"adminAccess": True} if admin
                                                                                    else {}) for pool, dev in devices]
    status = {"allocation": {"devices": {"results": results}}} if devices else {}
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"devices": {"requests": []}}, "status": status}


def pod(name: str, profile: str | None = None, node_name: str | None = None, pool: str | None = None,
        claims: bool = True, gpu_request: int = 0, phase: str = "Running") -> dict:
    res = {"cpu": "4", "memory": "32Gi"} | ({"nvidia.com/gpu": str(gpu_request)} if gpu_request else {})
    spec = {"containers": [{"name": "c", "resources": {"requests": res, "limits": dict(res)}}]}
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": f"gpuhub-{profile}"}]
    if node_name:
        spec["nodeName"] = node_name
    if pool:
        spec["nodeSelector"] = {POOL_LABEL: AGENT_POOL[pool]}
    return {"metadata": {"name": name, "namespace": "jhub", "labels": {PROFILE_LABEL: profile} if profile else {}},
            "spec": spec, "status": {"phase": phase}}


def dra_cluster() -> ClusterState:
    """Two A100 nodes (2 GPUs each) and one MIG node (2 x 3g.40gb), all devices published, none claimed."""
    state = ClusterState(CFG)
    state.replace("nodes", [node("a1", "dra-a100"), node("a2", "dra-a100"), node("m1", "dra-a100mig"),
                            node("s1", "system")])
    state.replace("resourceslices", [rslice("a1", [gpu(0), gpu(1)]), rslice("a2", [gpu(0), gpu(1)]),
                                     rslice("m1", [mig(0, 0), mig(0, 4)])])
    state.replace("resourceclaims", [])
    return state


# ------------------------------------------------------------------ the cluster facts, read one way
def test_slices_give_gpus_and_mig_slices_under_their_quota_names():
    assert slice_devices(rslice("a1", [gpu(0), gpu(1)])) == ("a1", (("gpu.nvidia.com/a1/gpu-0", "nvidia.com/gpu"),
                                                                     ("gpu.nvidia.com/a1/gpu-1", "nvidia.com/gpu")))
    assert slice_devices(rslice("m1", [mig(0, 0)]))[1] == (
        ("gpu.nvidia.com/m1/gpu-0-mig-3g40gb-9-0", "nvidia.com/mig-3g.40gb"),)
    # attribute names qualified with the driver's domain mean the same
    qualified = {"name": "gpu-2", "attributes": {"gpu.nvidia.com/type": {"string": "gpu"}}}
    assert quota_name(qualified) == "nvidia.com/gpu"
    vfio = {"name": "gpu-vfio-0", "attributes": {"type": {"string": "vfio"}}}
    assert slice_devices(rslice("a1", [vfio]))[1] == ()
    assert slice_devices(rslice("a1", [gpu(0)], driver="compute-domain.nvidia.com")) == (None, ())
    no_node = rslice("a1", [gpu(0)])
    no_node["spec"].pop("nodeName")
    no_node["spec"]["allNodes"] = True
    assert slice_devices(no_node) == (None, ())


def test_claims_give_their_allocated_devices_and_pods_their_claims():
    assert claimed_devices(claim("c", [("a1", "gpu-1")])) == ("gpu.nvidia.com/a1/gpu-1",)
    assert claimed_devices(claim("c", [])) == ()  # not allocated yet
    assert claimed_devices(claim("c", [("a1", "gpu-1")], admin=True)) == ()  # monitoring: keeps it from no one
    p = {"status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "jupyter-ann-gpu-8fk2x"},
                                              {"name": "none"}],
                    "extendedResourceClaimStatus": {"resourceClaimName": "x-extended-resources-abcd",
                                                    "requestMappings": []}}}
    assert pod_claim_names(p) == ["jupyter-ann-gpu-8fk2x", "x-extended-resources-abcd"]
    assert pod_claim_names({"status": {}}) == []


# ------------------------------------------------------------------ the picker's counts
def test_dra_pools_count_published_devices_and_claimed_ones_as_used():
    state = dra_cluster()
    cap = state.profile_capacity(FULL)
    assert (cap.total_slots, cap.free_slots, cap.fits_now, cap.nodes) == (4, 4, 4, 2)
    assert cap.summary == "4 of 4 A100 80GB (DRA) GPUs free"
    state.apply_claim("ADDED", claim("jupyter-ann-gpu-1", [("a1", "gpu-0")]))
    assert (state.profile_capacity(FULL).free_slots, state.profile_capacity(FULL).fits_now) == (3, 3)
    state.apply_claim("ADDED", claim("job-x-gpu", [("m1", "gpu-0-mig-3g40gb-9-4")], ns="team-ds"))
    s = state.profile_capacity(SLICE)
    assert (s.total_slots, s.free_slots) == (2, 1) and s.summary == "1 of 2 A100 80GB MIG (DRA) 3g.40gb slices free"
    state.apply_claim("DELETED", claim("jupyter-ann-gpu-1", [("a1", "gpu-0")]))
    assert state.profile_capacity(FULL).free_slots == 4
    # the driver withdraws a GPU (unhealthy): one fewer in total
    state.apply_slice("MODIFIED", rslice("a2", [gpu(0)]))
    assert state.profile_capacity(FULL).total_slots == 3
    for profile in CFG.profiles:
        assert state.profile_capacity(profile) == state.recompute(profile)


def test_a_claim_and_an_extended_resource_request_for_one_gpu_count_once():
    """A pod asking `nvidia.com/gpu` on a dra node gets it as a claim (the DeviceClass's extended resource): the
    claim counts, the request is not counted again; CPU and memory still count."""
    state = dra_cluster()
    state.apply_pod("ADDED", pod("other", node_name="a1", claims=False, gpu_request=1))
    state.apply_claim("ADDED", claim("other-extended-resources-x", [("a1", "gpu-1")]))
    cap = state.profile_capacity(FULL)
    assert (cap.free_slots, cap.fits_now) == (3, 3)
    # CPU is the limit on a1 now: 40 CPUs, 36 left after the pod's 4, a100-dra asks 8 each: 4 would fit, GPUs 1
    state.apply_pod("ADDED", pod("big", node_name="a2", claims=False) | {
        "spec": {"nodeName": "a2", "containers": [{"name": "c", "resources": {"requests": {"cpu": "36"}}}]}})
    assert state.profile_capacity(FULL).fits_now == 1  # a2: 4 CPUs left, too few for 8; a1: one GPU left


def test_a_dra_pod_without_a_node_waits_for_its_profiles_gpus():
    state = dra_cluster()
    for i, (n, dev) in enumerate([("a1", "gpu-0"), ("a1", "gpu-1"), ("a2", "gpu-0"), ("a2", "gpu-1")]):
        state.apply_claim("ADDED", claim(f"c{i}", [(n, dev)]))
    state.apply_pod("ADDED", pod("jupyter-bob", "a100-dra", pool="dra-a100", phase="Pending"))
    cap = state.profile_capacity(FULL)
    assert cap.full and cap.waiting == 1 and cap.summary == "pool full — 1 waiting"
    assert state.waiting("dra-a100", "nvidia.com/gpu") == 1
    assert state.profile_capacity(FULL) == state.recompute(FULL)


def test_unknown_devices_make_only_dra_profiles_unknown():
    state = dra_cluster()
    state.devices_current = lambda: False
    assert not state.profile_capacity(FULL).known and not state.profile_capacity(SLICE).known
    assert state.profile_capacity(CFG.by_slug["cpu"]).known and state.profile_capacity(CFG.by_slug["t4-shared"]).known
    assert progress.never_fits(FULL, state) is None  # unknown is never "can never start"


def test_a_dra_node_offers_its_devices_to_never_fits_and_the_gpu_signal():
    state = dra_cluster()
    a1 = state.nodes["a1"]
    assert a1.allocatable.get("nvidia.com/gpu") is None  # the node object says nothing of its GPUs ...
    assert state.offered(a1).allocatable["nvidia.com/gpu"] == 2  # ... its ResourceSlice does
    assert not gpu_gone(state.offered(a1)) and progress.never_fits(FULL, state) is None
    state.apply_slice("DELETED", rslice("a1", [gpu(0), gpu(1)]))
    assert gpu_gone(state.offered(a1))  # the driver published nothing for it: its GPUs are gone


def test_a_profile_with_alternatives_says_which_choice_it_gets_now():
    """a100-any: a whole A100, else a 3g.40gb slice (DRA's prioritized list). The card says what a server would be
    allocated now, and only when no choice has room is it full."""
    state, any_ = dra_cluster(), CFG.by_slug["a100-any"]
    cap = state.profile_capacity(any_)
    assert (cap.free_slots, cap.fits_now, cap.summary, cap.outlook) == (4, 6, "4 of 4 A100 80GB (DRA) GPUs free",
                                                                         "starts right away")
    for i, (n, g) in enumerate([("a1", "gpu-0"), ("a1", "gpu-1"), ("a2", "gpu-0"), ("a2", "gpu-1")]):
        state.apply_claim("ADDED", claim(f"whole-{i}", [(n, g)]))
    cap = state.profile_capacity(any_)
    assert (cap.free_slots, cap.fits_now, cap.full) == (0, 2, False)
    assert cap.summary == "pool full; 2 of 2 A100 80GB MIG (DRA) 3g.40gb slices free instead"
    assert cap.outlook == "starts right away with 1 A100 80GB MIG (DRA) 3g.40gb slice (its first alternative " \
                          "with room)"
    assert state.profile_capacity(FULL).full  # a profile without alternatives is full
    state.apply_claim("ADDED", claim("slices", [("m1", "gpu-0-mig-3g40gb-9-0"), ("m1", "gpu-0-mig-3g40gb-9-4")]))
    cap = state.profile_capacity(any_)
    assert cap.full and cap.summary == "pool full" and cap.outlook == state.profile_capacity(FULL).outlook
    assert cap == state.recompute(any_)


def test_a_profile_never_fits_only_when_none_of_its_choices_ever_could():
    fixed = {"dra-a100": CFG.pools["dra-a100"].model_copy(update={"max_nodes": 0}),
             "dra-a100mig": CFG.pools["dra-a100mig"].model_copy(update={"max_nodes": 1})}
    cfg = CFG.model_copy(update={"pools": CFG.pools | fixed})
    state = ClusterState(cfg)  # the whole-A100 pool has no node and cannot grow; the MIG pool has its one
    state.replace("nodes", [node("m1", "dra-a100mig")])
    state.replace("resourceslices", [rslice("m1", [mig(0, 0), mig(0, 4)])])
    state.replace("resourceclaims", [])
    assert "can never start" in progress.never_fits(FULL, state)
    assert progress.never_fits(CFG.by_slug["a100-any"], state) is None
    neither = ClusterState(cfg.model_copy(update={"pools": cfg.pools | {
        "dra-a100mig": cfg.pools["dra-a100mig"].model_copy(update={"max_nodes": 0})}}))
    neither.replace("nodes", [])
    assert "can never start" in progress.never_fits(CFG.by_slug["a100-any"], neither)


# ------------------------------------------------------------------ incremental = full fold, whatever the order
NODES = ["a1", "a2", "m1", "s1"]
DEVICES = {"dra-a100": [gpu(0), gpu(1)], "dra-a100mig": [mig(0, 0), mig(0, 4)], "system": [gpu(0)]}
KEYS = [(n, d["name"]) for n in NODES for d in [gpu(0), gpu(1), mig(0, 0), mig(0, 4)]]

node_events = st.fixed_dictionaries({
    "event": st.just("node"), "kind": st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
    "name": st.sampled_from(NODES), "pool": st.sampled_from(["dra-a100", "dra-a100mig", "system", "elsewhere"]),
    "ready": st.booleans()})
slice_events = st.fixed_dictionaries({
    "event": st.just("slice"), "kind": st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
    "node": st.sampled_from(NODES), "copy": st.sampled_from(["x", "y"]),  # y: a republished generation beside x
    "devices": st.sampled_from(list(DEVICES.values()) + [[gpu(0)], [], [gpu(0), mig(0, 0)]])})
claim_events = st.fixed_dictionaries({
    "event": st.just("claim"), "kind": st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
    "name": st.sampled_from(["c0", "c1", "c2"]), "devices": st.lists(st.sampled_from(KEYS), max_size=2, unique=True),
    "admin": st.booleans()})
pod_events = st.fixed_dictionaries({
    "event": st.just("pod"), "kind": st.sampled_from(["ADDED", "DELETED"]), "name": st.sampled_from(["p0", "p1"]),
    "node": st.sampled_from([None] + NODES), "profile": st.sampled_from([None, "a100-dra", "a100-3g"]),
    "gpu_request": st.integers(0, 2)})
relists = st.fixed_dictionaries({"event": st.just("relist"),
                                 "kind": st.sampled_from(["nodes", "pods", "resourceslices", "resourceclaims"])})


def manifest(e: dict) -> tuple[str, str, dict]:
    """(kind of list, key, object) of one event."""
    if e["event"] == "node":
        return "nodes", e["name"], node(e["name"], e["pool"], e["ready"])
    if e["event"] == "slice":
        return "resourceslices", f"{e['node']}-{e['copy']}", rslice(e["node"], e["devices"], f"{e['node']}-{e['copy']}")
    if e["event"] == "claim":
        return "resourceclaims", e["name"], claim(e["name"], e["devices"], admin=e["admin"])
    obj = pod(e["name"], e["profile"], e["node"], pool="dra-a100" if e["profile"] == "a100-dra" else None,
              claims=e["profile"] is not None, gpu_request=e["gpu_request"],
              phase="Running" if e["node"] else "Pending")
    return "pods", e["name"], obj


APPLY = {"nodes": "apply_node", "pods": "apply_pod", "resourceslices": "apply_slice", "resourceclaims": "apply_claim"}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(node_events, slice_events, slice_events, claim_events, claim_events, pod_events, relists),
                min_size=1, max_size=40))
def test_incremental_device_counts_equal_the_full_fold_after_every_event(sequence):
    state = ClusterState(CFG)
    objects: dict[str, dict[str, dict]] = {kind: {} for kind in APPLY}
    for e in sequence:
        if e["event"] == "relist":
            state.replace(e["kind"], copy.deepcopy(list(objects[e["kind"]].values())))
        else:
            kind, key, obj = manifest(e)
            getattr(state, APPLY[kind])(e["kind"], copy.deepcopy(obj))
            if e["kind"] == "DELETED":
                objects[kind].pop(key, None)
            else:
                objects[kind][key] = obj
        fresh = ClusterState(CFG)
        for kind in APPLY:
            fresh.replace(kind, copy.deepcopy(list(objects[kind].values())))
        full = device_counts(objects["resourceslices"].values(), objects["resourceclaims"].values())
        assert {n: +c for n, c in state.devices.counts.items() if +c} == {n: +c for n, c in full.items() if +c}, e
        for profile in CFG.profiles:
            incremental = state.profile_capacity(profile)
            assert incremental == state.recompute(profile), (profile.slug, e)
            assert incremental == fresh.profile_capacity(profile), (profile.slug, e)
    for kind in ("resourceclaims", "resourceslices", "pods", "nodes"):  # nothing is left behind once all is gone
        for obj in list(objects[kind].values()):
            getattr(state, APPLY[kind])("DELETED", obj)
    assert state.devices.counts == {} and state.devices._places == {} and not +state.devices._held
    for counts in (state._node_count, state._total, state._free, state._fits, state._waiting):
        assert not +counts and not -counts


def test_device_counts_count_a_republished_device_once():
    slices = [rslice("a1", [gpu(0), gpu(1)], "a1-x"), rslice("a1", [gpu(0)], "a1-y")]
    claims = [claim("c", [("a1", "gpu-0")]), claim("d", [("a1", "gpu-0")])]  # two claims: still one device used
    assert device_counts(slices, claims) == {"a1": Counter({("nvidia.com/gpu", "total"): 2,
                                                            ("nvidia.com/gpu", "used"): 1})}


def test_claim_events_that_leave_the_allocation_keep_the_pickers_memo():
    """A claim's status changes often (reservedFor, conditions) and its allocation once: only a change of what is
    allocated, on a node the picker counts, makes it count again."""
    state = dra_cluster()
    held = claim("jupyter-ann-gpu-1", [("a1", "gpu-0")])
    state.apply_claim("ADDED", claim("jupyter-ann-gpu-1", []))  # created, not allocated yet
    before = state.version
    state.apply_claim("ADDED", held)
    assert state.version > before and state.profile_capacity(FULL).free_slots == 3
    before = state.version
    reserved = copy.deepcopy(held)
    reserved["status"]["reservedFor"] = [{"resource": "pods", "name": "jupyter-ann", "uid": "u1"}]
    state.apply_claim("MODIFIED", reserved)
    state.apply_claim("ADDED", claim("elsewhere", [("gone-node", "gpu-0")]))  # a device no known node publishes
    assert state.version == before and state.profile_capacity(FULL).free_slots == 3
    state.apply_claim("DELETED", reserved)
    assert state.version > before and state.profile_capacity(FULL).free_slots == 4


def test_the_scheduled_event_says_which_choice_a_server_got():
    state, any_ = dra_cluster(), CFG.by_slug["a100-any"]

    def scheduled(profile, node_name):
        return progress.explain_event({"reason": "Scheduled", "message": f"Successfully assigned jhub/jupyter-ann "
                                       f"to {node_name}"}, profile, state)

    assert scheduled(any_, "m1") == ("A node was found: your server is placed on m1, with 1 A100 80GB MIG (DRA) "
                                     "3g.40gb slice instead (its own GPUs were all taken).")
    assert scheduled(any_, "a2") == ("A node was found: your server is placed on a2, with the profile's own "
                                     "A100 80GB (DRA) GPU.")
    assert scheduled(any_, "not-seen-yet") == "A node was found: your server is placed on not-seen-yet."
    assert scheduled(FULL, "a1") == "A node was found: your server is placed on a1."  # one choice: nothing to say


def test_a_pool_with_partitionable_devices_is_unknown_not_empty():
    """Dynamic MIG: the node's devices consume shared counters and are not counted, so its pool's profiles say
    "unknown" (never "can never start" from a count of zero); the other pools keep their numbers."""
    state = dra_cluster()
    dynamic = rslice("m1", [dict(mig(0, 0), consumesCounters=[{"counterSet": "gpu-0", "counters": {}}])])
    state.apply_slice("MODIFIED", dynamic)
    assert not state.profile_capacity(SLICE).known and state.profile_capacity(FULL).known
    assert progress.never_fits(SLICE, state) is None
    assert list(state.devices.partitioned.values()) == ["m1"]
    state.apply_slice("MODIFIED", rslice("m1", [mig(0, 0), mig(0, 4)]))  # back to a static layout
    assert state.profile_capacity(SLICE).known and state.profile_capacity(SLICE).total_slots == 2
    state.apply_slice("MODIFIED", dynamic)
    state.replace("resourceslices", [rslice("m1", [mig(0, 0)])])
    assert state.devices.partitioned == {} and state.profile_capacity(SLICE).known


def test_the_choice_a_claim_got_is_read_only_from_a_well_formed_request():
    from jupyterhub_gpu.cluster.dra_devices import chosen

    def got(request):
        c = claim("c", [("n", "gpu-0")])
        c["status"]["allocation"]["devices"]["results"][0]["request"] = request
        return chosen(c)

    assert (got("gpu"), got("gpu/c0-dra-a100"), got("gpu/c1-mig-3g-40gb"), got("gpu/c12-x")) == (0, 0, 1, 12)
    assert got(["gpu/c1-x"]) is None and got(None) is None and got(7) is None
    assert got("gpu/c" + "9" * 5000 + "-x") == 0  # no number of 5,000 digits is parsed
    assert chosen(claim("c", [])) is None


def test_the_scheduled_line_says_nothing_when_the_pool_holds_two_choices():
    cfg = CFG.model_copy(update={"profiles": [p.model_copy(update={"gpu": p.gpu.model_copy(update={
        "count": 2, "alternatives": [p.gpu.alternatives[0].model_copy(update={"pool": "dra-a100", "kind": "full",
                                                                              "profile": None})]})})
        if p.slug == "a100-any" else p for p in CFG.profiles]})
    state = ClusterState(cfg)
    state.replace("nodes", [node("a1", "dra-a100")])
    event = {"reason": "Scheduled", "message": "Successfully assigned jhub/jupyter-ann to a1"}
    assert progress.explain_event(event, cfg.by_slug["a100-any"], state) == \
        "A node was found: your server is placed on a1."  # two GPUs, else one, both on dra-a100: which is not known


def test_a_waiting_server_with_alternatives_waits_in_its_own_pool():
    state = dra_cluster()
    waiting = pod("jupyter-ann", "a100-any", phase="Pending")  # node affinity over two pools, no node selector
    state.apply_pod("ADDED", waiting)
    assert state.waiting("dra-a100", "nvidia.com/gpu") == 1 and state.waiting("dra-a100mig", None) == 0
    assert state.profile_capacity(FULL).waiting == 1
    assert state.profile_capacity(FULL) == state.recompute(FULL)
    state.apply_pod("DELETED", waiting)
    assert state.waiting("dra-a100", "nvidia.com/gpu") == 0
