"""The culler's safety fixes against a real hub (real local-process servers, the culler's least-scope token)
and a real Prometheus scraping a DCGM-format exporter: admins exempted, hostile user names culled exactly,
a restarted server judged on its own GPU samples, a GPU busy by GPU_UTIL kept, activity from the future.
Pure counterparts: tests/security/test_culler_decisions.py."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import requests
from culler.fixtures import GPU_IDLE, SCRAPE, exporter, fresh, hub, prometheus  # noqa: F401 (fixtures)

from jupyterhub_gpu.cluster.dcgm import UTIL_METRIC
from jupyterhub_gpu.cluster.times import parse_time

#: Hostile user names (the hub accepts these; it refuses "/" and names of only dots) and the users whose
#: servers a badly built URL would reach instead (`a?b` → `a`, `x%2e%2e` → `x..`, `with space` → `with`).
#: The victims stay busy and must be kept.
HOSTILE = ["a?b", "a#b", "x%2e%2e", "with space", "ünïcødé", "a%2fb"]
VICTIMS = ["a", "x..", "with"]


def idle_for(seconds: float, since: float) -> None:
    time.sleep(max(0.0, since + seconds - time.monotonic()))


def wait_samples(prometheus: str, pod: str, samples: int, window: int = GPU_IDLE, timeout: float = 90) -> None:
    """Until Prometheus holds `samples` samples of the pod's profiling series over `window`."""
    q = f'count_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{exported_pod="{pod}"}}[{window}s])'
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = requests.get(f"{prometheus}/api/v1/query", params={"query": q}, timeout=10).json()["data"]["result"]
        if res and min(float(r["value"][1]) for r in res) >= samples:
            return
        time.sleep(SCRAPE)
    raise AssertionError(f"Prometheus has fewer than {samples} samples for {pod}")


