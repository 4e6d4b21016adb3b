"""Shared GPUs' evidence, per pod: on a time-sliced or MPS pool DCGM reports the device's use for every pod
on it, so the culler never keeps (or culls) a server because of it, and says which evidence it used.
The showback and right-sizing side: tests/unit/test_usage_shared_gpu.py."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.cluster.dcgm import DEVICE, NO_GPU, NO_SERIES, SHARED_DEVICE, attribution
from jupyterhub_gpu.services.culler import decide as D
from jupyterhub_gpu.services.culler.service import _warning_text

from .test_decide import ACT, BOTH, GPU, NOW, RULES, SHARED_T4, T4, ev, server, view

STRATEGIES = st.sampled_from([None, "none", "mig", "time-slicing", "mps"])
DEVICES = st.lists(st.sampled_from(["gpu0", "gpu1", "gpu0/mig3(1g.10gb)", "GPU-abc"]), max_size=8)
MODELS = st.sampled_from(["", "T4", "A100-80GB", "H100-NVL-94GB"])


# ------------------------------------------------------------------ the decision (cluster/dcgm.py)

@given(STRATEGIES, MODELS, st.integers(1, 64), DEVICES)
def test_only_a_whole_gpu_or_a_mig_slice_with_series_is_the_pods_own(strategy, model, sharers, devices):
    a = attribution(strategy, model, sharers, tuple(devices))
    if strategy is None:
        assert (a.source, a.gpu_counts) == (NO_GPU, False)
    elif strategy in ("time-slicing", "mps"):  # with or without series: the device's, never the pod's
        assert (a.source, a.gpu_counts) == (SHARED_DEVICE, False)
        assert a.note.startswith("GPU utilisation not used: ") and (model or "GPU") in a.note
        assert ("time-sliced" if strategy == "time-slicing" else "MPS-shared") in a.note
    elif devices:
        assert (a.source, a.gpu_counts) == (DEVICE, True) and devices[0] in a.note
        assert ("MIG slice" in a.note) == (strategy == "mig")
    else:
        assert (a.source, a.gpu_counts) == (NO_SERIES, False)
    assert len(a.note) < 200  # a bounded phrase, however many devices


def test_the_example_files_rules_know_their_pools_sharing():
    assert (SHARED_T4.sharing, SHARED_T4.gpu_model, SHARED_T4.sharers) == ("time-slicing", "T4", 4)
    assert SHARED_T4.attribution().note == "GPU utilisation not used: time-sliced T4 shared with up to 3 other pods"
    assert RULES["t4-mps"].attribution().source == SHARED_DEVICE
    assert [s for s, r in RULES.items() if D.gpu_shared(r)] == ["t4-shared", "t4-mps"]
    assert RULES["a100-mig-1g10gb"].attribution(("gpu0/mig1(1g.10gb)",)).source == DEVICE
    assert not D.gpu_shared(RULES["cpu"]) and RULES["cpu"].sharing is None


# ------------------------------------------------------------------ the culler

def test_idle_kernel_beside_a_busy_neighbour_is_culled_and_says_why():
    busy = view(ev(0.9), ev(0.9))  # the device is busy: with its neighbour's work
    d = D.decide(server(idle=45 * 60), SHARED_T4, GPU, NOW, busy)
    assert (d.action, d.reason, d.gpu_state, d.fallback, d.evidence) == ("cull", "idle", None, "gpu-shared", None)
    assert d.why == ("kernel idle 45 min (limit 30 min); GPU utilisation not used: time-sliced T4 shared with up "
                     "to 3 other pods")
    assert d.as_log()["why"] == d.why
    # the same evidence on a whole T4 is the server's own: its busy GPU keeps it
    whole = D.decide(server(idle=45 * 60), T4, GPU, NOW, busy)
    assert (whole.action, whole.reason, whole.gpu_state) == ("keep", "gpu-busy", "busy")
    assert whole.why.startswith("kernel idle 45 min (limit 30 min); GPU busy: at most 90 % over 30 min")


def test_a_busy_kernel_on_an_idle_shared_device_is_kept_by_its_activity():
    d = D.decide(server(idle=60), SHARED_T4, GPU, NOW, view(ev(0.0), ev(0.0)))
    assert (d.action, d.reason, d.fallback) == ("keep", "active", "gpu-shared")
    assert d.why.startswith("kernel idle 60 s (limit 30 min); GPU utilisation not used")


EVIDENCE = st.one_of(st.none(), st.builds(ev, st.floats(0, 1), st.integers(0, 500)))
VIEWS = st.one_of(st.just(D.GPUView()), st.builds(D.GPUView, st.just(True), st.booleans(), EVIDENCE, EVIDENCE))


@given(st.sampled_from([GPU, BOTH, ACT]), VIEWS, st.floats(0, 20 * 3600), st.floats(0, 20 * 3600),
       st.sampled_from(["t4-shared", "t4-mps"]))
def test_on_a_shared_pool_the_device_never_decides(settings, gpu, idle, age, slug):
    """Whatever the device shows (busy, idle, no series, Prometheus down), a shared server's decision is the
    activity rule's, with the shared device named as the evidence not used."""
    rule, srv = RULES[slug], server(slug, idle=min(idle, age), age=age)
    d = D.decide(srv, rule, settings, NOW, gpu)
    by_activity = D.decide(srv, rule, ACT, NOW)
    assert (d.action, d.reason, d.cull_in_s, d.gpu_state, d.evidence) == \
        (by_activity.action, by_activity.reason, by_activity.cull_in_s, None, None)
    assert d.fallback == (None if settings.policy == "activity" or d.reason == "max-age" else "gpu-shared")
    assert rule.attribution().note in d.why


def test_warning_on_a_shared_gpu_tells_the_user_the_gpus_load_does_not_count():
    d = D.decide(server(idle=25 * 60), SHARED_T4, GPU, NOW, view(ev(0.9), ev(0.9)))
    assert (d.action, d.reason) == ("warn", "idle-soon")
    text = _warning_text("", SHARED_T4, d)
    assert "stopped in about 5 min" in text and "shared with other servers" in text and "GPU use" not in text
    by_activity = D.decide(server(idle=25 * 60), SHARED_T4, ACT, NOW)  # under any policy
    assert "shared with other servers" in _warning_text("", SHARED_T4, by_activity)
    whole = D.decide(server(idle=25 * 60), T4, BOTH, NOW, view(ev(0.0), ev(0.0)))
    assert (whole.action, whole.reason) == ("warn", "idle-soon")
    assert "shared with other servers" not in _warning_text("", T4, whole)


def test_why_names_max_age_missing_series_and_the_activity_policy():
    old = D.decide(server(age=13 * 3600), T4, GPU, NOW, view())
    assert (old.reason, old.why.split("; ")[0]) == ("max-age", "age 13.0 h (max_age 12.0 h)")
    missing = D.decide(server(idle=10), T4, GPU, NOW, view(None))
    assert missing.why.endswith("GPU evidence not used: no-gpu-series")
    assert D.decide(server(idle=10), T4, ACT, NOW).why.endswith("GPU not used (gpu_idle_policy: activity)")
    assert D.decide(server("cpu", idle=10), RULES["cpu"], GPU, NOW).why == "kernel idle 10 s (limit 8.0 h)"
    forever = replace(T4, idle_timeout=None)
    assert D.decide(server(idle=10), forever, ACT, NOW).why.startswith("kernel idle 10 s (no idle_timeout)")
