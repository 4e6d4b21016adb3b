"""The hub's wait estimate for full pools (`PoolHistory`): bindings from pod watch events as history, the
waiting line per pool and resource, the picker's words and the progress sentence."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.contract import PROFILE_LABEL
from jupyterhub_gpu.hub.capacity import ProfileCapacity
from jupyterhub_gpu.hub.picker import profile_entry
from jupyterhub_gpu.hub.pool_wait_estimate import PoolHistory, pod_key, progress_line
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.model.wait_estimate import ETA, frees_text

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
CFG = load_profiles(EXAMPLE_PROFILES)


def pod(name, created, scheduled=None, pool="gpuh100", resource="nvidia.com/gpu", phase="Pending"):
    conds = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled.isoformat()}] if scheduled \
        else [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return {"metadata": {"name": name, "namespace": "jhub", "uid": f"uid-{name}",
                         "creationTimestamp": created.isoformat()},
            "spec": {"nodeSelector": {"kubernetes.azure.com/agentpool": pool},
                     "containers": [{"name": "c", "resources": {"limits": {resource: "1"}}}]},
            "status": {"phase": phase, "conditions": conds}}


def test_pods_are_keyed_by_pool_and_gpu_resource():
    assert pod_key(pod("a", T0), CFG) == ("gpuh100", "nvidia.com/gpu")
    assert pod_key(pod("b", T0, pool="gpumig", resource="nvidia.com/mig-1g.10gb"), CFG) == \
        ("gpumig", "nvidia.com/mig-1g.10gb")
    assert pod_key(pod("c", T0, pool="nowhere"), CFG) is None
    cpu = pod("d", T0)
    cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    assert pod_key(cpu, CFG) is None


def test_a_dra_pod_is_keyed_by_its_profile_and_its_waits_make_the_estimate():
    """On a dra pool the GPUs are a ResourceClaim, not a request: the pod's profile names its pool's resource."""
    from tests.unit.test_dra_capacity import CFG as DRA_CFG

    def dra_pod(name, created, scheduled=None, profile="a100-dra", pool="draa100"):
        p = pod(name, created, scheduled, pool=pool, phase="Running" if scheduled else "Pending")
        p["metadata"]["labels"] = {PROFILE_LABEL: profile} if profile else {}
        p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "4"}, "claims": [{"name": "gpu"}]}
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": f"gpuhub-{profile}"}]
        return p

    assert pod_key(dra_pod("a", T0), DRA_CFG) == ("dra-a100", "nvidia.com/gpu")
    assert pod_key(dra_pod("b", T0, profile="a100-3g", pool="draa100mig"), DRA_CFG) == \
        ("dra-a100mig", "nvidia.com/mig-3g.40gb")
    assert pod_key(dra_pod("c", T0, profile="a100-dra", pool="draa100mig"), DRA_CFG) is None  # not its pool
    assert pod_key(dra_pod("d", T0, profile=None), DRA_CFG) is None  # someone else's claim: no profile to read
    assert pod_key(dra_pod("e", T0, profile="t4-shared", pool="gput4"), DRA_CFG) is None  # not a dra pool
    h = PoolHistory(lambda: DRA_CFG)
    for i, w in enumerate((10, 12, 8, 15, 11, 9, 14)):
        created = T0 + timedelta(hours=i)
        h.apply("ADDED", dra_pod(f"p{i}", created))
        h.apply("MODIFIED", dra_pod(f"p{i}", created, created + timedelta(minutes=w)))
    e = h.picker_eta(DRA_CFG.profile("a100-dra"))
    assert e.known and e.p50_s == 11 * 60


def history_of_waits(wait_min=(10, 12, 8, 15, 11, 9, 14)):
    """A server queued every hour and was bound `wait` minutes later (each alone in line)."""
    h = PoolHistory(lambda: CFG)
    for i, w in enumerate(wait_min):
        created = T0 + timedelta(hours=i)
        h.apply("ADDED", pod(f"p{i}", created))
        h.apply("MODIFIED", pod(f"p{i}", created, created + timedelta(minutes=w), phase="Running"))
        h.apply("MODIFIED", pod(f"p{i}", created, created + timedelta(minutes=w), phase="Running"))  # once
    return h


def test_bindings_are_history_and_unbound_pods_wait_in_line():
    h = history_of_waits()
    assert len(h.history[("gpuh100", "nvidia.com/gpu")]) == 7 and h.waiting == {}
    profile = CFG.profile("h100-full")
    e = h.picker_eta(profile)  # nobody waiting: position 1, the median of the seven waits
    assert e.known and e.p50_s == 11 * 60 and e.p90_s >= e.p50_s
    late = T0 + timedelta(days=1)
    h.apply("ADDED", pod("w1", late))
    h.apply("ADDED", pod("w2", late + timedelta(seconds=5)))
    h.apply("ADDED", pod("other", late, pool="gpumig", resource="nvidia.com/mig-1g.10gb"))
    assert h.ahead_of("uid-w1") == 0 and h.ahead_of("uid-w2") == 1 and h.ahead_of("uid-p0") is None
    assert h.waiting_for(("gpuh100", "nvidia.com/gpu")) == 2
    assert h.pod_eta("uid-w1", profile) == e  # first in line: the same as a new server on an empty line
    assert not h.pod_eta("uid-w2", profile).known  # never two waiting at once before: no guess
    h.apply("DELETED", pod("w1", late))
    assert h.ahead_of("uid-w2") == 0
    h.replace([pod("w3", late)])  # a relist: exactly the listed pods wait, the history stays
    assert set(h.waiting) == {"uid-w3"} and len(h.history[("gpuh100", "nvidia.com/gpu")]) == 7


def test_thin_history_is_no_estimate_yet():
    h = history_of_waits((10, 12, 8))
    assert not h.picker_eta(CFG.profile("h100-full")).known
    assert frees_text(h.picker_eta(CFG.profile("h100-full"))) == "no estimate yet"
    cpu = next(p for p in CFG.profiles if p.gpu is None)
    assert h.picker_eta(cpu) is None  # a CPU profile waits for no GPU pool's line


def test_words_in_the_picker_and_the_progress():
    assert frees_text(ETA(720, 2400, 9)) == "usually frees in ~12 min (p90 ~40 min)"
    assert frees_text(ETA(30, 60, 9)) == "usually frees in ~1 min"
    assert frees_text(None) == "no estimate yet"
    msg = "All 2 H100 NVL GPUs are in use; you are waiting for one to free up."
    assert progress_line(msg, ETA(720, 2400, 9)) == msg + " Usually frees in ~12 min (p90 ~40 min)."
    assert progress_line(msg, ETA(None, None, 2)) == msg + " No estimate yet."
    assert progress_line(msg, None) == msg
    profile = CFG.profile("h100-full")
    full = ProfileCapacity("h100-full", "nvidia.com/gpu", 2, 0, 0, 1, 2, False, "pool full — 1 waiting", "wait")
    g = profile_entry(CFG, profile, True, full, ["ml-research"], eta=ETA(720, 2400, 9))["gpuhub"]
    assert (g["eta"], g["eta_p50_s"], g["eta_p90_s"]) == ("usually frees in ~12 min (p90 ~40 min)", 720, 2400)
    assert profile_entry(CFG, profile, True, full, ["ml-research"])["gpuhub"]["eta"] == "no estimate yet"
    free = ProfileCapacity("h100-full", "nvidia.com/gpu", 2, 1, 1, 0, 2, False, "1 of 2 free", "now")
    assert "eta" not in profile_entry(CFG, profile, True, free, ["ml-research"], eta=ETA(720, 2400, 9))["gpuhub"]
