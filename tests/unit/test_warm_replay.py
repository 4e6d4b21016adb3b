"""Warm capacity in the day replay (pure): the autoscaler MODEL follows a pool's warm schedule as AKS enforces a
changed min-count, the spread trace, and the model-only replay (devcluster/jupyterhub_gpu_dev/replay/quick.py,
tradeoff.py) whose start waits split into quota, node and start-up."""
from __future__ import annotations

import copy

import pytest
import yaml

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import parse_profiles
from jupyterhub_gpu_dev.replay import quick, tradeoff
from jupyterhub_gpu_dev.replay import trace as traces
from jupyterhub_gpu_dev.replay.autoscaler import AutoscalerModel, PoolModel, pool_models

H = 3600


@pytest.fixture(scope="module")
def profiles() -> dict:
    return yaml.safe_load(EXAMPLE_PROFILES.read_text())


def test_model_adds_the_warm_node_at_the_window_and_keeps_it_until_the_end():
    warm = PoolModel(0, 4, 4, warm=lambda t: 1 if 8 * H <= t < 18 * H else 0)
    m = AutoscalerModel({"t4": warm}, provision_delay=240, scale_down_after=600)
    assert m.start(0.0) == []
    assert m.step(8 * H - 10, {}, {}).create == [] and m.count("t4") == 0
    m.step(8 * H, {}, {})
    assert m.count("t4") == 1 and not m.ready("t4-0", 8 * H + 239) and m.ready("t4-0", 8 * H + 240)
    assert m.step(8 * H + 240, {}, {}).create == [("t4", "t4-0")]
    for t in range(8 * H + 300, 18 * H, 900):  # empty all day: kept, it is the minimum
        assert m.step(t, {}, {}).remove == []
    # empty for longer than scale_down_after already: it goes as soon as the minimum drops
    assert m.step(18 * H - 1, {}, {}).remove == [] and m.step(18 * H, {}, {}).remove == ["t4-0"]
    assert m.node_seconds(20 * H)["t4"] == pytest.approx(10 * H)


def test_pool_models_read_the_schedule_on_the_traces_weekday(profiles):
    cfg = parse_profiles(profiles)  # the example: gput4 warm Mon-Fri 08:00-18:00, one node
    monday, saturday = pool_models(cfg, 0)["gput4"], pool_models(cfg, 5)["gput4"]
    assert [monday.minimum(t) for t in (7.99 * H, 8 * H, 17.99 * H, 18 * H)] == [0, 1, 1, 0]
    assert saturday.minimum(9 * H) == 0
    assert pool_models(cfg)["gpumig"].minimum(3 * H) == 1 and pool_models(cfg)["gpumig"].warm is None


def one_user(profile="t4-shared", group="data-science", start=9 * H):
    return traces.Trace(duration=24 * H, users=[traces.User(name="ds01", groups=[group], vm_profile=profile)],
                        sessions=[traces.Session(user="ds01", profile=profile, start=start, end=start + 2 * H,
                                                 active=[(start + 60, start + 2 * H - 60, 0.5)])])


def test_quick_replay_wait_is_the_node_then_the_start_up_and_warm_removes_the_node_part(profiles):
    tr = one_user()
    cold = tradeoff.with_warm(profiles, tr, "none")
    warm = tradeoff.with_warm(profiles, tr, "workday")
    out = {}
    for name, data in (("cold", cold), ("warm", warm)):
        cfg = parse_profiles(data)
        r = quick.QuickReplay(cfg, tr, provision_delay=300, scale_down_after=600, startup_s=25, tick=5).run()
        (start,) = r.starts
        out[name] = (start, r.node_seconds["gput4"])
    cold_start, cold_s = out["cold"]
    assert (cold_start.quota_s, cold_start.node_s, cold_start.startup_s) == (0, 300, 25)
    warm_start, warm_s = out["warm"]
    assert (warm_start.node_s, warm_start.wait) == (0, 25)
    assert cold_s == pytest.approx(2 * H + 600, abs=10)  # asked at 9:00, removed 10 min after the 11:00 stop
    assert warm_s == pytest.approx(10 * H, abs=10)  # 08:00 to 18:00 (empty since 11:10: goes with the window)


def test_quick_replay_quota_wait(profiles):
    """Two users of a team whose quota of the H100 pool is 1 (no cohort): the second waits for the first."""
    data = copy.deepcopy(profiles)
    data["teams"]["ml-research"].update(quota={"gpuh100": 1}, borrowing_limit=None, cohort=None)
    data["profiles"][[p["slug"] for p in data["profiles"]].index("h100-full")]["max_per_user"] = 1
    users = [traces.User(name=n, groups=["ml-research"], vm_profile="h100-full") for n in ("a1", "a2")]
    sessions = [traces.Session(user="a1", profile="h100-full", start=9 * H, end=10 * H, active=[(9 * H, 10 * H, .5)]),
                traces.Session(user="a2", profile="h100-full", start=9 * H + 60, end=11 * H,
                               active=[(9 * H + 60, 11 * H, .5)])]
    tr = traces.Trace(duration=24 * H, users=users, sessions=sessions)
    cfg = parse_profiles(tradeoff.with_warm(data, tr, "none"))
    r = quick.QuickReplay(cfg, tr, provision_delay=240, startup_s=20, tick=10).run()
    first, second = sorted(r.starts, key=lambda s: s.asked)
    assert first.quota_s == 0 and first.node_s == 240
    assert second.quota_s == pytest.approx(H - 60, abs=10)  # admitted when a1 stops at 10:00


def test_spread_keeps_people_and_times_and_moves_them_over_four_pools(profiles):
    base = traces.generate(1, users=6)
    tr = traces.spread(base)
    assert [(s.user, s.start, s.end, s.active) for s in tr.sessions] == [
        (s.user, s.start, s.end, s.active) for s in base.sessions]
    assert [j.submit for j in tr.jobs] == [j.submit for j in base.jobs]
    assert tradeoff.used_pools(profiles, tr) == {"gput4", "gput4mps", "gpuh100", "spota100"}
    assert all(e.pool == "spota100" for e in tr.evictions)
    cfg = parse_profiles(tradeoff.with_warm(profiles, tr, "workday", idle_pools_at_zero=True))
    assert cfg.pools["gpumig"].min_nodes == 0 and not cfg.pools["gpumig"].warm
    assert all(cfg.pools[p].warm for p in ("gput4", "gput4mps", "gpuh100", "spota100"))
    for s in tr.sessions:  # every user may use their profile
        assert cfg.profile(s.profile).allowed_for(tr.user(s.user).groups)


def test_tradeoff_rows_for_every_lever_and_warm_setting(profiles):
    tr = traces.scaled(traces.spread(traces.generate(1, users=4)), 12)
    rows = tradeoff.matrix(profiles, tr, list(tradeoff.WARM), [None, "autoscaling"], provision_delay=240,
                           scale_down_after=600, startup_s=30, idle_pools_at_zero=True)
    assert [(r["lever_off"], r["warm"]) for r in rows] == [(lv, w) for lv in (None, "autoscaling")
                                                          for w in tradeoff.WARM]
    by = {(r["lever_off"], r["warm"]): r for r in rows}
    assert by[(None, "workday")]["gpu_node_hours"] > by[(None, "none")]["gpu_node_hours"]
    assert by[(None, "workday")]["work_hours"]["node_p90_s"] <= by[(None, "none")]["work_hours"]["node_p90_s"]
    assert by[("autoscaling", "none")]["work_hours"]["node_p90_s"] == 0
    assert "| all on | workday |" in tradeoff.table(rows)
