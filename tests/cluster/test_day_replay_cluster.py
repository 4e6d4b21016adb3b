"""A short day replay (bench/day_replay.py's engine) on its own dev cluster: the real hub, gpu-jobs/Kueue,
culler and Prometheus, the autoscaler MODEL adding and removing KWOK nodes. An hour of trace at ×180."""
from __future__ import annotations

import pytest
import yaml

from devcluster.replay import accounting
from devcluster.replay.driver import Replay
from devcluster.replay.trace import Trace
from gpu_spawner.model.profiles_file import EXAMPLE_PROFILES
from gpu_spawner.model.validation import parse_profiles

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
