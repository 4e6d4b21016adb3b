"""A short day replay (bench/day_replay.py's engine) on its own dev cluster: the real hub, gpu-jobs/Kueue,
culler and Prometheus, the autoscaler MODEL adding and removing KWOK nodes. An hour of trace at ×180."""
from __future__ import annotations

import pytest
import yaml

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import parse_profiles
from jupyterhub_gpu_dev.replay import accounting
from jupyterhub_gpu_dev.replay.driver import Replay
from jupyterhub_gpu_dev.replay.trace import Trace

pytestmark = pytest.mark.cluster

H = 3600
#: ds01 works, leaves for 25 minutes, comes back; ds02 has an A100 slice open (left open at the end: the
#: culler's) and submits a T4 batch job.
SHORT = {
    "duration": 1 * H,
    "users": [{"name": "ds01", "groups": ["data-science"], "vm_profile": "t4-shared"},
              {"name": "ds02", "groups": ["data-science"], "vm_profile": "a100-mig-1g10gb"}],
    "sessions": [
        {"user": "ds01", "profile": "t4-shared", "start": 300, "end": 3300,
         "active": [[360, 1200, 0.5], [2700, 3200, 0.6]]},
        {"user": "ds02", "profile": "a100-mig-1g10gb", "start": 600, "end": 3000, "stop": False,
         "active": [[700, 2400, 0.3]]},
    ],
    "jobs": [{"user": "ds02", "profile": "t4-shared", "submit": 900, "runtime": 1200, "checkpoint_interval": 600}],
}


def test_short_replay_serves_everything_and_scales_the_pools(scratch_root):
    profiles = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    cfg = parse_profiles(profiles)
    trace = Trace.model_validate(SHORT)
    result = Replay(trace, profiles, speed=180, root=scratch_root / "replay", say=print).run()
    shared, vm = result["shared"], accounting.one_vm_per_user(cfg, trace)
    accounting.check_same_work(shared, vm)  # every session served, the job finished, same GPU-hours
    assert shared["jobs_finished"] == 1 and shared["queue_wait_p50_s"] is not None
    assert shared["server_starts"] >= 2 and shared["start_wait_p50_s"] > 0, result["start_waits_s"]
    # the T4 pool started at zero and the model grew it for ds01 and the job; the MIG pool keeps its
    # min_nodes (1) all along; one VM per user pays both users all the time
    t4 = shared["node_hours_by_pool"]["gput4"]
    assert 0 < t4 < shared["replay_end_h"], shared
    assert shared["node_hours_by_pool"]["gpumig"] == pytest.approx(shared["replay_end_h"], abs=0.05)
    assert {s["nodes"]["gput4"] for s in result["samples"]} >= {0, 1}, result["samples"]
    assert vm["gpu_node_hours"] == 2.0


#: Two ml-research users hold the team's whole H100 quota (2); a third one's server waits in the team's Kueue
#: queue until mlr1 leaves. ds01's T4 job runs meanwhile and its owner is notified of it.
QUEUED = {
    "duration": 2.25 * H,
    "users": [{"name": f"mlr{i}", "groups": ["ml-research"], "vm_profile": "h100-full"} for i in (1, 2, 3)]
    + [{"name": "ds01", "groups": ["data-science"], "vm_profile": "t4-shared"}],
    "sessions": [
        {"user": "mlr1", "profile": "h100-full", "start": 0, "end": 4800, "active": [[0, 4700, 0.8]]},
        {"user": "mlr2", "profile": "h100-full", "start": 0, "end": 7800, "active": [[0, 7700, 0.8]]},
        {"user": "mlr3", "profile": "h100-full", "start": 600, "end": 7800, "active": [[600, 7700, 0.5]]},
    ],
    "jobs": [{"user": "ds01", "profile": "t4-shared", "submit": 300, "runtime": 1800, "checkpoint_interval": 600}],
}


def test_a_short_faulted_replay_keeps_the_queue_and_loses_nothing(scratch_root):
    """The hub killed while mlr3's server is queued (it keeps its place: the very pod that waited starts once
    mlr1 leaves), gpu-jobs killed and its API connections dropped while ds01's job runs (one Job, one output,
    each opted-in event delivered once); every fault recovered from."""
    from jupyterhub_gpu_dev.replay import faults, invariants

    profiles = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    trace = Trace.model_validate(QUEUED)
    plan = [faults.Fault("hub", 900), faults.Fault("gpu-jobs", 2400), faults.Fault("gpu-jobs-connections", 3300)]
    result = Replay(trace, profiles, speed=60, root=scratch_root / "faulted", faults=plan, say=print).run()
    shared = result["shared"]
    inv = shared["invariants"]
    assert invariants.violations(inv) == [], inv
    recovered = {f["what"]: f["recovered_after_s"] for f in shared["faults"]}
    assert set(recovered) == {"hub", "gpu-jobs", "gpu-jobs-connections"} and None not in recovered.values(), \
        shared["faults"]
    hub_fault = next(f for f in shared["faults"] if f["what"] == "hub")
    assert list(hub_fault["queued_servers"]) == ["jupyter-mlr3"], hub_fault  # the kill did find it queued
    assert inv["queued_at_hub_restart"] == [{"pod": "jupyter-mlr3", "kept": True, "replaced": False}]
    notes = inv["notifications"]
    assert notes["expected"] >= 2 and notes["missing"] == [] and notes["twice"] == [], notes
    assert shared["jobs_finished"] == 1 and inv["jobs_made"] == 1 and inv["outputs_missing"] == []
    assert shared["sessions_served"] == 3, shared
