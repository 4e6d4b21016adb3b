"""Queue ETA on known admission histories: exact spans (seconds), 'no estimate yet' when history is thin,
the fields in the gpu-jobs status and the widget's line."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.model.wait_estimate import MIN_SPANS, Admission, estimate
from jupyterhub_gpu.services.jobs.status import derive_status, queue_positions
from jupyterhub_gpu.singleuser.widgets import eta_text, view

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)


def steady(n: int = 12, every_min: int = 10, wait_min: int = 30) -> list[Admission]:
    """A job arrives every `every_min` minutes and is admitted `wait_min` minutes later (a standing backlog)."""
    return [Admission(T0 + timedelta(minutes=every_min * i), T0 + timedelta(minutes=every_min * i + wait_min))
            for i in range(n)]


def test_spans_from_arrivals_to_the_kth_admission():
    hist = steady()
    assert estimate(hist, 3) == estimate(hist, 3)  # deterministic
    # position 3: from each arrival (the first two saw no backlog of 3 yet) to the 3rd admission after it
    e3 = estimate(hist, 3)
    assert (e3.p50_s, e3.p90_s, e3.samples) == (1800.0, 1800.0, 10)  # = the real wait of every 3rd in line
    # position 1: 10 min after each arrival, except the first two (30 and 20 min: the backlog was forming)
    e1 = estimate(hist, 1)
    assert (e1.p50_s, e1.samples) == (600.0, 12)
    assert e1.p90_s == 600.0 + 0.9 * (1200.0 - 600.0)  # inclusive quantiles over [10 x 10 min, 20, 30]
    assert estimate(hist, 4).samples == 0  # never 4 waiting at once: no guess


def test_jobs_admitted_at_once_are_not_queue_history():
    # each job created just before its admission: the quota was free, so none of it says how long a queue waits
    hist = [Admission(T0 + timedelta(hours=i), T0 + timedelta(hours=i, seconds=2)) for i in range(20)]
    e = estimate(hist, 1)
    assert not e.known and e.samples == 0 and e.as_fields() == {"eta_p50_s": None, "eta_p90_s": None, "eta_samples": 0}


def test_thin_history_is_no_estimate():
    assert estimate(steady(MIN_SPANS + 2), 3).samples == MIN_SPANS
    assert not estimate(steady(MIN_SPANS + 1), 3).known  # MIN_SPANS - 1 spans
    assert estimate(steady(MIN_SPANS + 2), 3).known
    assert not estimate(steady(), 0).known
    assert not estimate(steady(), 1, now=T0 + timedelta(minutes=50)).known  # the future is not history


def wl(name, created, admitted=None, queue="vision", ns="team-vision"):
    conds = ([{"type": "QuotaReserved", "status": "True", "lastTransitionTime": admitted.isoformat()}]
             if admitted else [])
    return {"metadata": {"name": f"job-{name}-x", "namespace": ns, "creationTimestamp": created.isoformat(),
                         "ownerReferences": [{"kind": "Job", "name": name}]},
            "spec": {"queueName": queue, "priority": 0}, "status": {"conditions": conds}}


def test_status_and_widget_show_position_and_eta():
    done = [wl(f"old{i}", T0 + timedelta(minutes=10 * i), T0 + timedelta(minutes=10 * i + 20)) for i in range(10)]
    waiting = [wl("a", T0 + timedelta(hours=3)), wl("b", T0 + timedelta(hours=3, minutes=1))]
    pos = queue_positions(done + waiting)
    assert pos["b"] == {"position": 2, "of": 2, "eta_p50_s": 1200, "eta_p90_s": 1200, "eta_samples": 9}
    job = {"metadata": {"name": "b", "namespace": "team-vision", "labels": {}, "annotations": {}},
           "spec": {"suspend": True}}
    status = derive_status(job, waiting[1], [], pos["b"])
    assert status["eta_p50_s"] == 1200 and status["position"] == 2
    status["queue"] = "vision"
    assert view(status)["title"] == "Queued in vision · position 2 of 2 · ETA ~20 min"
    assert eta_text({"eta_p50_s": 1200, "eta_p90_s": 2700}) == "ETA ~20 min (p90 ~45 min)"
    assert eta_text({"eta_p50_s": 30, "eta_p90_s": 9000}) == "ETA ~1 min (p90 ~2.5 h)"
    assert eta_text({}) == "no estimate yet"


def test_calibrated_p90_covers_the_queues_own_past_waits():
    from jupyterhub_gpu.model.wait_estimate import CALIBRATION, LEVEL, MIN_CALIBRATION, QUEUED_S

    # one GPU, first come first served: arrivals ~10 min apart, log-normal run times (some run for hours)
    rng, t, free, hist = random.Random(4), 0.0, 0.0, []
    for _ in range(120):
        t += rng.expovariate(1 / 10)
        start, free = max(t, free), max(t, free) + rng.lognormvariate(0, 1) * 9
        hist.append(Admission(T0 + timedelta(minutes=t), T0 + timedelta(minutes=start)))
    hist.sort(key=lambda a: a.admitted)
    raw, cal = estimate(hist, 1, calibrate=False), estimate(hist, 1)
    assert cal.p50_s == raw.p50_s and cal.samples == raw.samples and cal.p90_s > raw.p90_s
    # the scale is the conformal LEVEL quantile of (real wait / raw p90 at arrival) of the latest queued jobs
    scores = []
    for i in range(len(hist) - 1, -1, -1):
        a = hist[i]
        if (a.admitted - a.created).total_seconds() < QUEUED_S:
            continue
        before = [b for b in hist if b.admitted <= a.created]
        ahead = sum(1 for b in hist[i + 1:] + hist[:i] if b.created < a.created < b.admitted)
        e = estimate(before, ahead + 1, calibrate=False)
        if e.known:
            scores.append((a.admitted - a.created).total_seconds() / e.p90_s)
        if len(scores) == CALIBRATION:
            break
    assert len(scores) >= MIN_CALIBRATION
    covered = sum(s <= cal.p90_s / raw.p90_s + 1e-9 for s in scores) / len(scores)
    assert covered >= LEVEL > sum(s <= 1 for s in scores) / len(scores)  # the raw p90 covered fewer


def test_calibration_needs_enough_past_and_leaves_a_regular_queue_alone():
    hist = steady()  # every job waited exactly as long: nothing to correct
    assert estimate(hist, 3) == estimate(hist, 3, calibrate=False)
    few = steady(MIN_SPANS + 4)  # too few queued jobs with an estimate at their arrival: the raw p90
    assert estimate(few, 1) == estimate(few, 1, calibrate=False)
