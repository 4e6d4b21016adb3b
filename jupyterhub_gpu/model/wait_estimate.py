"""How long the job at place k of a queue will wait (pure), from that queue's recent admissions, and the
picker's words for it. One estimator for every queue: a LocalQueue's history comes from its Kueue
Workloads, a full pool's from its pods' bindings; gpu-jobs, the spawn page, the picker and the usage
metrics all say the same number.

The estimator is empirical, with no model of run times (nobody knows when a notebook will end). It
replays the recent history from the moments jobs arrived to a full queue: from each past job's creation
time t (only jobs that had to queue), the time until the k-th admission after t, counted only when that
k-th admitted workload was already waiting at t (a backlog of at least k stood, as it does now, so the
span measures how fast quota freed up, not idle time). Its answer is that span distribution's p50 and
p90; fewer than `min_spans` such spans: no estimate ("no estimate yet").

The raw p90 of those spans covers too few real waits (76–82 % of them over simulated histories, in the
wait-estimate benchmark: spans from different arrivals overlap, so they vary less than single waits do).
So the p90 is calibrated on the queue's own past (split conformal): for the latest `CALIBRATION` jobs
that queued and are admitted by now, the raw estimate each would have got at its arrival (its position
then, the history before it) against its real wait; the p90 is scaled by the conformal `LEVEL` quantile
of wait / raw p90. Fewer than `MIN_CALIBRATION` such jobs: the raw p90 stands.
"""
from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: Fewer backlogged spans than this and the answer is "no estimate yet".
MIN_SPANS = 5
#: How many recent arrivals an estimate samples: recent enough to follow a changing load, and bounded, as
#: gpu-jobs answers every status poll with an estimate for each queued job.
HISTORY = 200
#: A job admitted within this many seconds of its creation did not queue (Kueue takes about a second).
QUEUED_S = 5
#: The p90's calibration: how many recent queued jobs it replays, and the fewest it trusts.
CALIBRATION = 80
MIN_CALIBRATION = 10
#: The calibration's quantile: above 0.9 because its jobs are censored (those still waiting, the long waits,
#: are not history yet); 0.93 brings the replayed coverage to 0.90-0.91 (measured in the benchmarks).
LEVEL = 0.93


@dataclass(frozen=True)
class Admission:
    created: datetime
    admitted: datetime


@dataclass(frozen=True)
class ETA:
    p50_s: float | None
    p90_s: float | None
    samples: int

    @property
    def known(self) -> bool:
        return self.p50_s is not None

    def as_fields(self) -> dict[str, Any]:
        """The gpu-jobs status fields: eta_p50_s, eta_p90_s (None: no estimate yet), eta_samples."""
        return {"eta_p50_s": None if self.p50_s is None else round(self.p50_s),
                "eta_p90_s": None if self.p90_s is None else round(self.p90_s), "eta_samples": self.samples}


def _spans(hist: list[Admission], admitted: list[datetime], upto: int, position: int) -> list[float]:
    """The backlogged spans for `position` over the first `upto` admissions of `hist` (sorted by admission)."""
    spans = []
    for a in hist[max(upto - HISTORY, 0):upto]:  # the recent arrivals, measured against every admission
        if (a.admitted - a.created).total_seconds() < QUEUED_S:  # it got in at once: the quota was free then
            continue
        j = bisect.bisect_right(admitted, a.created, 0, upto) + position - 1  # the k-th admission after it
        if j < upto and hist[j].created <= a.created:
            spans.append((hist[j].admitted - a.created).total_seconds())
    return spans


def _p90(spans: list[float]) -> float:
    return statistics.quantiles(spans, n=10, method="inclusive")[8]


def _calibration(hist: list[Admission], admitted: list[datetime], upto: int, min_spans: int) -> float:
    """The p90's scale: the conformal LEVEL quantile of (real wait / raw p90 at arrival) of recent queued jobs."""
    scores: list[float] = []
    for i in range(upto - 1, -1, -1):
        a = hist[i]
        wait = (a.admitted - a.created).total_seconds()
        if wait < QUEUED_S:
            continue
        seen = bisect.bisect_right(admitted, a.created, 0, upto)  # what had been admitted when it arrived
        ahead = sum(1 for b in hist[seen:i] if b.created < a.created)  # waiting before it, admitted before it
        spans = _spans(hist, admitted, seen, ahead + 1)
        if len(spans) >= min_spans:
            scores.append(wait / max(_p90(spans), 1.0))
            if len(scores) >= CALIBRATION:
                break
    if len(scores) < MIN_CALIBRATION:
        return 1.0
    scores.sort()
    return scores[min(math.ceil((len(scores) + 1) * LEVEL), len(scores)) - 1]


_calibrations: dict[tuple, float] = {}


def _calibrated(hist: list[Admission], admitted: list[datetime], upto: int, min_spans: int) -> float:
    """`_calibration`, remembered for a few histories: gpu-jobs asks once per queued job of the same queue."""
    key = (id(hist), len(hist), upto, hist[upto - 1] if upto else None, min_spans)
    if key not in _calibrations:
        if len(_calibrations) > 64:
            _calibrations.clear()
        _calibrations[key] = _calibration(hist, admitted, upto, min_spans)
    return _calibrations[key]


def estimate(history: list[Admission], position: int, now: datetime | None = None,
             min_spans: int = MIN_SPANS, calibrate: bool = True, admitted: list[datetime] | None = None) -> ETA:
    """ETA of the job at 1-based `position` from `history` (admissions, oldest first; only those before
    `now` count); `calibrate`: scale the p90 by the queue's own past misses (module docstring).
    `admitted`: the history's admission times, when the caller keeps them (gpu-jobs' cache does)."""
    if position < 1:
        return ETA(None, None, 0)
    admitted = admitted if admitted is not None else [a.admitted for a in history]
    upto = len(history) if now is None else bisect.bisect_right(admitted, now)
    spans = _spans(history, admitted, upto, position)
    if len(spans) < min_spans:
        return ETA(None, None, len(spans))
    p50, p90 = statistics.median(spans), _p90(spans)
    if calibrate:
        p90 *= _calibrated(history, admitted, upto, min_spans)
    return ETA(p50, max(p90, p50), len(spans))


def approx(seconds: float) -> str:
    """'~12 min', '~1 min' (under 90 s), '~2.5 h'."""
    return "~1 min" if seconds < 90 else f"~{round(seconds / 60)} min" if seconds < 7200 else f"~{seconds / 3600:.1f} h"


def frees_text(eta: ETA | None) -> str:
    """The picker's words for a full pool: 'usually frees in ~12 min (p90 ~40 min)' or 'no estimate yet'."""
    if eta is None or not eta.known:
        return "no estimate yet"
    p90 = f" (p90 {approx(eta.p90_s)})" if eta.p90_s is not None and approx(eta.p90_s) != approx(eta.p50_s) else ""
    return f"usually frees in {approx(eta.p50_s)}{p90}"
