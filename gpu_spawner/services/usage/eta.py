"""Queue ETA (pure): how long until the job at position k of a queue is admitted, from that queue's recent
admissions.

The estimator is empirical, with no model of run times. It replays the recent history from the moments
jobs arrived to a full queue: from each past job's creation time t (only jobs that had to queue), the time
until the k-th admission after t, counted only when that k-th admitted workload was already waiting at t
(a backlog of at least k stood, as it does now, so the span measures how fast quota freed up, not idle
time). Its answer is that span distribution's p50 and p90; fewer than `min_spans` such spans: no estimate
("no estimate yet").
"""
from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

from gpu_spawner.services.culler.decide import parse_time
from gpu_spawner.services.usage.accounting import admitted_at

#: Fewer backlogged spans than this and the answer is "no estimate yet".
MIN_SPANS = 5
#: How many recent arrivals an estimate samples: recent enough to follow a changing load, and bounded, as
#: gpu-jobs answers every status poll with an estimate for each queued job.
HISTORY = 200
#: A job admitted within this many seconds of its creation did not queue (Kueue takes about a second).
QUEUED_S = 5


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


def admissions(workloads: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[Admission]]:
    """(namespace, LocalQueue) → its admitted workloads, oldest admission first."""
    out: dict[tuple[str, str], list[Admission]] = {}
    for wl in workloads:
        created, admitted = parse_time(wl.get("metadata", {}).get("creationTimestamp")), admitted_at(wl)
        if created and admitted:
            key = (wl["metadata"].get("namespace", ""), (wl.get("spec") or {}).get("queueName", ""))
            out.setdefault(key, []).append(Admission(created, admitted))
    for hist in out.values():
        hist.sort(key=lambda a: a.admitted)
    return out


def estimate(history: list[Admission], position: int, now: datetime | None = None,
             min_spans: int = MIN_SPANS) -> ETA:
    """ETA of the job at 1-based `position` from `history` (admissions, oldest first; only those before
    `now` count)."""
    if position < 1:
        return ETA(None, None, 0)
    hist = [a for a in history if now is None or a.admitted <= now]
    admitted = [a.admitted for a in hist]
    spans = []
    for a in hist[-HISTORY:]:  # the recent arrivals, measured against every admission
        if (a.admitted - a.created).total_seconds() < QUEUED_S:  # it got in at once: the quota was free then
            continue
        j = bisect.bisect_right(admitted, a.created) + position - 1  # the k-th admission after it arrived
        if j < len(hist) and hist[j].created <= a.created:
            spans.append((hist[j].admitted - a.created).total_seconds())
    if len(spans) < min_spans:
        return ETA(None, None, len(spans))
    q = statistics.quantiles(spans, n=10, method="inclusive")
    return ETA(statistics.median(spans), q[8], len(spans))


def eta_fields(workloads: list[dict[str, Any]], namespace: str, queue: str, position: int | None,
               now: datetime | None = None) -> dict[str, Any]:
    """The status fields for one queued job (all None when it has no position)."""
    if not position:
        return ETA(None, None, 0).as_fields()
    return estimate(admissions(workloads).get((namespace, queue), []), position, now).as_fields()

