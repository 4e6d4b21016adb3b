"""Showback as Prometheus metrics (what deploy/grafana-showback.json charts), updated once per collection
cycle from the open lifetimes and the Workloads. GPU-hours over any range are Prometheus arithmetic on
`gpuhub_usage_gpus_held` (avg_over_time × hours) or increase() of the `_total` counters; DCGM's own series
give the use."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from jupyterhub_gpu.cluster.conditions import is_true
from jupyterhub_gpu.cluster.times import parse_time
from jupyterhub_gpu.cluster.workloads import admissions, admitted_at
from jupyterhub_gpu.model.wait_estimate import estimate
from jupyterhub_gpu.services.usage import accounting as acc

LABELS = ("kind", "user", "team", "profile")
#: A LocalQueue is (namespace, name); not `namespace`: Prometheus' own target label would rename it.
QUEUE_LABELS = ("queue_namespace", "queue")
#: Queue waits from seconds to a day: Kueue admits at once when quota is free, or after runs end.
WAIT_BUCKETS = (5, 30, 60, 300, 600, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 24 * 3600)


class UsageMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.held = Gauge("gpuhub_usage_gpus_held", "GPUs (or MIG slices / time-sliced or MPS shares) held now",
                          LABELS, registry=r)
        self.cost_rate = Gauge("gpuhub_usage_cost_dollars_per_hour", "$/h of what is held now "
                               "(the profiles file's cost_per_node_hour, the profile's share)", LABELS, registry=r)
        self.gpu_hours = Counter("gpuhub_usage_gpu_hours_held_total", "GPU-hours held, counted each cycle",
                                 LABELS, registry=r)
        self.dollars = Counter("gpuhub_usage_dollars_total", "$ of GPU-hours held, counted each cycle", LABELS,
                               registry=r)
        self.pending = Gauge("gpuhub_queue_pending", "Workloads waiting in a LocalQueue", QUEUE_LABELS,
                             registry=r)
        self.eta = Gauge("gpuhub_queue_eta_seconds", "Estimated wait of the next submission to the queue "
                         "(absent: no estimate yet)", (*QUEUE_LABELS, "quantile"), registry=r)
        self.wait = Histogram("gpuhub_queue_wait_seconds", "Creation to quota reservation of admitted Workloads",
                              QUEUE_LABELS, buckets=WAIT_BUCKETS, registry=r)
        self.evictions = Gauge("gpuhub_kueue_evictions", "Evictions Kueue counted on current Workloads",
                               (*QUEUE_LABELS, "reason"), registry=r)
        self.spot_evictions = Counter("gpuhub_usage_spot_evictions_total", "Pods whose spot node was taken away "
                                      "(the spot pool's VM evicted), apart from preemptions", LABELS, registry=r)
        self.preemptions = Counter("gpuhub_usage_pod_preemptions_total", "Pods the scheduler preempted for higher "
                                   "priority ones (Kueue's preemptions of jobs: gpuhub_kueue_evictions)", LABELS,
                                   registry=r)
        self.observed: set[str] = set()

    def finished(self, done: Iterable[acc.Lifetime]) -> None:
        """Count the lifetimes that just ended by a spot eviction or a preemption (each once: the collector
        closes a lifetime once)."""
        for lt in done:
            counter = {acc.SPOT_EVICTION: self.spot_evictions, acc.PREEMPTED: self.preemptions}.get(lt.ended_by)
            if counter is not None:
                counter.labels(lt.kind, lt.user, lt.team or "", lt.profile).inc()

    def update(self, open_: Iterable[acc.Lifetime], workloads: list[dict[str, Any]], dt_s: float,
               admitted_after: datetime | None) -> None:
        """One cycle: `dt_s` seconds passed since the last (counters grow by what was held over them);
        waits of Workloads admitted after `admitted_after` are observed once."""
        self.held.clear()
        self.cost_rate.clear()
        for lt in open_:
            if lt.end is not None:  # finished, still listed: holds nothing now
                continue
            labels = (lt.kind, lt.user, lt.team or "", lt.profile)
            self.held.labels(*labels).inc(lt.gpus)
            self.cost_rate.labels(*labels).inc(lt.hourly_cost)
            if dt_s > 0:
                self.gpu_hours.labels(*labels).inc(lt.gpus * dt_s / 3600)
                self.dollars.labels(*labels).inc(lt.hourly_cost * dt_s / 3600)
        self.pending.clear()
        self.eta.clear()
        self.evictions.clear()
        pending: dict[tuple[str, str], int] = {}
        current: set[str] = set()
        for wl in workloads:
            key = (wl["metadata"].get("namespace", ""), (wl.get("spec") or {}).get("queueName", ""))
            admitted = admitted_at(wl)
            if admitted is None and not is_true(wl, "Finished"):
                pending[key] = pending.get(key, 0) + 1
            uid = wl["metadata"].get("uid") or f"{key}/{wl['metadata'].get('name')}"
            current.add(uid)
            if admitted and uid not in self.observed and (admitted_after is None or admitted > admitted_after):
                created = parse_time(wl["metadata"].get("creationTimestamp"))
                if created:
                    self.wait.labels(*key).observe(max((admitted - created).total_seconds(), 0.0))
                self.observed.add(uid)
            for reason, n in acc.evictions([wl]).items():
                self.evictions.labels(*key, reason).inc(n)
        self.observed &= current  # bounded by the Workloads that exist
        history = admissions(workloads)
        for key, n in pending.items():
            self.pending.labels(*key).set(n)
        for key in set(history) | set(pending):
            e = estimate(history.get(key, []), pending.get(key, 0) + 1)
            if e.known:
                self.eta.labels(*key, "0.5").set(e.p50_s)
                self.eta.labels(*key, "0.9").set(e.p90_s)
