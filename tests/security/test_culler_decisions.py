"""The culler's safety rules as pure decisions; tests/security/test_culler_hub.py proves each against a real hub
and a real Prometheus. Hostile names, restarted pods, clocks in the future, a GPU busy by GPU_UTIL only."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from urllib.parse import unquote, urlsplit

import pytest

from jupyterhub_gpu.cluster.dcgm import PROF_METRIC
from jupyterhub_gpu.cluster.rules import Rule
from jupyterhub_gpu.services.culler import decide as D
from jupyterhub_gpu.services.culler.service import user_url

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
T4 = Rule("t4", idle_timeout=1800, max_age=None, is_gpu=True, gpus=1, hourly_cost=0.5)
GPU = D.Settings(policy="gpu", scrape_interval=15, warn_before=600)
HOSTILE = ["a?b", "a#b", "a/b", "%2e%2e", "..", "with space", "ünïcødé", "用户", "UPPER", "a%2fb", "a--b", "-a-",
           "x" * 70, "a&b=c", "a;b", "a\\b", "a\"b"]


def server(idle: float = 0.0, age: float = 3600.0, last_offset: float | None = None, user: str = "alice"):
    last = NOW - timedelta(seconds=idle) if last_offset is None else NOW + timedelta(seconds=last_offset)
    return {"name": "", "full_name": f"{user}/", "started": (NOW - timedelta(seconds=age)).isoformat(),
            "last_activity": last.isoformat(), "user_options": {"profile": "t4"}, "ready": True}


def ev(max_activity: float, samples: int = 120) -> D.GPUEvidence:
    return D.GPUEvidence("jhub", "jupyter-alice", max_activity, samples, PROF_METRIC)


# ------------------------------------------------------------------ names


@pytest.mark.parametrize("name", HOSTILE)
def test_user_urls_keep_the_name_one_path_segment(name):
    url = user_url("http://hub/hub/api", name)
    parts = urlsplit(url)
    assert parts.query == "" and parts.fragment == ""
    assert parts.path.count("/") == 4 and unquote(parts.path.rsplit("/", 1)[1]) == name


def _kubespawner_pod_name(monkeypatch, user: str, server_name: str, template: str | None) -> str:
    """The oracle: KubeSpawner's own name for this server (its __init__ expands pod_name_template)."""
    import kubespawner.spawner
    from kubespawner import KubeSpawner

    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **kw: None)  # no cluster to configure
    kw = {"pod_name_template": template} if template else {}
    spawner = KubeSpawner(_mock=True, user=SimpleNamespace(name=user, id=7, url="/", escaped_name=user),
                          orm_spawner=SimpleNamespace(name=server_name, server=None, state=None,
                                                      user_options=None, last_activity=None, started=None), **kw)
    return spawner.pod_name


@pytest.mark.parametrize("template", [None, "jupyter-{username}--{servername}", "nb-{escaped_user_server}",
                                      "{safe_username}-{servername}-"])
@pytest.mark.parametrize("user,server_name", [(u, "") for u in HOSTILE] + [
    ("alice", "a/b"), ("a?b", "x y"), ("ünï", "ß"), ("a", "-b"), ("x" * 60, "y" * 30), ("a#b", "..")])
async def test_pod_names_match_kubespawners_own_expansion(monkeypatch, template, user, server_name):
    """Evidence is looked up under the pod name: it must be exactly KubeSpawner's, or a server gets another
    pod's GPU series (or none)."""
    expected = _kubespawner_pod_name(monkeypatch, user, server_name, template)
    assert D.pod_name(user, server_name, template or "jupyter-{user_server}") == expected


