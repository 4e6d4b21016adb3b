"""The culler against a real hub with real local-process servers and a real Prometheus.

Each test starts its own servers through the hub's REST API (user_options {"profile": slug}), lets them
really sit idle (the test profiles time out after seconds), sets what the DCGM exporter reports, and
runs one cull cycle (`python -m jupyterhub_gpu.services.culler --once`) with the culler service's least-scope token.
"""
from __future__ import annotations

import html
import time

import requests
from security.stalls import StallMeter

from jupyterhub_gpu_dev.devhub import login

from .fixtures import GPU_IDLE, SCRAPE


def idle_for(seconds: float, since: float) -> None:
    time.sleep(max(0.0, since + seconds - time.monotonic()))


def wait_gpu_coverage(prometheus: str, pod: str, samples: int, timeout: float = 60) -> None:
    """Until Prometheus holds `samples` samples of the pod's series (exported_pod, as in a cluster)."""
    q = f'count_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{exported_pod="{pod}"}}[{GPU_IDLE}s]) or ' \
        f'count_over_time(DCGM_FI_DEV_GPU_UTIL{{exported_pod="{pod}"}}[{GPU_IDLE}s])'
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = requests.get(f"{prometheus}/api/v1/query", params={"query": q}, timeout=10).json()["data"]["result"]
        if res and min(float(r["value"][1]) for r in res) >= samples:
            return
        time.sleep(SCRAPE)
    raise AssertionError(f"Prometheus has too few samples for {pod}")


def test_gpu_server_idle_past_its_timeout_is_culled_cpu_server_kept(fresh):
    hub = fresh
    hub.start({"gpu-idle": "t4", "cpu-idle": "cpu"})
    t0 = time.monotonic()
    idle_for(GPU_IDLE + 2, t0)
    run = hub.cull()
    gpu, cpu = run.decision("gpu-idle"), run.decision("cpu-idle")
    assert (gpu["action"], gpu["reason"], gpu["profile"]) == ("cull", "idle", "t4")
    assert gpu["inactive_s"] >= GPU_IDLE
    assert (cpu["action"], cpu["profile"]) == ("keep", "cpu") and cpu["inactive_s"] >= GPU_IDLE
    deadline = time.monotonic() + 30
    while hub.server("gpu-idle") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert hub.server("gpu-idle") is None
    assert hub.server("cpu-idle")["ready"]


def test_max_age_culls_a_busy_server(fresh):
    hub = fresh
    hub.start({"old-busy": "short-life"})
    t0 = time.monotonic()
    idle_for(13, t0)
    hub.touch("old-busy")
    run = hub.cull()
    d = run.decision("old-busy")
    assert (d["action"], d["reason"]) == ("cull", "max-age") and d["inactive_s"] < 5
    deadline = time.monotonic() + 30
    while hub.server("old-busy") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert hub.server("old-busy") is None


