"""Kueue Workloads (pure): whether one waits, its place in Kueue's order, when it was admitted, and each
LocalQueue's admission history (the wait estimate's input, model/wait_estimate.py). gpu-jobs (positions, status), the
hub (a server's place in its team's queue) and showback (queue waits, metrics) read them from here."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from jupyterhub_gpu.cluster.conditions import condition, is_true
from jupyterhub_gpu.cluster.times import parse_time
from jupyterhub_gpu.model.wait_estimate import ETA, Admission, estimate


def admitted_at(workload: dict[str, Any]) -> datetime | None:
    """When Kueue reserved quota for it (QuotaReserved, else Admitted), if it did."""
    for kind in ("QuotaReserved", "Admitted"):
        if is_true(workload, kind):
            return parse_time(condition(workload, kind).get("lastTransitionTime"))
    return None


def is_pending(workload: dict) -> bool:
    """Still waiting in its LocalQueue: no quota reserved, not admitted, not finished."""
    return not (is_true(workload, "QuotaReserved") or is_true(workload, "Admitted") or is_true(workload, "Finished"))


def queue_key(workload: dict) -> tuple:
    """Kueue's BestEffortFIFO/StrictFIFO order: higher priority first, then the queue timestamp (the
    last eviction's time for a requeued workload, else creation)."""
    spec = workload.get("spec") or {}
    evicted = condition(workload, "Requeued") or condition(workload, "Evicted")
    stamp = (evicted or {}).get("lastTransitionTime") if evicted and evicted.get("status") == "True" else None
    stamp = stamp or workload["metadata"].get("creationTimestamp") or ""
    return (-(spec.get("priority") or 0), stamp, workload["metadata"].get("name", ""))


def admissions(workloads: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[Admission]]:
    """(namespace, LocalQueue) → its admitted workloads, oldest admission first."""
    out: dict[tuple[str, str], list[Admission]] = {}
    for wl in workloads:
        created, admitted = parse_time(wl.get("metadata", {}).get("creationTimestamp")), admitted_at(wl)
        if created and admitted:
            key = (wl["metadata"].get("namespace", ""), (wl.get("spec") or {}).get("queueName", ""))
            out.setdefault(key, []).append(Admission(created, admitted))
    for hist in out.values():
        hist.sort(key=lambda a: (a.admitted, a.created))  # a total order: the same history whatever the list order
    return out


def eta_fields(workloads: list[dict[str, Any]], namespace: str, queue: str, position: int | None,
               now: datetime | None = None) -> dict[str, Any]:
    """The status fields for one queued job (all None when it has no position)."""
    if not position:
        return ETA(None, None, 0).as_fields()
    return estimate(admissions(workloads).get((namespace, queue), []), position, now).as_fields()
