"""The day replay's pure parts (devcluster/jupyterhub_gpu_dev/replay): trace format and generator, the autoscaler MODEL,
one-VM-per-user accounting, the same-work and determinism checks, and lever switching."""
from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import parse_profiles
from jupyterhub_gpu_dev.replay import accounting, levers
from jupyterhub_gpu_dev.replay import trace as traces
from jupyterhub_gpu_dev.replay.autoscaler import AutoscalerModel, PoolModel


@pytest.fixture(scope="module")
def profiles() -> dict:
    return yaml.safe_load(EXAMPLE_PROFILES.read_text())


@pytest.fixture(scope="module")
def cfg(profiles):
    return parse_profiles(profiles)


# ------------------------------------------------------------------ trace format and generator

def test_generator_is_deterministic_per_seed_and_round_trips_through_yaml(tmp_path):
    a, b, c = traces.generate(7), traces.generate(7), traces.generate(8)
    assert a == b and a != c
    path = tmp_path / "t.yaml"
    traces.dump(a, path)
    assert traces.load(path) == a


def test_default_trace_is_a_working_day_with_idleness():
    tr = traces.generate(1)
    assert len(tr.users) == traces.DEFAULTS["users"] and tr.duration == 24 * 3600
    starts = sorted(s.start / 3600 for s in tr.sessions)
    assert 6 <= starts[len(starts) // 2] <= 12  # people arrive in the morning
    busy = sum(b - a for s in tr.sessions for a, b, _ in s.active)
    opened = sum(s.end - s.start for s in tr.sessions)
    assert 0.2 < busy / opened < 0.8  # idle gaps: a good part of an open server's time is idle
    assert any(not s.stop for s in tr.sessions)  # some leave their server open for the culler
    assert tr.jobs and all(j.submit + j.runtime <= tr.duration for j in tr.jobs)
    assert all(19 * 3600 <= e.at <= 23 * 3600 for e in tr.evictions)


def test_generator_refuses_unknown_parameters():
    with pytest.raises(ValueError, match="unknown generator parameters"):
        traces.generate(1, userz=3)


@pytest.mark.parametrize("bad, needle", [
    ({"sessions": [{"user": "nobody", "profile": "t4-shared", "start": 0, "end": 10}]}, "unknown user"),
    ({"sessions": [{"user": "ds01", "profile": "t4-shared", "start": 10, "end": 5}]}, "not after start"),
    ({"sessions": [{"user": "ds01", "profile": "t4-shared", "start": 0, "end": 100,
                    "active": [[50, 60, 0.5], [40, 45, 0.5]]}]}, "out of order"),
    ({"sessions": [{"user": "ds01", "profile": "t4-shared", "start": 0, "end": 100, "active": [[1, 2, 1.5]]}]},
     "within 0..1"),
    ({"sessions": [{"user": "ds01", "profile": "t4-shared", "start": 0, "end": 100},
                   {"user": "ds01", "profile": "t4-shared", "start": 50, "end": 200}]}, "overlap"),
    ({"jobs": [{"user": "ds01", "profile": "t4-shared", "submit": 0, "runtime": 0, "checkpoint_interval": 60}]},
     "greater than 0"),
    ({"users": [{"name": "Bad Name!", "vm_profile": "t4-shared"}]}, "pattern"),
    ({"surprise": 1}, "Extra inputs"),
])
def test_malformed_traces_are_refused(bad, needle):
    data = {"duration": 86400, "users": [{"name": "ds01", "vm_profile": "t4-shared"}], **bad}
    with pytest.raises(ValidationError, match=needle):
        traces.Trace.model_validate(data)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), users=st.integers(1, 6), hours=st.floats(2, 30))
def test_any_generated_trace_is_valid_and_its_short_version_too(seed, users, hours):
    tr = traces.generate(seed, users=users, hours=hours)
    traces.Trace.model_validate(tr.model_dump())
    short = traces.scaled(tr, hours / 2)
    assert short.duration == hours / 2 * 3600 and all(s.end <= short.duration for s in short.sessions)


# ------------------------------------------------------------------ autoscaler model

def model(**kw) -> AutoscalerModel:
    pools = {"gput4": PoolModel(min_nodes=0, max_nodes=3, pods_per_node=4), "gpumig": PoolModel(1, 2, 7)}
    return AutoscalerModel(pools, provision_delay=240, scale_down_after=600, **kw)


def test_model_starts_with_min_nodes_and_scales_up_after_the_provisioning_delay():
    m = model()
    assert [p for p, _ in m.start(0)] == ["gpumig"]
    d = m.step(10, {"gput4": 5}, {})
    assert not d.create and m.count("gput4") == 2  # ceil(5 / 4) asked for, paid from now
    assert not m.step(100, {"gput4": 5}, {}).create and m.count("gput4") == 2  # none asked twice
    d = m.step(250, {"gput4": 5}, {})
    assert sorted(p for p, _ in d.create) == ["gput4", "gput4"]


def test_model_respects_max_nodes_and_counts_free_slots():
    m = model()
    m.start(0)
    m.step(0, {"gput4": 40}, {})
    assert m.count("gput4") == 3
    m2 = model()
    m2.start(0)
    assert m2.step(0, {"gpumig": 6}, {"gpumig-0": 1}).create == [] and m2.count("gpumig") == 1  # 6 fit in the 6 free