def wait_gone(hub, *users: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while any(hub.server(u) for u in users) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not [u for u in users if hub.server(u)], "servers still running"


def age_of(hub, user: str) -> float:
    return (datetime.now(timezone.utc) - parse_time(hub.server(user)["started"])).total_seconds()


def test_exempt_admins_keeps_the_admin_and_culls_a_lookalike(fresh):
    """The culler's role (list:users implies read:users:name) reads the admin flag; `boss?x` is not boss."""
    hub = fresh
    hub.start({"boss": "t4", "boss?x": "t4"})
    seen = hub.api("GET", hub.user_path("boss"), token=hub.culler_token)
    assert seen.status_code == 200 and seen.json()["admin"] is True, seen.text
    assert hub.api("GET", hub.user_path("boss?x"), token=hub.culler_token).json()["admin"] is False
    idle_for(GPU_IDLE + 2, time.monotonic())
    run = hub.cull("--exempt-admins")
    boss, lookalike = run.decision("boss"), run.decision("boss?x")
    assert (boss["action"], boss["reason"]) == ("keep", "admin-exempt"), boss
    assert (lookalike["action"], lookalike["reason"]) == ("cull", "idle"), lookalike
    wait_gone(hub, "boss?x")
    assert hub.server("boss")["ready"]
    assert "not culling" not in run.stderr  # the flag was read, not assumed


def test_hostile_names_cull_exactly_their_own_servers(fresh):
    hub = fresh
    hub.start({**{u: "t4" for u in HOSTILE}, **{v: "t4" for v in VICTIMS}})
    idle_for(GPU_IDLE + 2, time.monotonic())
    hub.touch(*VICTIMS)
    run = hub.cull()
    for user in HOSTILE:
        d = run.decision(user)
        assert (d["action"], d["reason"]) == ("cull", "idle"), d
    for user in VICTIMS:
        assert run.decision(user)["action"] == "keep"
    wait_gone(hub, *HOSTILE)
    for user in VICTIMS:
        assert hub.server(user)["ready"], f"{user}'s server was stopped"
    assert "Cull cycle failed" not in run.stderr


def test_restarted_server_is_judged_on_its_own_gpu_samples(fresh, exporter, prometheus):
    """The predecessor's pod (same name, same DCGM series) sat idle for the whole window; its successor has a
    busy kernel and is younger than the window: not GPU-idle. Once the window is all its own, it is."""
    hub, window = fresh, 40
    exporter.set_gpu("jupyter-restarted", activity=0.0)
    hub.start({"restarted": "t4"})
    wait_samples(prometheus, "jupyter-restarted", int(window * 0.9), window)
    hub.api("DELETE", f"{hub.user_path('restarted')}/server")
    wait_gone(hub, "restarted")
    hub.start({"restarted": "t4"})
    hub.touch("restarted")
    run = hub.cull("--gpu-idle-policy=gpu", f"--gpu-window={window}", prometheus=prometheus)
    d = run.decision("restarted")
    assert d["age_s"] < window, "the restart took longer than the test's window"
    assert (d["action"], d["gpu_state"], d["fallback"]) == ("keep", "unknown", "younger-than-gpu-window"), d
    assert hub.server("restarted")["ready"]
    idle_for(window + 2 * SCRAPE + 1 - age_of(hub, "restarted"), time.monotonic())
    hub.touch("restarted")
    d = hub.cull("--gpu-idle-policy=gpu", f"--gpu-window={window}", prometheus=prometheus).decision("restarted")
    assert (d["action"], d["reason"], d["gpu_state"]) == ("cull", "gpu-idle", "idle"), d
    wait_gone(hub, "restarted")


def test_full_gpu_busy_by_gpu_util_is_kept(fresh, exporter, prometheus):
    """The profiling metric reads ~0 while GPU_UTIL shows work: busy. The control, idle by both, is culled."""
    hub = fresh
    exporter.set_gpu("jupyter-util-busy", activity=0.01, util=85)
    exporter.set_gpu("jupyter-util-idle", activity=0.01, util=0)
    hub.start({"util-busy": "t4", "util-idle": "t4"})
    t0 = time.monotonic()
    wait_samples(prometheus, "jupyter-util-busy", GPU_IDLE)
    wait_samples(prometheus, "jupyter-util-idle", GPU_IDLE)
    idle_for(GPU_IDLE + 2 * SCRAPE + 1, t0)
    run = hub.cull("--gpu-idle-policy=gpu", prometheus=prometheus)
    busy, idle = run.decision("util-busy"), run.decision("util-idle")
    assert (busy["action"], busy["reason"], busy["gpu_state"]) == ("keep", "gpu-busy", "busy"), busy
    assert busy["evidence"]["metric"] == UTIL_METRIC and busy["evidence"]["max_activity"] == 0.85
    assert (idle["action"], idle["reason"]) == ("cull", "gpu-idle"), idle
    wait_gone(hub, "util-idle")
    assert hub.server("util-busy")["ready"]


def test_activity_from_the_future_counts_as_now(fresh, exporter, prometheus):
    """A server whose clock runs 50 min ahead (the hub refuses activity more than an hour ahead): inactivity
    is 0, not -3000, and the cycle does not break (a negative idle time reached a Prometheus counter, which
    refuses it)."""
    hub = fresh
    exporter.set_gpu("jupyter-ahead", activity=0.0)
    hub.start({"ahead": "t4", "ahead-cpu": "cpu"})
    t0 = time.monotonic()
    wait_samples(prometheus, "jupyter-ahead", GPU_IDLE)
    idle_for(GPU_IDLE + 2 * SCRAPE + 1, t0)
    hub.touch("ahead", "ahead-cpu", at=datetime.now(timezone.utc) + timedelta(minutes=50))
    assert parse_time(hub.server("ahead")["last_activity"]) > datetime.now(timezone.utc) + timedelta(minutes=49)
    run = hub.cull("--gpu-idle-policy=gpu", prometheus=prometheus)
    gpu, cpu = run.decision("ahead"), run.decision("ahead-cpu")
    assert (gpu["action"], gpu["reason"]) == ("cull", "gpu-idle") and gpu["inactive_s"] == 0, gpu
    assert (cpu["action"], cpu["inactive_s"]) == ("keep", 0) and 2900 < cpu["future_s"] <= 3000, cpu
    assert "in the future" in run.stderr and "Cull cycle failed" not in run.stderr
    wait_gone(hub, "ahead")


def test_the_running_service_still_culls_a_quiet_server_whose_clock_runs_ahead(fresh):
    """The hub only moves last_activity forward, so a server that reported activity 50 min ahead and then
    went quiet would look active for 50 min. The hub-managed culler (dry run, a cycle a second) counts that
    activity from when it first saw it, and culls the server its idle timeout later."""
    hub = fresh
    base = f"{hub.url}/services/gpu-culler"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{base}/health", timeout=5).ok:
                break
        except requests.RequestException:
            pass
        time.sleep(0.5)
    hub.start({"ahead-quiet": "t4"})
    token = hub.user_token("ahead-quiet")
    hub.touch("ahead-quiet", at=datetime.now(timezone.utc) + timedelta(minutes=50))
    touched = time.monotonic()
    culled = []
    while not culled and time.monotonic() < touched + GPU_IDLE + 30:
        time.sleep(0.5)
        culled = requests.get(f"{base}/warnings/ahead-quiet", headers={"Authorization": f"token {token}"},
                              timeout=10).json()["culled"]
    assert culled, "a server quiet since its last (future) report was never culled"
    assert (culled[-1]["reason"], culled[-1]["dry_run"]) == ("idle", True)
    assert time.monotonic() - touched >= GPU_IDLE - 2  # its idle timeout, counted from the report
