"""The service's memory of its Jobs, their Kueue Workloads and their pods: one list + watch per kind and
team namespace (the hub's `Informer`), so listing jobs and polling a status widget read memory, not
the API. Writes still go to the API; `wait_for` then waits until the watch has seen them, so a user
reads their own writes (a submitted job is listed at once, a cancelled one is gone). While the cluster
does not answer, the cache keeps the last good state and says `stale`; reads then answer with that
state, marked stale, and anything that needs the API is a 503 (`ClusterUnavailable`).
"""
from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Callable

from kubernetes_asyncio import client
from tornado import web

from jupyterhub_gpu.contract import JOB_LABEL, JOBSET_GROUP, JOBSET_VERSION, KUEUE_GROUP, KUEUE_VERSION
from jupyterhub_gpu.kubeio.informer import Informer
from jupyterhub_gpu.services.jobs.index import INDEX_KEYS, ByKey, QueueIndex

KUEUE = (KUEUE_GROUP, KUEUE_VERSION)
JOBSET = (JOBSET_GROUP, JOBSET_VERSION)
KINDS = ("jobs", "workloads", "pods", "jobsets")


class ClusterUnavailable(web.HTTPError):
    """503: the API server did not answer (refused, timed out) or could not serve (429, 5xx). Never turned
    into "no jobs" or "no such job": the caller is told to try again."""

    def __init__(self, why: str):
        why = why.replace("%", "")  # tornado formats log messages with %
        super().__init__(503, log_message=f"the cluster is not answering right now ({why}); try again in a minute",
                         reason="Cluster not answering")

    @classmethod
    def no_answer(cls, e: BaseException) -> "ClusterUnavailable":
        """For a refused, reset or timed-out connection."""
        return cls(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)


class NamespaceStore:
    """Objects of one kind in one namespace, by name, with `indexes` (index.py) kept up to date."""

    def __init__(self, changed: Callable[[], None], indexes: tuple = ()):
        self.by_name: dict[str, dict] = {}
        self.indexes = indexes
        self._changed = changed

    def replace(self, items: list[dict]) -> None:
        self.by_name = {o["metadata"]["name"]: o for o in items}
        for index in self.indexes:
            index.clear()
            for o in self.by_name.values():
                index.add(o)
        self._changed()

    def apply(self, event: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        old = self.by_name.pop(name, None) if event == "DELETED" else self.by_name.get(name)
        if event != "DELETED":
            self.by_name[name] = obj
        for index in self.indexes:
            if old is not None:
                index.remove(old)
            if event != "DELETED":
                index.add(obj)
        self._changed()


class JobsCache:
    """Informers for the service's Jobs, Workloads and Job pods in the given namespaces; and its JobSets
    (multi-node jobs) when `jobsets` (a profile allows them, so the JobSet CRD must be installed)."""

    def __init__(self, api: client.ApiClient, namespaces: list[str], jobsets: bool = False):
        self.namespaces = sorted(set(namespaces))
        batch, core, custom = client.BatchV1Api(api), client.CoreV1Api(api), client.CustomObjectsApi(api)
        self._changed = asyncio.Event()  # set, and replaced by a fresh one, on every change
        self.stores: dict[tuple[str, str], NamespaceStore] = {}
        self.informers: list[Informer] = []
        for ns in self.namespaces:
            lists = {"jobs": partial(batch.list_namespaced_job, ns, label_selector=JOB_LABEL),
                     "workloads": partial(custom.list_namespaced_custom_object, *KUEUE, ns, "workloads"),
                     "pods": partial(core.list_namespaced_pod, ns, label_selector=JOB_LABEL)}
            if jobsets:
                lists["jobsets"] = partial(custom.list_namespaced_custom_object, *JOBSET, ns, "jobsets",
                                           label_selector=JOB_LABEL)
            for kind, list_fn in lists.items():
                indexes = (ByKey(INDEX_KEYS[kind]),) + ((QueueIndex(),) if kind == "workloads" else ())
                store = self.stores[(kind, ns)] = NamespaceStore(self._notify, indexes)
                self.informers.append(Informer(f"{kind}/{ns}", list_fn, store.replace, store.apply))

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    @property
    def requests(self) -> int:
        return sum(i.requests for i in self.informers)

    @property
    def synced(self) -> bool:
        """Every kind was listed completely once; from then on reads come from here (the last good state)."""
        return all(i.synced.is_set() for i in self.informers)

    @property
    def stale(self) -> bool:
        """Some watch failed and the cluster has not answered since: what we hold may be out of date."""
        return any(i.stale for i in self.informers)

    @property
    def error(self) -> str | None:
        return next((f"{i.kind}: {i.error}" for i in self.informers if i.error), None)

    @property
    def last_seen(self) -> float | None:
        """Wall-clock time up to which every kind is known to be current (its oldest last contact)."""
        seen = [i.last_seen for i in self.informers]
        return None if None in seen or not seen else min(seen)

    def covers(self, namespace: str) -> bool:
        return namespace in self.namespaces

    def holds(self, kind: str) -> bool:
        return any(k == kind for k, _ in self.stores)

    async def start(self, timeout: float = 30) -> None:
        for informer in self.informers:
            informer.start()
        await asyncio.wait_for(asyncio.gather(*(i.synced.wait() for i in self.informers)), timeout)

    async def stop(self) -> None:
        await asyncio.gather(*(i.stop() for i in self.informers))

    def objects(self, kind: str, namespaces: list[str]) -> list[dict]:
        return [o for ns in namespaces for o in self.stores[(kind, ns)].by_name.values()]

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        return self.stores[(kind, namespace)].by_name.get(name)

    def indexed(self, kind: str, namespaces: list[str], key: str) -> list[dict]:
        """Objects of `kind` whose index key (index.INDEX_KEYS: a job's user, a pod's or Workload's job) is `key`."""
        return [o for ns in namespaces for o in self.stores[(kind, ns)].indexes[0].get(key)]

    def position(self, workload: dict) -> dict | None:
        """The queue position and ETA of a pending Workload (as `status.queue_positions`), else None."""
        return self.stores[("workloads", workload["metadata"]["namespace"])].indexes[1].position(workload)

    @property
    def change_signal(self) -> asyncio.Event:
        """Set at the next change the watches see (take it before reading, so no change is missed)."""
        return self._changed

    async def wait_for(self, check: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Until `check()` holds for what the watches have seen (False after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while not check():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                return check()
        return True
