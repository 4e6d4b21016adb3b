"""Indexes the jobs cache keeps up to date with every watch event (pure), so that one user's list, one
job's status, its queue position and the per-user limit cost O(that user's jobs), not O(every job of
every team): a user's Jobs, a Job's Workload and pods by name, and each LocalQueue's pending Workloads
in Kueue's order with its admission history (for positions and the queue ETA).
"""
from __future__ import annotations

import bisect
from datetime import datetime
from typing import Any, Callable

from jupyterhub_gpu.cluster.times import parse_time
from jupyterhub_gpu.cluster.workloads import admitted_at, is_pending, queue_key
from jupyterhub_gpu.contract import USER_ANNOTATION
from jupyterhub_gpu.model.wait_estimate import Admission, estimate
from jupyterhub_gpu.services.jobs.status import job_name_of, workload_owner


def job_user(job: dict) -> str | None:
    return (job["metadata"].get("annotations") or {}).get(USER_ANNOTATION)


class ByKey:
    """Objects grouped by `key(obj)` (None: not indexed), each group by name in arrival order."""

    def __init__(self, key: Callable[[dict], str | None]):
        self.key = key
        self.groups: dict[str, dict[str, dict]] = {}

    def clear(self) -> None:
        self.groups = {}

    def add(self, obj: dict) -> None:
        if (k := self.key(obj)) is not None:
            self.groups.setdefault(k, {})[obj["metadata"]["name"]] = obj

    def remove(self, obj: dict) -> None:
        k = self.key(obj)
        group = self.groups.get(k) if k is not None else None
        if group is not None:
            group.pop(obj["metadata"]["name"], None)
            if not group:
                del self.groups[k]

    def get(self, key: str) -> list[dict]:
        return list(self.groups.get(key, {}).values())


class QueueIndex:
    """Per LocalQueue of one namespace: pending Workloads sorted as Kueue serves them, and admissions."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.pending: dict[str, list[tuple]] = {}  # sorted Kueue keys (bisect: an insert moves pointers only)
        self.admitted: dict[str, dict[str, Admission]] = {}
        self._history: dict[str, tuple[list[Admission], list[datetime]]] = {}
        self._etas: dict[str, dict[int, dict[str, Any]]] = {}  # queue -> position -> ETA fields, per history

    @staticmethod
    def _queue(wl: dict) -> str:
        return (wl.get("spec") or {}).get("queueName", "")

    def add(self, wl: dict) -> None:
        queue = self._queue(wl)
        if is_pending(wl):
            bisect.insort(self.pending.setdefault(queue, []), queue_key(wl))
        created, admitted = parse_time(wl["metadata"].get("creationTimestamp")), admitted_at(wl)
        if created and admitted:
            self.admitted.setdefault(queue, {})[wl["metadata"]["name"]] = Admission(created, admitted)
            self._forget(queue)

    def remove(self, wl: dict) -> None:
        queue = self._queue(wl)
        if is_pending(wl) and (waiting := self.pending.get(queue)) is not None:
            key = queue_key(wl)
            if (i := bisect.bisect_left(waiting, key)) < len(waiting) and waiting[i] == key:
                del waiting[i]
            if not waiting:
                del self.pending[queue]
        if (done := self.admitted.get(queue)) and done.pop(wl["metadata"]["name"], None) is not None:
            self._forget(queue)
            if not done:
                del self.admitted[queue]

    def _forget(self, queue: str) -> None:
        self._history.pop(queue, None)
        self._etas.pop(queue, None)

    def history(self, queue: str) -> tuple[list[Admission], list[datetime]]:
        """The queue's admissions, oldest admission first, and their times (rebuilt only after one changed)."""
        if queue not in self._history:
            hist = sorted(self.admitted.get(queue, {}).values(), key=lambda a: (a.admitted, a.created))
            self._history[queue] = (hist, [a.admitted for a in hist])
        return self._history[queue]

    def position(self, wl: dict) -> dict[str, Any] | None:
        """As `status.queue_positions` gives it for this Workload's job: place, queue length and ETA."""
        if not is_pending(wl):
            return None
        waiting = self.pending.get(self._queue(wl))
        key = queue_key(wl)
        place = bisect.bisect_left(waiting or [], key) + 1
        if not waiting or place > len(waiting) or waiting[place - 1] != key:
            return None
        etas = self._etas.setdefault(self._queue(wl), {})
        if place not in etas:  # the estimate depends on the history and the place only: once per both
            hist, times = self.history(self._queue(wl))
            etas[place] = estimate(hist, place, admitted=times).as_fields()
        return {"position": place, "of": len(waiting), **etas[place]}


#: What each kind of the cache is indexed by: a Job or JobSet by its user, a Workload by the job it stands
#: for, a pod by its job.
INDEX_KEYS: dict[str, Callable[[dict], str | None]] = {
    "jobs": job_user, "jobsets": job_user, "workloads": workload_owner, "pods": job_name_of}