def test_gpu_policy_culls_busy_kernel_idle_gpu_and_keeps_busy_gpu(fresh, exporter, prometheus):
    hub = fresh
    # idle MIG slice (its parent GPU is busy with another tenant: GPU_UTIL must not count on MIG);
    # a whole GPU reporting only DCGM_FI_DEV_GPU_UTIL (the fallback metric), busy.
    exporter.set_gpu("jupyter-gpu-quiet", activity=0.01, util=85, mig=("3", "1g.10gb"))
    exporter.set_gpu("jupyter-gpu-busy", util=85)
    hub.start({"gpu-quiet": "mig", "gpu-busy": "t4"})
    t0 = time.monotonic()
    wait_gpu_coverage(prometheus, "jupyter-gpu-quiet", GPU_IDLE)
    wait_gpu_coverage(prometheus, "jupyter-gpu-busy", GPU_IDLE)
    idle_for(GPU_IDLE + 2 * SCRAPE + 1, t0)  # GPU evidence counts once the window is all this server's
    touched = time.monotonic()
    hub.touch("gpu-quiet", "gpu-busy")  # both kernels busy
    run = hub.cull("--gpu-idle-policy=gpu", prometheus=prometheus)
    since_touch = time.monotonic() - touched
    quiet, busy = run.decision("gpu-quiet"), run.decision("gpu-busy")
    assert (quiet["action"], quiet["reason"], quiet["gpu_state"]) == ("cull", "gpu-idle", "idle"), quiet
    assert quiet["evidence"]["metric"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    # the kernel's activity is the touch (however long a loaded machine took to run the cull), not older
    assert quiet["evidence"]["devices"] == ["gpu0/mig3(1g.10gb)"] and quiet["inactive_s"] <= since_touch + 1
    assert (busy["action"], busy["reason"], busy["gpu_state"]) == ("keep", "gpu-busy", "busy"), busy
    assert busy["evidence"]["metric"] == "DCGM_FI_DEV_GPU_UTIL" and busy["evidence"]["max_activity"] == 0.85
    deadline = time.monotonic() + 30
    while hub.server("gpu-quiet") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert hub.server("gpu-quiet") is None and hub.server("gpu-busy")["ready"]


def test_both_policy_keeps_a_busy_kernel_on_an_idle_gpu(fresh, exporter, prometheus):
    hub = fresh
    exporter.set_gpu("jupyter-both-a", activity=0.0)
    hub.start({"both-a": "t4"})
    t0 = time.monotonic()
    wait_gpu_coverage(prometheus, "jupyter-both-a", GPU_IDLE)
    idle_for(GPU_IDLE + 2 * SCRAPE + 1, t0)  # GPU evidence counts once the window is all this server's
    hub.touch("both-a")
    d = hub.cull("--gpu-idle-policy=both", prometheus=prometheus).decision("both-a")
    assert (d["action"], d["gpu_state"]) == ("keep", "idle")
    assert hub.server("both-a")["ready"]


def test_prometheus_down_falls_back_to_activity_and_never_culls_on_missing_data(fresh, exporter, prometheus):
    hub = fresh
    exporter.set_gpu("jupyter-down-active", activity=0.0)
    hub.start({"down-active": "t4", "down-idle": "t4"})
    t0 = time.monotonic()
    idle_for(GPU_IDLE + 2, t0)
    hub.touch("down-active")
    dead = f"http://127.0.0.1:{__import__('jupyterhub_gpu_dev.devhub', fromlist=['x']).free_port()}"
    run = hub.cull("--gpu-idle-policy=gpu", prometheus=dead)
    assert any(e.get("event") == "gpu-evidence-unavailable" for e in run.events)
    assert "unavailable" in run.stderr
    active, idle = run.decision("down-active"), run.decision("down-idle")
    assert (active["action"], active["fallback"]) == ("keep", "prometheus-unreachable")
    assert (idle["action"], idle["reason"], idle["fallback"]) == ("cull", "idle", "prometheus-unreachable")
    assert hub.server("down-active")["ready"]


def test_a_time_sliced_server_is_judged_by_its_kernel_not_by_the_shared_devices_busy_dcgm(fresh, exporter,
                                                                                           prometheus):
    """A time-sliced T4's DCGM series are the device's, busy with the other tenants: under the GPU policy the
    idle kernel still decides (culled), and the decision's `why` says so in words."""
    hub = fresh
    exporter.set_gpu("jupyter-shared-idle", activity=0.95, util=99)
    hub.start({"shared-idle": "t4-shared"})
    t0 = time.monotonic()
    wait_gpu_coverage(prometheus, "jupyter-shared-idle", GPU_IDLE)
    idle_for(GPU_IDLE + 2 * SCRAPE + 1, t0)
    d = hub.cull("--gpu-idle-policy=gpu", prometheus=prometheus).decision("shared-idle")
    assert (d["action"], d["reason"], d["fallback"]) == ("cull", "idle", "gpu-shared"), d
    assert d.get("gpu_state") is None and d.get("evidence") is None, d  # the busy device was not taken as its use
    assert "kernel idle" in d["why"] and "GPU utilisation not used: time-sliced T4 shared" in d["why"], d["why"]
    deadline = time.monotonic() + 30
    while hub.server("shared-idle") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert hub.server("shared-idle") is None


def test_no_gpu_series_is_not_evidence_of_idleness(fresh, prometheus):
    hub = fresh
    hub.start({"no-series": "t4"})
    hub.touch("no-series")
    d = hub.cull("--gpu-idle-policy=gpu", prometheus=prometheus).decision("no-series")
    assert (d["action"], d["fallback"]) == ("keep", "no-gpu-series")


def test_dry_run_changes_nothing(fresh):
    hub = fresh
    hub.start({"dry-a": "t4", "dry-b": "short-life"})
    t0 = time.monotonic()
    idle_for(13, t0)
    run = hub.cull("--dry-run")
    a, b = run.decision("dry-a"), run.decision("dry-b")
    assert (a["action"], a["reason"], a["dry_run"]) == ("would-cull", "idle", True)
    assert (b["action"], b["reason"]) == ("would-cull", "max-age")
    time.sleep(1)
    assert hub.server("dry-a")["ready"] and hub.server("dry-b")["ready"]


def test_hub_runs_the_service_and_users_read_their_warnings(fresh):
    """The hub-managed culler (dry run, every second, warn 8 s before) answers through the hub's proxy."""
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
    hub.start({"warned": "t4", "other": "cpu"})
    token, other = hub.user_token("warned"), hub.user_token("other")
    assert requests.get(f"{base}/warnings/warned", timeout=10).status_code == 401
    # the token travels in the Authorization header only: one in the URL would end up in access logs
    assert requests.get(f"{base}/warnings/warned", params={"token": token}, timeout=10).status_code == 401
    assert requests.get(f"{base}/warnings/warned", headers={"Authorization": f"token {other}"},
                        timeout=10).status_code == 403
    seen = banner = None
    session = login(hub.url, "warned")
    # the idle clock starts now: the setup above took seconds of the 10 s window on a loaded machine
    hub.touch("warned")
    deadline = time.monotonic() + GPU_IDLE + 30
    while time.monotonic() < deadline:
        body = requests.get(f"{base}/warnings/warned", headers={"Authorization": f"token {token}"},
                            timeout=10).json()
        if body["warnings"] and seen is None:
            seen = body["warnings"][0]
        if body["warnings"] and banner is None:  # the user sees it on the hub's own pages too
            page = html.unescape(session.get(f"{hub.url}/hub/home", timeout=10).text)
            banner = next((ln for ln in page.splitlines() if "will be stopped" in ln), None)
        if body["culled"] and banner is not None:
            break
        time.sleep(0.5)
    assert seen is not None, "no warning before the cull"
    assert banner is not None and "announcement" in banner, "the hub's home page showed no cull warning"
    # whole seconds left, rounded down: 0 is under a second before the cull (a loaded machine polls late)
    assert seen["profile"] == "t4" and seen["reason"] == "idle-soon" and 0 <= seen["cull_in_s"] <= 8
    assert "will be stopped" in seen["message"]
    assert body["culled"][-1]["reason"] == "idle" and body["culled"][-1]["dry_run"] is True
    assert hub.server("warned")["ready"]  # dry run
    metrics = requests.get(f"{base}/metrics", timeout=10).text
    assert 'gpuhub_culler_culls_total{dry_run="true",profile="t4",reason="idle"}' in metrics
    assert 'gpuhub_culler_warnings_total{profile="t4",reason="idle-soon"}' in metrics
    assert "gpuhub_culler_gpu_hours_reclaimed_total" in metrics
    assert "gpuhub_culler_dollars_reclaimed_total" in metrics
    meter = StallMeter(url=f"{base}/metrics")  # its loop's stalls there too (services/loopguard.py)
    for _ in range(5):
        with meter.request("GET /warnings/<user>"):
            requests.get(f"{base}/warnings/warned", headers={"Authorization": f"token {token}"}, timeout=10)
    print(meter.report())
    # admins may read everyone's; users may not
    assert requests.get(f"{base}/warnings", headers={"Authorization": f"token {token}"},
                        timeout=10).status_code == 403