def test_model_scales_down_empty_nodes_after_the_configured_time_but_not_below_min():
    m = model(name=lambda p, i: f"{p}-{i}")
    m.start(0)
    m.step(0, {"gput4": 1}, {})
    m.step(240, {"gput4": 1}, {})
    m.step(300, {}, {"gput4-0": 1})
    assert m.step(800, {}, {"gput4-0": 1}).remove == []  # busy
    assert m.step(900, {}, {}).remove == []  # empty since 900
    assert m.step(1499, {}, {}).remove == []
    assert m.step(1500, {}, {}).remove == ["gput4-0"]
    assert m.step(5000, {}, {}).remove == [] and m.count("gpumig") == 1  # min_nodes stays
    secs = m.node_seconds(5000)
    assert secs["gput4"] == 1500 and secs["gpumig"] == 5000


def test_evicted_node_stops_costing():
    m = model(name=lambda p, i: f"{p}-{i}")
    m.start(0)
    m.evict("gpumig-0", 100)
    assert m.node_seconds(1000)["gpumig"] == 100 and m.count("gpumig") == 0


# ------------------------------------------------------------------ accounting and checks

def test_one_vm_per_user_pays_every_user_all_day(cfg):
    tr = traces.generate(1, users=4)
    vm = accounting.one_vm_per_user(cfg, tr)
    assert vm["gpu_node_hours"] == 4 * 24
    costs = {"t4-shared": 0.526, "a100-mig-1g10gb": 3.67}
    assert vm["dollars"] == pytest.approx(sum(costs[u.vm_profile] for u in tr.users) * 24, abs=0.01)
    assert 0 < vm["mean_gpu_utilisation"] < 0.5
    assert vm["useful_gpu_hours"] == pytest.approx(accounting.useful_gpu_hours(cfg, tr), abs=1e-3)


def test_mig_slice_work_counts_a_seventh_of_a_gpu(cfg):
    assert accounting.gpu_share(cfg, "a100-mig-1g10gb") == pytest.approx(1 / 7)
    assert accounting.gpu_share(cfg, "t4-shared") == 1.0


def test_shared_summary_and_same_work_check(cfg):
    tr = traces.generate(2, users=3)
    vm = accounting.one_vm_per_user(cfg, tr)
    n_s, n_j = len(tr.sessions), len(tr.jobs)
    shared = accounting.shared_summary(cfg, tr, {"gput4": 10 * 3600, "gpumig": 24 * 3600}, [True] * n_s,
                                       [True] * n_j, [5, 50, 300], [60, 600], 60, 0, 0)
    assert shared["gpu_node_hours"] == 34 and shared["dollars"] == pytest.approx(10 * 0.526 + 24 * 3.67, abs=0.01)
    assert shared["sessions_waited"] == 1 and shared["start_wait_p50_s"] == 50
    accounting.check_same_work(shared, vm)
    short = accounting.shared_summary(cfg, tr, {"gput4": 1}, [True] * (n_s - 1) + [False], [True] * n_j, [], [], 60,
                                      0, 0)
    with pytest.raises(accounting.WorkMismatch, match="sessions_served"):
        accounting.check_same_work(short, vm)


def test_determinism_tolerance():
    a = {"gpu_node_hours": 100, "dollars": 50, "useful_gpu_hours": 30, "sessions_served": 12, "jobs_finished": 9}
    assert accounting.differences(a, {**a, "gpu_node_hours": 105}) == []
    assert "gpu_node_hours" in accounting.differences(a, {**a, "gpu_node_hours": 120})[0]
    assert "jobs_finished" in accounting.differences(a, {**a, "jobs_finished": 8})[0]


def test_percentile_nearest_rank():
    assert accounting.percentile([], 0.5) is None
    assert accounting.percentile([3, 1, 2], 0.5) == 2 and accounting.percentile(range(1, 11), 0.9) == 9


# ------------------------------------------------------------------ levers

@pytest.mark.parametrize("lever", levers.LEVERS)
def test_each_lever_off_is_still_a_valid_profiles_file_and_trace(lever, profiles):
    tr = traces.generate(3, users=5)
    data, tr2, culler_on = levers.apply(lever, profiles, tr)
    cfg = parse_profiles(data)
    traces.Trace.model_validate(tr2.model_dump())
    gpu_pools = [p for p in cfg.pools.values() if p.is_gpu]
    if lever == "sharing":
        assert all(p.sharing.strategy == "none" for p in gpu_pools)
    if lever == "culling":
        assert not culler_on and all(p.idle_timeout is None and p.max_age is None for p in cfg.profiles)
    if lever == "queueing":
        assert not tr2.jobs
    if lever == "autoscaling":
        assert all(p.min_nodes == p.max_nodes for p in gpu_pools)
    assert profiles == yaml.safe_load(EXAMPLE_PROFILES.read_text())  # the input is left alone


def test_queueing_off_moves_each_jobs_work_into_its_owners_server(cfg):
    tr = traces.generate(4, users=6)
    moved = levers.jobs_in_sessions(tr)
    for job in tr.jobs:
        hosts = [s for s in moved.sessions if s.user == job.user and s.start <= job.submit
                 and job.submit + job.runtime <= s.end]
        assert len(hosts) == 1 and any(a <= job.submit < b for a, b, _ in hosts[0].active)
    assert accounting.useful_gpu_hours(cfg, moved) >= sum(accounting.session_work(cfg, tr)) - 1e-6


def test_unknown_lever_is_refused(profiles):
    with pytest.raises(ValueError, match="unknown lever"):
        levers.apply("magic", profiles, traces.generate(1, users=1))
