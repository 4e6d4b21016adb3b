"""Showback arithmetic on known lifetimes and DCGM series: exact to 1e-9 (floats), $ to the cent."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.contract import JOB_LABEL, PROFILE_LABEL, USER_ANNOTATION
from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.services.usage import accounting as acc
from jupyterhub_gpu.services.usage.store import UsageStore

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)
TAINT = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
CFG = ProfilesConfig.model_validate({
    "pools": {
        "system": {"node_selector": {"agentpool": "system"}, "instance_type": "Standard_D8s_v5",
                   "cost_per_node_hour": 0.384},
        "gpua100": {"node_selector": {"agentpool": "a"}, "gpu": {"model": "A100-80GB", "count_per_node": 4},
                    "taints": [TAINT], "cost_per_node_hour": 14.69},
        "gpumig": {"node_selector": {"agentpool": "m"}, "gpu": {"model": "A100-80GB"}, "taints": [TAINT],
                   "sharing": {"strategy": "mig", "layout": "all-1g.10gb"}, "cost_per_node_hour": 3.67},
    },
    "profiles": [
        {"slug": "cpu", "display_name": "CPU", "pool": "system", "default": True},
        {"slug": "a100x2", "display_name": "2 A100", "pool": "gpua100", "gpu": {"kind": "full", "count": 2}},
        {"slug": "mig", "display_name": "MIG", "pool": "gpumig", "gpu": {"kind": "mig", "profile": "1g.10gb"}},
    ],
    "teams": {"vision": {"namespace": "team-vision", "quota": {"gpua100": 4}}},
})
RULES, TEAMS = acc.rules_and_teams(CFG)


def pod(name, profile, start, end=None, ns="jhub", user="alice", job=None, uid=None, phase="Running"):
    labels = {PROFILE_LABEL: profile, **({JOB_LABEL: job} if job else {})}
    st = {"phase": phase, "startTime": start.isoformat()}
    if end is not None:
        st["phase"] = "Succeeded"
        st["containerStatuses"] = [{"name": "x", "state": {"terminated": {"finishedAt": end.isoformat()}}}]
    return {"metadata": {"name": name, "namespace": ns, "uid": uid or name, "labels": labels,
                         "annotations": {USER_ANNOTATION: user}}, "status": st}


def test_prices_come_from_the_profiles_file():
    # 2 of the node's 4 A100s: half of 14.69 $/h; one of seven 1g.10gb slices of 3.67 $/h
    assert RULES["a100x2"].gpus == 2 and RULES["a100x2"].hourly_cost == pytest.approx(7.345)
    assert RULES["mig"].gpus == 1 and RULES["mig"].hourly_cost == pytest.approx(round(3.67 / 7, 3))
    assert RULES["cpu"].gpus == 0


def test_lifetimes_from_pods_servers_jobs_and_cpu():
    server = acc.lifetime_of(pod("jupyter-alice", "a100x2", T0, T0 + timedelta(hours=3)), RULES, TEAMS)
    job = acc.lifetime_of(pod("train-x-abc", "mig", T0, ns="team-vision", user="bob", job="train-x"), RULES, TEAMS)
    assert (server.kind, server.team, server.gpus, server.end) == ("server", "", 2, T0 + timedelta(hours=3))
    assert (job.kind, job.team, job.job, job.user, job.end) == ("job", "vision", "train-x", "bob", None)
    assert acc.lifetime_of(pod("jupyter-c", "cpu", T0), RULES, TEAMS) is None  # no GPU: not GPU showback
    assert acc.lifetime_of(pod("jupyter-d", "nope", T0), RULES, TEAMS) is None
    unstarted = pod("jupyter-e", "mig", T0)
    del unstarted["status"]["startTime"]
    assert acc.lifetime_of(unstarted, RULES, TEAMS) is None


def test_held_hours_are_clipped_to_the_range():
    lt = acc.lifetime_of(pod("p", "a100x2", T0, T0 + timedelta(hours=3)), RULES, TEAMS)
    assert lt.held_hours(T0, T0 + timedelta(days=1)) == pytest.approx(6.0, abs=1e-9)
    assert lt.held_hours(T0 + timedelta(hours=2), T0 + timedelta(days=1)) == pytest.approx(2.0, abs=1e-9)
    assert lt.held_hours(T0 + timedelta(hours=4), T0 + timedelta(days=1)) == 0
    running = acc.lifetime_of(pod("q", "mig", T0), RULES, TEAMS)
    assert running.held_hours(T0, T0 + timedelta(minutes=90)) == pytest.approx(1.5, abs=1e-9)


def test_report_by_user_team_profile_job_with_dcgm_use():
    until = T0 + timedelta(hours=10)
    lts = [acc.lifetime_of(p, RULES, TEAMS) for p in (
        pod("jupyter-alice", "a100x2", T0, T0 + timedelta(hours=2)),
        pod("jupyter-alice", "a100x2", T0 + timedelta(hours=4), T0 + timedelta(hours=5), uid="again"),
        pod("train-x-abc", "mig", T0, T0 + timedelta(hours=4), ns="team-vision", user="bob", job="train-x"),
    )]
    used = {("jhub", "jupyter-alice"): acc.PodUse(1.5, 7000.0), ("team-vision", "train-x-abc"): acc.PodUse(2.0, 9000.0)}
    by_user = {r.key: r for r in acc.aggregate(lts, T0, until, "user", used)}
    alice, bob = by_user["alice"], by_user["bob"]
    assert alice.gpu_hours_held == pytest.approx(6.0) and alice.pods == 2
    assert alice.gpu_hours_used == pytest.approx(1.5)  # one pod name, two lifetimes: split 4:2, summed back
    assert alice.utilisation == pytest.approx(25.0) and alice.peak_memory_mib == 7000.0
    assert alice.cost == pytest.approx(3 * 7.345)
    assert bob.gpu_hours_held == pytest.approx(4.0) and bob.cost == pytest.approx(4 * 0.524)
    assert bob.utilisation == pytest.approx(50.0)
    assert [r.key for r in acc.aggregate(lts, T0, until, "team", used)] == ["(servers)", "vision"]
    assert {r.key for r in acc.aggregate(lts, T0, until, "job", used)} == {"(servers)", "team-vision/train-x"}
    assert {r.key: r.pods for r in acc.aggregate(lts, T0, until, "profile")} == {"a100x2": 2, "mig": 1}
    assert acc.aggregate(lts, T0, until, "profile")[0].as_dict()["utilisation_pct"] == 0.0
    with pytest.raises(ValueError, match="--by"):
        acc.aggregate(lts, T0, until, "node")


def dcgm(stat, value, pod, ns="jhub", gpu="0", mig=None):
    labels = {"gpuhub_stat": stat, "gpu": gpu, "exported_pod": pod, "exported_namespace": ns,
              "pod": "dcgm-exporter-x", "namespace": "gpu-operator"}
    if mig:
        labels["GPU_I_ID"], labels["GPU_I_PROFILE"] = mig, "1g.10gb"
    return {"metric": labels, "value": [0, str(value)]}


def test_used_hours_prefer_prof_fall_back_to_util_never_on_mig():
    scrape = 15.0
    result = [
        # 240 samples (1 h) at 0.5 activity; GPU_UTIL is ignored when PROF has samples
        dcgm("prof_sum", 120.0, "a"), dcgm("prof_count", 240, "a"), dcgm("util_sum", 200.0, "a"),
        dcgm("util_count", 240, "a"), dcgm("mem_max", 7000, "a"),
        # no PROF: GPU_UTIL/100 — 240 samples at 25 %, two GPUs
        dcgm("util_sum", 60.0, "b"), dcgm("util_count", 240, "b"),
        dcgm("util_sum", 60.0, "b", gpu="1"), dcgm("util_count", 240, "b", gpu="1"),
        # a MIG slice with only GPU_UTIL (the whole GPU's): no evidence of its own use
        dcgm("util_sum", 240.0, "c", mig="3"), dcgm("util_count", 240, "c", mig="3"),
        {"metric": {"gpuhub_stat": "prof_sum"}, "value": [0, "1"]},  # no pod: ignored
        dcgm("prof_sum", "NaN", "d"),
    ]
    used = acc.parse_used(result, scrape)
    assert used[("jhub", "a")] == acc.PodUse(0.5, 7000.0)
    assert used[("jhub", "b")].used_hours == pytest.approx(0.5)
    assert used[("jhub", "c")].used_hours == 0.0
    assert ("jhub", "d") not in used
    q = acc.used_query(3600)
    assert "sum_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[3600s])" in q and "DCGM_FI_DEV_FB_USED" in q


def wl(name, created, admitted=None, ns="team-vision", queue="vision", evictions=()):
    conds = [{"type": "QuotaReserved", "status": "True",
              "lastTransitionTime": admitted.isoformat()}] if admitted else []
    return {"metadata": {"name": name, "namespace": ns, "creationTimestamp": created.isoformat()},
            "spec": {"queueName": queue},
            "status": {"conditions": conds, "schedulingStats": {"evictions": [
                {"reason": r, "count": c} for r, c in evictions]}}}


def test_queue_waits_percentiles_and_evictions():
    wls = [wl(f"w{i}", T0, T0 + timedelta(minutes=m))
           for i, m in enumerate([0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100])]
    wls.append(wl("pending", T0))
    waits = acc.queue_waits(wls, T0, T0 + timedelta(hours=2))
    assert len(waits) == 11
    p = acc.percentiles(waits)
    assert p == {"p50": 50 * 60.0, "p90": 90 * 60.0, "count": 11}
    assert acc.percentiles([]) == {"p50": None, "p90": None, "count": 0}
    assert acc.queue_waits(wls, T0 + timedelta(minutes=95), T0 + timedelta(hours=2)) == [6000.0]
    ev = [wl("a", T0, T0, evictions=[("Preempted", 2)]), wl("b", T0, T0, evictions=[("PodsReadyTimeout", 1)])]
    ev.append({"metadata": {"name": "c"}, "status": {"conditions": [
        {"type": "Evicted", "status": "True", "reason": "Preempted"}]}})
    assert acc.evictions(ev) == {"Preempted": 3, "PodsReadyTimeout": 1}


def test_store_survives_restarts_and_closes_vanished_pods(tmp_path):
    store = UsageStore(tmp_path)
    a = acc.lifetime_of(pod("a", "mig", T0), RULES, TEAMS)
    b = acc.lifetime_of(pod("b", "mig", T0), RULES, TEAMS)
    still, done = acc.close_missing({}, [a, b], T0 + timedelta(minutes=1))
    assert set(still) == {"a", "b"} and done == []
    store.save_open(still, T0 + timedelta(minutes=1))
    # restart: "a" vanished while the collector was down; "b" finished with an end time
    opened, seen = UsageStore(tmp_path).load_open()
    b_done = acc.lifetime_of(pod("b", "mig", T0, T0 + timedelta(minutes=5)), RULES, TEAMS)
    still, done = acc.close_missing(opened, [b_done], seen)
    assert {lt.uid: lt.end for lt in done} == {"a": T0 + timedelta(minutes=1), "b": T0 + timedelta(minutes=5)}
    assert set(still) == {"b"}  # finished but still listed: remembered, so it is finished only once
    assert acc.close_missing(still, [b_done], seen) == (still, [])
    assert acc.close_missing(still, [], seen) == ({}, [])  # gone at last: nothing more to record
    store.append_finished(done)
    store.append_finished(done[:1])  # a duplicate is stored once
    assert sorted(lt.uid for lt in UsageStore(tmp_path).finished()) == ["a", "b"]


def test_pods_the_watch_saw_between_two_lists_are_closed_once_at_their_own_end(tmp_path):
    m = timedelta(minutes=1)
    old = acc.lifetime_of(pod("old", "mig", T0), RULES, TEAMS)
    opened = {"old": old}
    # between two lists: "brief" started and ended (its DELETED event), "old" went (deleted with a
    # deletionTimestamp, no container end), "gap" was there at the watch but is gone from the list after it,
    # "kept" still runs; "done" is a job pod already recorded finished
    brief = acc.lifetime_of(pod("brief", "a100x2", T0 + m, T0 + 2 * m), RULES, TEAMS)
    gone_old = acc.lifetime_of({**pod("old", "mig", T0), "metadata": {
        **pod("old", "mig", T0)["metadata"], "deletionTimestamp": (T0 + 3 * m).isoformat()}}, RULES, TEAMS)
    gap = acc.lifetime_of(pod("gap", "mig", T0 + m), RULES, TEAMS)
    kept = acc.lifetime_of(pod("kept", "mig", T0 + m), RULES, TEAMS)
    finished = acc.lifetime_of(pod("done", "mig", T0, T0 + m, ns="team-vision", job="j"), RULES, TEAMS)
    opened["done"] = finished
    now = T0 + 5 * m
    known, ends = acc.fold_watched(opened, [brief, gone_old, gap, kept, kept, finished], now)
    assert known["brief"].end is None and known["done"] is finished and "done" not in ends
    assert ends == {"brief": T0 + 2 * m, "old": T0 + 3 * m, "gap": now, "kept": now}
    still, done = acc.close_missing(known, [kept], T0 + 4 * m, None, ends)
    assert set(still) == {"kept"} and still["kept"].end is None
    assert {lt.uid: lt.end for lt in done} == {"brief": T0 + 2 * m, "old": T0 + 3 * m, "gap": now}
    # without the watch, "old" would end at the last list and "brief" would not be there at all
    assert {lt.uid: lt.end for lt in acc.close_missing(opened, [kept], T0 + 4 * m)[1]} == {"old": T0 + 4 * m}
    store = UsageStore(tmp_path)
    store.append_finished(done)
    assert store.stored(["brief", "kept", "gap", "gap"]) == {"brief", "gap"}
    assert store.load_positions() == {}
    store.save_positions({"jhub": "1234", "team-vision": "99"})
    store.save_positions({"jhub": "1240", "team-vision": "99"})
    assert UsageStore(tmp_path).load_positions() == {"jhub": "1240", "team-vision": "99"}