def test_a_pod_name_template_the_culler_cannot_fill_stops_it_at_start(tmp_path):
    import os
    import subprocess
    import sys

    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES

    env = dict(os.environ, JUPYTERHUB_API_TOKEN="x")
    p = subprocess.run([sys.executable, "-m", "jupyterhub_gpu.services.culler", "--once", "--url=http://127.0.0.1:9/hub/api",
                        f"--profiles-file={EXAMPLE_PROFILES}", "--pod-name-template=jupyter-{userid}"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert p.returncode == 2 and "pod-name-template" in p.stderr and "userid" in p.stderr, p.stderr[-2000:]


def test_hostile_names_never_share_a_pod_name():
    names = {D.pod_name(u, "") for u in HOSTILE}
    assert len(names) == len(HOSTILE)


def test_pod_query_quotes_the_pod_name():
    q = D.pod_evidence_query(30, 'a"b\\c', "jhub")
    assert 'exported_pod="a\\"b\\\\c"' in q and 'pod="a\\"b\\\\c",namespace="jhub"' in q
    assert "[30s]" in q and q.count("label_replace") == 8


# ------------------------------------------------------------------ admin flag


def test_admin_flag_is_read_only_when_the_hub_sends_it():
    assert D.admin_flag({"name": "boss", "admin": True}) is True
    assert D.admin_flag({"name": "eve", "admin": False}) is False
    assert D.admin_flag({"name": "boss"}) is None  # a narrower role: unknown, not "not an admin"
    assert D.admin_flag({"name": "boss", "admin": "yes"}) is None and D.admin_flag(None) is None


# ------------------------------------------------------------------ restarted pods


def test_lookback_counts_only_samples_after_the_start():
    started = NOW - timedelta(seconds=100)
    assert D.lookback(1800, started, NOW, 15) == 85  # the old pod's series is left out
    assert D.lookback(60, started, NOW, 15) == 60
    assert D.lookback(60, NOW + timedelta(seconds=5), NOW, 15) == 0
    assert D.lookback(60, None, NOW, 15) == 0


def test_a_server_younger_than_its_window_is_never_gpu_idle():
    # a restarted server: 10 minutes old, GPU idle over every sample it has, kernel busy
    d = D.decide(server(idle=0, age=600), T4, GPU, NOW, D.GPUView(True, True, ev(0.0, 120), ev(0.0, 80)))
    assert (d.action, d.gpu_state, d.fallback) == ("keep", "unknown", "younger-than-gpu-window")
    d = D.decide(server(idle=0, age=600), T4, GPU, NOW, D.GPUView(True, True, None, None))
    assert (d.action, d.fallback) == ("keep", "no-gpu-series")
    # its own samples may still show it busy
    d = D.decide(server(idle=5000, age=600), T4, GPU, NOW, D.GPUView(True, True, ev(0.7, 30), ev(0.7, 30)))
    assert (d.action, d.reason, d.gpu_state) == ("keep", "gpu-busy", "busy")
    # once the whole window is its own, an idle GPU culls
    d = D.decide(server(idle=0, age=1800 + 16), T4, GPU, NOW, D.GPUView(True, True, ev(0.0, 120), ev(0.0, 80)))
    assert (d.action, d.reason) == ("cull", "gpu-idle")


def test_no_warning_from_a_soon_window_older_than_the_server():
    d = D.decide(server(idle=0, age=1000), T4, GPU, NOW, D.GPUView(True, True, ev(0.5, 60), ev(0.0, 60)))
    assert (d.action, d.reason) == ("keep", "gpu-busy")
    d = D.decide(server(idle=0, age=1300), T4, GPU, NOW, D.GPUView(True, True, ev(0.5, 80), ev(0.0, 80)))
    assert (d.action, d.reason) == ("warn", "idle-soon")


# ------------------------------------------------------------------ clocks in the future


def test_future_activity_is_now_never_negative():
    d = D.decide(server(last_offset=3600), T4, D.Settings(), NOW)
    assert d.inactive_s == 0 and d.future_s == 3600 and d.action == "keep"
    assert d.as_log()["future_s"] == 3600


def test_future_activity_counts_from_when_the_culler_first_saw_it():
    """The hub only moves last_activity forward, so a clamp alone would keep the server until 2099."""
    seen = NOW - timedelta(seconds=1900)
    d = D.decide(server(last_offset=10 ** 8), T4, D.Settings(), NOW, activity_seen=seen)
    assert (d.action, d.reason, d.inactive_s) == ("cull", "idle", 1900)


def test_future_start_is_age_zero():
    s = server(idle=0)
    s["started"] = (NOW + timedelta(seconds=50)).isoformat()
    d = D.decide(s, T4, GPU, NOW, D.GPUView(True, True, ev(0.0), ev(0.0)))
    assert d.age_s == 0 and d.future_s == 50 and d.action == "keep"


def test_a_future_gpu_idle_cull_reclaims_no_negative_hours():
    d = D.decide(server(last_offset=600, age=4000), T4, GPU, NOW, D.GPUView(True, True, ev(0.0), ev(0.0)))
    assert (d.action, d.reason, d.inactive_s) == ("cull", "gpu-idle", 0)
    assert all(x >= 0 for x in D.reclaimed(T4, d, 8 * 3600))


# ------------------------------------------------------------------ busy by GPU_UTIL


def _series(stat, value, **labels):
    return {"metric": {"pod": "jupyter-alice", "namespace": "jhub", "gpuhub_stat": stat, **labels},
            "value": [1.0, str(value)]}


def test_full_gpu_busy_by_util_alone_is_busy_mig_slice_is_not():
    full = [_series("prof_max", 0.01), _series("prof_count", 120), _series("util_max", 0.85),
            _series("util_count", 120)]
    e = D.parse_evidence(full)[("jhub", "jupyter-alice")]
    d = D.decide(server(idle=5000), T4, GPU, NOW, D.GPUView(True, True, e, e))
    assert (d.action, d.reason, d.gpu_state) == ("keep", "gpu-busy", "busy")
    mig = [dict(s, metric={**s["metric"], "GPU_I_ID": "3", "GPU_I_PROFILE": "1g.10gb"}) for s in full]
    e = D.parse_evidence(mig)[("jhub", "jupyter-alice")]
    assert (e.max_activity, e.metric) == (0.01, PROF_METRIC)
    assert D.decide(server(idle=0), T4, GPU, NOW, D.GPUView(True, True, e, e)).reason == "gpu-idle"
