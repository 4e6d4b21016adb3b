"""Queue ETA on known admission histories: exact spans (seconds), 'no estimate yet' when history is thin,
the fields in the gpu-jobs status and the widget's line."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from extension.widgets import eta_text, view
from gpu_spawner.services.jobs.status import derive_status, queue_positions
from gpu_spawner.services.usage.eta import MIN_SPANS, Admission, estimate

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)


def backlog(gaps_min: list[float]) -> list[Admission]:
    """Everything created at T0 (a standing backlog); admissions `gaps_min` minutes apart."""
    out, t = [], T0
    for g in gaps_min:
        t += timedelta(minutes=g)
        out.append(Admission(T0, t))
    return out


def test_spans_of_k_admissions_under_backlog():
    hist = backlog([10] * 11)  # one admission every 10 min
    assert estimate(hist, 1) == estimate(hist, 1)  # deterministic
    e1, e3 = estimate(hist, 1), estimate(hist, 3)
    assert (e1.p50_s, e1.p90_s, e1.samples) == (600.0, 600.0, 10)
    assert (e3.p50_s, e3.p90_s, e3.samples) == (1800.0, 1800.0, 8)


def test_p90_reflects_the_spread():
    hist = backlog([5, 5, 5, 5, 5, 5, 5, 5, 5, 50, 5])  # one slow gap among eleven
    e = estimate(hist, 1)
    assert e.p50_s == 300.0 and e.samples == 10
    assert e.p90_s == 300.0 + 0.1 * (3000.0 - 300.0)  # inclusive quantiles: 9/10 of the way to the max


def test_idle_time_is_not_a_wait():
    # each job created just before its admission: no backlog, so no span measures the queue
    hist = [Admission(T0 + timedelta(hours=i), T0 + timedelta(hours=i, seconds=5)) for i in range(20)]
    e = estimate(hist, 1)
    assert not e.known and e.samples == 0 and e.as_fields() == {"eta_p50_s": None, "eta_p90_s": None, "eta_samples": 0}


def test_thin_history_is_no_estimate():
    assert not estimate(backlog([10] * MIN_SPANS), 1).known  # MIN_SPANS admissions: MIN_SPANS - 1 spans
    assert estimate(backlog([10] * (MIN_SPANS + 1)), 1).known
    assert not estimate(backlog([10] * 11), 0).known
    assert not estimate(backlog([10] * 11), 1, now=T0 + timedelta(minutes=30)).known  # the future is not history


def wl(name, created, admitted=None, queue="vision", ns="team-vision"):
    conds = [{"type": "QuotaReserved", "status": "True", "lastTransitionTime": admitted.isoformat()}] if admitted else []
    return {"metadata": {"name": f"job-{name}-x", "namespace": ns, "creationTimestamp": created.isoformat(),
                         "ownerReferences": [{"kind": "Job", "name": name}]},
            "spec": {"queueName": queue, "priority": 0}, "status": {"conditions": conds}}


def test_status_and_widget_show_position_and_eta():
    done = [wl(f"old{i}", T0, T0 + timedelta(minutes=10 * (i + 1))) for i in range(10)]
    waiting = [wl("a", T0 + timedelta(hours=2)), wl("b", T0 + timedelta(hours=2, minutes=1))]
    pos = queue_positions(done + waiting)
    assert pos["b"] == {"position": 2, "of": 2, "eta_p50_s": 1200, "eta_p90_s": 1200, "eta_samples": 8}
    job = {"metadata": {"name": "b", "namespace": "team-vision", "labels": {}, "annotations": {}},
           "spec": {"suspend": True}}
    status = derive_status(job, waiting[1], [], pos["b"])
    assert status["eta_p50_s"] == 1200 and status["position"] == 2
    status["queue"] = "vision"
    assert view(status)["title"] == "Queued in vision · position 2 of 2 · ETA ~20 min"
    assert eta_text({"eta_p50_s": 1200, "eta_p90_s": 2700}) == "ETA ~20 min (p90 ~45 min)"
    assert eta_text({"eta_p50_s": 30, "eta_p90_s": 9000}) == "ETA ~1 min (p90 ~2.5 h)"
    assert eta_text({}) == "no estimate yet"
