"""The culler's pure decisions: rules from the profiles file, DCGM evidence, keep / warn / cull."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.cluster.dcgm import PROF_METRIC, UTIL_METRIC
from jupyterhub_gpu.cluster.rules import Rule, default_rule, rules_from_profiles
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.services.culler import SCOPES, culler_service
from jupyterhub_gpu.services.culler import decide as D

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
CFG = load_profiles(EXAMPLE_PROFILES)
RULES = rules_from_profiles(CFG, default_idle_timeout=3600, default_max_age=None)
DEFAULT = default_rule(3600, None)
SHARED_T4 = RULES["t4-shared"]  # idle 30m, max_age 12h, a time-sliced T4: DCGM's series are the device's
T4 = replace(SHARED_T4, sharing="none", sharers=1)  # the same rule on a whole T4: GPU evidence is its own
CPU = RULES["cpu"]  # idle 8h, CPU


def server(profile="t4-shared", idle=0.0, age=3600.0, name="", user="alice", last=True, opts=None):
    return {
        "name": name, "full_name": f"{user}/{name}",
        "started": (NOW - timedelta(seconds=age)).isoformat(),
        "last_activity": (NOW - timedelta(seconds=idle)).isoformat() if last else None,
        "user_options": opts if opts is not None else ({"profile": profile} if profile else {}),
        "ready": True, "pending": None,
    }


def ev(max_activity, samples=120, metric=PROF_METRIC, pod="jupyter-alice"):
    return D.GPUEvidence(namespace="jhub", pod=pod, max_activity=max_activity, samples=samples, metric=metric)


def view(now=None, soon=None, reachable=True):
    return D.GPUView(prometheus=True, reachable=reachable, now=now, soon=soon)


# scrape every 15 s; t4 window 30 min → 120 expected samples
GPU = D.Settings(policy="gpu", scrape_interval=15, warn_before=600)
BOTH = D.Settings(policy="both", scrape_interval=15, warn_before=600)
ACT = D.Settings(policy="activity", warn_before=600)


# ------------------------------------------------------------------ rules

def test_rules_come_from_the_profiles_file():
    assert (T4.idle_timeout, T4.max_age, T4.is_gpu, T4.gpus) == (1800, 12 * 3600, True, 1)
    assert (CPU.idle_timeout, CPU.max_age, CPU.is_gpu) == (8 * 3600, None, False)
    assert RULES["a100-mig-1g10gb"].idle_timeout == 45 * 60
    assert RULES["a100-spot"].max_age is None


def test_rule_cost_reuses_the_picker():
    from jupyterhub_gpu.cluster.prices import hourly_cost
    assert T4.hourly_cost == hourly_cost(CFG, CFG.profile("t4-shared")) > 0
    assert RULES["h100-full"].hourly_cost == pytest.approx(6.98)


def test_unknown_or_missing_profile_gets_the_default():
    assert D.rule_for(server("nope"), RULES, DEFAULT) is DEFAULT
    assert D.rule_for(server(None), RULES, DEFAULT) is DEFAULT
    assert D.rule_for(server(opts={"profile": 3}), RULES, DEFAULT) is DEFAULT
    assert D.rule_for(server("cpu"), RULES, DEFAULT) is CPU


def test_profile_without_idle_timeout_takes_the_default():
    cfg = CFG.model_copy(update={"profiles": [CFG.profiles[0].model_copy(update={"idle_timeout": None})]})
    assert rules_from_profiles(cfg, 999, 7)["cpu"].idle_timeout == 999
    assert rules_from_profiles(cfg, 999, 7)["cpu"].max_age == 7


def test_server_names():
    assert D.server_names(server(name="")) == ("alice", "")
    assert D.server_names(server(name="big", user="bob")) == ("bob", "big")


@pytest.mark.parametrize("user,name,pod", [
    ("alice", "", "jupyter-alice"),
    ("alice", "big", "jupyter-alice--big"),
    ("Bob.Smith@x", "", "jupyter-bob-smith-x---65b8104b"),
])
def test_pod_names_match_kubespawner(user, name, pod):
    assert D.pod_name(user, name) == pod


def test_pod_name_custom_template():
    assert D.pod_name("alice", "", "gpu-{username}") == "gpu-alice"


# ------------------------------------------------------------------ evidence

def series(stat, value, pod="jupyter-alice", ns="jhub", exported=False, **labels):
    metric = {"gpuhub_stat": stat, "gpu": "0", "UUID": "GPU-1", **labels}
    if exported:
        metric.update(exported_pod=pod, exported_namespace=ns, pod="dcgm-exporter-x", namespace="gpu-operator")
    else:
        metric.update(pod=pod, namespace=ns)
    return {"metric": metric, "value": [1.0, str(value)]}


def test_query_names_both_metrics_and_the_window():
    q = D.evidence_query(1800)
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE[1800s]" in q and "DCGM_FI_DEV_GPU_UTIL[1800s]) / 100" in q
    assert q.count(" or ") == 3


def test_full_gpu_is_busy_when_either_metric_says_so():
    e = D.parse_evidence([series("prof_max", 0.02), series("prof_count", 100),
                          series("util_max", 0.9), series("util_count", 100)])[("jhub", "jupyter-alice")]
    assert (e.max_activity, e.samples, e.metric) == (0.9, 100, UTIL_METRIC)
    e = D.parse_evidence([series("prof_max", 0.6), series("prof_count", 100),
                          series("util_max", 0.0), series("util_count", 40)])[("jhub", "jupyter-alice")]
    assert (e.max_activity, e.samples, e.metric) == (0.6, 100, PROF_METRIC)
    e = D.parse_evidence([series("prof_max", 0.01), series("prof_count", 100),
                          series("util_max", 0.0), series("util_count", 100)])[("jhub", "jupyter-alice")]
    assert (e.max_activity, e.metric) == (0.01, PROF_METRIC) and e.state(0.05, 120, 0.8) == "idle"


def test_util_is_the_fallback():
    e = D.parse_evidence([series("util_max", 0.3), series("util_count", 50)])[("jhub", "jupyter-alice")]
    assert (e.max_activity, e.samples, e.metric) == (0.3, 50, UTIL_METRIC)


def test_exported_labels_win():
    out = D.parse_evidence([series("prof_max", 0.0, exported=True), series("prof_count", 9, exported=True)])
    assert list(out) == [("jhub", "jupyter-alice")]


def test_series_without_pod_are_ignored():
    s = {"metric": {"gpuhub_stat": "prof_max", "gpu": "0"}, "value": [1, "0.5"]}
    assert D.parse_evidence([s]) == {}


def test_nan_and_garbage_values_are_ignored():
    assert D.parse_evidence([series("prof_max", "NaN"), series("prof_count", 3)]) == {}
    assert D.parse_evidence([{"metric": {"pod": "p", "gpuhub_stat": "prof_max"}, "value": None}]) == {}


def test_mig_instances_are_separate_devices_and_util_is_ignored_on_mig():
    mig = dict(GPU_I_ID="3", GPU_I_PROFILE="1g.10gb")
    out = D.parse_evidence([series("prof_max", 0.01, **mig), series("prof_count", 100, **mig),
                            series("util_max", 0.9, **mig), series("util_count", 100, **mig)])
    e = out[("jhub", "jupyter-alice")]
    assert e.max_activity == 0.01 and e.devices == ("gpu0/mig3(1g.10gb)",)
    # util alone on a MIG instance is the whole GPU: not evidence about this slice
    assert D.parse_evidence([series("util_max", 0.0, **mig), series("util_count", 100, **mig)]) == {}


def test_multi_gpu_pod_is_as_busy_as_its_busiest_and_as_covered_as_its_worst():
    out = D.parse_evidence([series("prof_max", 0.01, gpu="0"), series("prof_count", 100, gpu="0"),
                            series("prof_max", 0.6, gpu="1"), series("prof_count", 40, gpu="1")])
    e = out[("jhub", "jupyter-alice")]
    assert (e.max_activity, e.samples, len(e.devices)) == (0.6, 40, 2)


@pytest.mark.parametrize("max_activity,samples,state", [
    (0.01, 120, "idle"), (0.049, 96, "idle"), (0.05, 120, "busy"), (0.9, 3, "busy"),
    (0.01, 95, "unknown"), (0.0, 0, "unknown"),
])
def test_evidence_state(max_activity, samples, state):
    assert ev(max_activity, samples).state(0.05, 120, 0.8) == state


def test_lookup_with_and_without_namespace():
    out = {("jhub", "jupyter-alice"): ev(0.0)}
    assert D.lookup_evidence(out, "jupyter-alice", "jhub") is not None
    assert D.lookup_evidence(out, "jupyter-alice", "other") is None
    assert D.lookup_evidence(out, "jupyter-alice", None) is not None


# ------------------------------------------------------------------ decisions: activity

def test_gpu_server_idle_past_its_timeout_is_culled_cpu_server_kept():
    assert D.decide(server("t4-shared", idle=3600), T4, ACT, NOW).action == "cull"
    d = D.decide(server("cpu", idle=3600), CPU, ACT, NOW)
    assert (d.action, d.reason) == ("keep", "active")


def test_idle_reason_and_numbers():
    d = D.decide(server(idle=2000, age=5000), T4, ACT, NOW)
    assert (d.action, d.reason, d.inactive_s, d.age_s, d.profile) == ("cull", "idle", 2000, 5000, "t4-shared")


def test_just_under_timeout_is_a_warning():
    d = D.decide(server(idle=1800 - 300), T4, ACT, NOW)
    assert (d.action, d.reason, d.cull_in_s) == ("warn", "idle-soon", 300)


def test_far_from_timeout_is_kept_without_warning():
    assert D.decide(server(idle=60), T4, ACT, NOW).action == "keep"


def test_max_age_culls_a_busy_server():
    d = D.decide(server(idle=0, age=13 * 3600), T4, ACT, NOW)
    assert (d.action, d.reason) == ("cull", "max-age")


def test_max_age_warning():
    d = D.decide(server(idle=0, age=12 * 3600 - 120), T4, ACT, NOW)
    assert (d.action, d.reason, d.cull_in_s) == ("warn", "max-age-soon", 120)


def test_no_activity_uses_start_time():
    assert D.decide(server(age=4000, last=False), T4, ACT, NOW).action == "cull"
    assert D.decide(server(age=100, last=False), T4, ACT, NOW).action == "keep"


def test_no_data_at_all_is_kept():
    s = server(last=False)
    s["started"] = None
    d = D.decide(s, T4, ACT, NOW)
    assert (d.action, d.reason) == ("keep", "no-activity-data")


def test_rule_without_idle_timeout_never_idles():
    r = Rule("x", None, None)
    assert D.decide(server(idle=10**7), r, ACT, NOW).reason == "no-idle-timeout"


def test_admin_exempt_only_when_enabled():
    s = server(idle=10**5)
    assert D.decide(s, T4, ACT, NOW, admin=True).action == "cull"
    d = D.decide(s, T4, D.Settings(exempt_admins=True), NOW, admin=True)
    assert (d.action, d.reason) == ("keep", "admin-exempt")


def test_activity_policy_ignores_gpu():
    d = D.decide(server(idle=0), T4, ACT, NOW, view(ev(0.0)))
    assert (d.action, d.gpu_state) == ("keep", None)


# ------------------------------------------------------------------ decisions: GPU policies

def test_gpu_policy_culls_busy_kernel_with_idle_gpu():
    d = D.decide(server(idle=0), T4, GPU, NOW, view(ev(0.01)))
    assert (d.action, d.reason, d.gpu_state) == ("cull", "gpu-idle", "idle")
    assert d.evidence["window_s"] == 1800 and d.evidence["expected_samples"] == 120


def test_gpu_policy_keeps_busy_gpu_even_without_activity():
    d = D.decide(server(idle=7200), T4, GPU, NOW, view(ev(0.7)))
    assert (d.action, d.reason) == ("keep", "gpu-busy")


def test_gpu_policy_warns_when_gpu_idle_over_shorter_window():
    d = D.decide(server(idle=0), T4, GPU, NOW, view(ev(0.7), soon=ev(0.01, 80)))
    assert (d.action, d.reason, d.cull_in_s) == ("warn", "idle-soon", 600)


def test_noise_floor_is_idle():
    assert D.decide(server(), T4, GPU, NOW, view(ev(0.012))).action == "cull"


def test_short_coverage_falls_back_to_activity():
    d = D.decide(server(idle=0), T4, GPU, NOW, view(ev(0.0, samples=10)))
    assert (d.action, d.fallback, d.gpu_state) == ("keep", "short-gpu-coverage", "unknown")
    assert D.decide(server(idle=4000), T4, GPU, NOW, view(ev(0.0, samples=10))).action == "cull"


@pytest.mark.parametrize("gv,why", [
    (D.GPUView(prometheus=True, reachable=False), "prometheus-unreachable"),
    (view(None), "no-gpu-series"),
    (D.GPUView(), "no-prometheus"),
])
def test_missing_gpu_data_never_culls_and_falls_back_to_activity(gv, why):
    d = D.decide(server(idle=0), T4, GPU, NOW, gv)
    assert (d.action, d.fallback) == ("keep", why)
    d = D.decide(server(idle=4000), T4, GPU, NOW, gv)
    assert (d.action, d.reason, d.fallback) == ("cull", "idle", why)


def test_cpu_server_never_uses_gpu_evidence():
    d = D.decide(server("cpu", idle=0), CPU, GPU, NOW, view(ev(0.0)))
    assert (d.action, d.gpu_state, d.fallback) == ("keep", None, None)


def test_both_needs_both():
    assert D.decide(server(idle=4000), T4, BOTH, NOW, view(ev(0.0))).reason == "idle+gpu-idle"
    d = D.decide(server(idle=0), T4, BOTH, NOW, view(ev(0.0)))
    assert (d.action, d.reason) == ("keep", "active")
    d = D.decide(server(idle=4000), T4, BOTH, NOW, view(ev(0.5)))
    assert (d.action, d.reason) == ("keep", "gpu-busy")


def test_both_warns_on_activity_when_gpu_idle():
    d = D.decide(server(idle=1700), T4, BOTH, NOW, view(ev(0.0)))
    assert (d.action, d.cull_in_s) == ("warn", 100)


def test_max_age_beats_busy_gpu():
    d = D.decide(server(idle=0, age=50000), T4, GPU, NOW, view(ev(0.99)))
    assert (d.action, d.reason) == ("cull", "max-age")


def test_configured_gpu_window_overrides_idle_timeout():
    s = D.Settings(policy="gpu", gpu_window=600, scrape_interval=15)
    d = D.decide(server(), T4, s, NOW, view(ev(0.0, samples=40)))
    assert d.action == "cull" and d.evidence["window_s"] == 600


def test_decision_log_is_flat_json():
    import json
    d = D.decide(server(idle=0), T4, GPU, NOW, view(ev(0.01)))
    line = json.loads(json.dumps(d.as_log()))
    assert line["action"] == "cull" and line["evidence"]["metric"] == PROF_METRIC
    assert "cull_in_s" not in line


# ------------------------------------------------------------------ reclaimed

def test_reclaimed_until_max_age_or_horizon():
    d = D.decide(server(idle=4000, age=11 * 3600), T4, ACT, NOW)
    gpu_h, dollars, idle_h = D.reclaimed(T4, d, horizon_s=8 * 3600)
    assert gpu_h == pytest.approx(1.0) and dollars == pytest.approx(T4.hourly_cost)
    assert idle_h == pytest.approx(4000 / 3600)
    h100 = RULES["a100-spot"]  # no max_age: horizon
    d = D.decide(server("a100-spot", idle=4000), h100, ACT, NOW)
    assert D.reclaimed(h100, d, 7200)[0] == pytest.approx(2.0)
    assert D.reclaimed(T4, D.decide(server(idle=0), T4, ACT, NOW), 3600) == (0, 0, 0)


# ------------------------------------------------------------------ registration

def test_service_registration_has_exactly_the_least_scopes():
    service, role = culler_service("/p.yaml", env={"GPUHUB_CULLER_POLICY": "gpu"}, port=1234)
    assert sorted(role["scopes"]) == sorted(SCOPES) == sorted(
        ["list:users", "read:users:activity", "read:servers", "delete:servers",
         "access:services!service=gpu-jobs"])  # forwarding its warnings to gpu-jobs (services/notify)
    assert role["services"] == [service["name"]] == ["gpu-culler"]
    assert service["command"][:3] == [sys.executable, "-m", "jupyterhub_gpu.services.culler"]
    assert "--profiles-file=/p.yaml" in service["command"] and "--gpu-idle-policy=gpu" in service["command"]
    assert service["url"] == "http://127.0.0.1:1234"


def test_hub_config_registers_the_culler(monkeypatch):
    """The repo's jupyterhub_config.py, loaded the way JupyterHub loads it."""
    from pathlib import Path

    from jupyterhub.app import JupyterHub

    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES

    monkeypatch.setenv("GPUHUB_PROFILES", str(EXAMPLE_PROFILES))
    app = JupyterHub()
    app.load_config_file(str(Path(__file__).resolve().parents[2] / "jupyterhub_config.py"))
    service = next(s for s in app.config.JupyterHub.services if s["name"] == "gpu-culler")
    assert service["command"][1:3] == ["-m", "jupyterhub_gpu.services.culler"]
    role = next(r for r in app.config.JupyterHub.load_roles if r.get("services") == ["gpu-culler"])
    assert sorted(role["scopes"]) == sorted(SCOPES)


def test_configure_works_on_an_unset_config():
    from traitlets.config import Config

    from jupyterhub_gpu.config import configure
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES

    c = Config()
    configure(c, str(EXAMPLE_PROFILES))
    configure(c, str(EXAMPLE_PROFILES))  # idempotent
    assert [s["name"] for s in c.JupyterHub.services].count("gpu-culler") == 1
    assert [r["name"] for r in c.JupyterHub.load_roles].count("gpu-culler-role") == 1


def test_cli_help_lists_gpu_options():
    out = subprocess.run([sys.executable, "-m", "jupyterhub_gpu.services.culler", "--help"], capture_output=True,
                         text=True, timeout=60).stdout
    for opt in ("--gpu-idle-policy", "--prometheus-url", "--dry-run", "--warn-before", "--once"):
        assert opt in out
