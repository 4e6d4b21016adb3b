"""The service's Kubernetes I/O (kubernetes_asyncio, raw JSON dicts), and where pod logs come from.

Thin: every decision lives in `submission` and `status`. Where logs come from is pluggable
(`GPUJobs.log_source_class`, any `LogSource`); the default is the kubelet's pod log API. Creating a
submission and cleaning up after a half-created one is in `lifecycle`.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from datetime import datetime, timezone
from typing import Any, Protocol

import aiohttp
from kubernetes_asyncio import client
from traitlets.config import LoggingConfigurable

from jupyterhub_gpu.contract import FINISHED, JOB_LABEL, JOBSET_JOB_INDEX, QUEUED, USER_ANNOTATION, USER_LABEL
from jupyterhub_gpu.kubeio.informer import api_error, read_json
from jupyterhub_gpu.model.quantities import parse
from jupyterhub_gpu.services.jobs.cache import JOBSET, KUEUE, ClusterUnavailable, JobsCache
from jupyterhub_gpu.services.jobs.gang import derive_gang_status, is_jobset
from jupyterhub_gpu.services.jobs.log_tail import read_tail
from jupyterhub_gpu.services.jobs.status import derive_status, job_name_of, queue_positions, unreadable, workload_owner

LOG_TAIL_BYTES = 64 * 1024
log = logging.getLogger("gpuhub.jobs")


class LogSource(Protocol):
    """Where the service reads a pod's log, answering as the kubelet's log API does (`tailLines` selects the last
    lines, `limitBytes` caps what is sent from the start of that selection); built as `cls(api=ApiClient,
    parent=GPUJobs)`. The service reads the end through it (log_tail.read_tail)."""

    async def fetch(self, namespace: str, pod: str, tail_lines: int, limit_bytes: int) -> bytes: ...


class PodLogs(LoggingConfigurable):
    """The kubelet's pod log API, through the API server (the default log source)."""

    def __init__(self, api: client.ApiClient, **kwargs):
        super().__init__(**kwargs)
        self.core = client.CoreV1Api(api)

    async def fetch(self, namespace: str, pod: str, tail_lines: int, limit_bytes: int) -> bytes:
        """The bytes as sent (`limitBytes` may cut a character: decoding is read_tail's, not the client's)."""
        resp = await self.core.read_namespaced_pod_log(pod, namespace, tail_lines=tail_lines,
                                                       limit_bytes=limit_bytes, _preload_content=False)
        try:
            body = await resp.read()
        finally:
            resp.release()
        if resp.status in (400, 404):  # not started yet / gone
            return b""
        if resp.status >= 400:
            raise api_error(resp.status, resp.reason, body)
        return body


async def read_log(source: LogSource, namespace: str, pod: str, tail_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last `tail_bytes` of a pod's log (never its first: log_tail)."""
    return await read_tail(functools.partial(source.fetch, namespace, pod), tail_bytes)


async def api_json(coro) -> dict[str, Any]:
    """The response as JSON, ApiException on an error status (with `_preload_content=False` kubernetes_asyncio
    does not raise on its own); no answer, 429 or 5xx is ClusterUnavailable (a 503 to the caller)."""
    try:
        return await read_json(await coro)
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        raise ClusterUnavailable.no_answer(e) from e
    except client.ApiException as e:
        if e.status in (429, 500, 502, 503, 504):
            raise ClusterUnavailable(f"HTTP {e.status}: {e.reason}") from e
        raise


class Kube:
    """Reads come from the watch-fed `cache` where it covers the namespace (else from the API);
    writes go to the API and return once the cache has seen them. `jobsets`: multi-node jobs too."""

    def __init__(self, api: client.ApiClient, namespaces: list[str], logs: LogSource | None = None,
                 cache: JobsCache | None = None, jobsets: bool = False):
        self.api = api
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.net = client.NetworkingV1Api(api)
        self.namespaces = sorted(set(namespaces))
        self.logs = logs or PodLogs(api)
        self.cache = cache
        self.jobsets = jobsets

    def cached(self, namespaces: list[str], kind: str = "jobs") -> bool:
        return self.cache is not None and self.cache.synced and self.cache.holds(kind) \
            and all(self.cache.covers(ns) for ns in namespaces)

    def require_current(self) -> None:
        """Decisions that count (per-user limits) need a current view: a 503 while the cache is stale,
        never a count from old state."""
        if self.cache is not None and self.cache.synced and self.cache.stale:
            raise ClusterUnavailable(self.cache.error or "the watches are reconnecting")

    # ------------------------------------------------------------------ reading
    async def jobs(self, user: str | None = None, fresh: bool = False) -> list[dict]:
        """Jobs and JobSets made by this service in the team namespaces (one user's, or everyone's). `fresh`:
        LISTed from the API server, not the cache (which may lag another replica's create)."""
        return await self.single_jobs(user, fresh) + (await self.gangs(user, fresh) if self.jobsets else [])

    async def gangs(self, user: str | None = None, fresh: bool = False) -> list[dict]:
        """The JobSets of multi-node jobs (one user's, or everyone's)."""
        if not fresh and self.cached(self.namespaces, "jobsets"):
            if user:
                return self.cache.indexed("jobsets", self.namespaces, user)
            found = self.cache.objects("jobsets", self.namespaces)
        else:
            lists = await asyncio.gather(*(api_json(self.custom.list_namespaced_custom_object(
                *JOBSET, ns, "jobsets", label_selector=JOB_LABEL, _preload_content=False)) for ns in self.namespaces))
            found = [j for lst in lists for j in lst.get("items", [])]
        return [j for j in found if (j["metadata"].get("annotations") or {}).get(USER_ANNOTATION) == user] \
            if user else found

    async def single_jobs(self, user: str | None = None, fresh: bool = False) -> list[dict]:
        from kubespawner.slugs import safe_slug

        if not fresh and self.cached(self.namespaces):  # one user's from the cache's index: O(their jobs)
            return self.cache.indexed("jobs", self.namespaces, user) if user else \
                self.cache.objects("jobs", self.namespaces)
        selector = f"{USER_LABEL}={safe_slug(user, max_length=63)},{JOB_LABEL}" if user else JOB_LABEL
        lists = await asyncio.gather(*(api_json(self.batch.list_namespaced_job(ns, label_selector=selector,
                                                                                 _preload_content=False))
                                       for ns in self.namespaces))
        jobs = [j for lst in lists for j in lst.get("items", [])]
        if user:  # the label is a slug: check the exact name too
            jobs = [j for j in jobs if (j["metadata"].get("annotations") or {}).get(USER_ANNOTATION) == user]
        return jobs

    async def job(self, name: str) -> dict | None:
        """A Job of this service by name, else a JobSet (in the first team namespace that has one)."""
        return await self._one(name, "jobs") or (await self._one(name, "jobsets") if self.jobsets else None)

    async def _one(self, name: str, kind: str) -> dict | None:
        for ns in self.namespaces:
            if self.cached([ns], kind):
                if found := self.cache.get(kind, ns, name):
                    return found
                continue
            try:
                if kind == "jobsets":
                    found = await api_json(self.custom.get_namespaced_custom_object(*JOBSET, ns, "jobsets", name,
                                                                                    _preload_content=False))
                    return found if (found["metadata"].get("labels") or {}).get(JOB_LABEL) else None
                return await api_json(self.batch.read_namespaced_job(name, ns, _preload_content=False))
            except client.ApiException as e:
                if e.status != 404:
                    raise
        return None

    async def workloads(self, namespaces: list[str]) -> list[dict]:
        if self.cached(namespaces):
            return self.cache.objects("workloads", sorted(set(namespaces)))
        lists = await asyncio.gather(*(api_json(self.custom.list_namespaced_custom_object(
            *KUEUE, ns, "workloads", _preload_content=False)) for ns in sorted(set(namespaces))))
        return [w for lst in lists for w in lst.get("items", [])]

    async def pods(self, namespaces: list[str], job: str | None = None) -> list[dict]:
        if self.cached(namespaces):
            namespaces = sorted(set(namespaces))
            return self.cache.indexed("pods", namespaces, job) if job else self.cache.objects("pods", namespaces)
        selector = f"{JOB_LABEL}={job}" if job else JOB_LABEL
        lists = await asyncio.gather(*(api_json(self.core.list_namespaced_pod(ns, label_selector=selector,
                                                                              _preload_content=False))
                                       for ns in sorted(set(namespaces))))
        return [p for lst in lists for p in lst.get("items", [])]

    async def statuses(self, jobs: list[dict], with_logs: bool = True) -> list[dict]:
        """Status dicts for these Jobs: from the cache's indexes (O(these jobs)), else one list of Workloads and
        pods per namespace, not per job."""
        if not jobs:
            return []
        namespaces = sorted({j["metadata"]["namespace"] for j in jobs})
        stale = self.cached(namespaces) and self.cache.stale
        if stale:  # the last known state, said so; no log reads while the cluster does not answer
            with_logs = False
            seen = self.cache.last_seen
            marks = {"stale": True, "as_of": datetime.fromtimestamp(seen, timezone.utc).isoformat() if seen else None}
        if self.cached(namespaces):  # from the cache's indexes: O(these jobs), whatever the cluster holds
            wl_of, pods_of, positions = self._cached_parts(jobs)
        else:
            wl_of, pods_of, positions = await self._listed_parts(namespaces)

        async def one(job: dict) -> dict:
            """One job's status; what cannot be read for one job (its log, an odd object) never fails a list."""
            key = (job["metadata"]["namespace"], job["metadata"]["name"])
            mine = sorted(pods_of.get(key, []), key=lambda p: p["metadata"].get("creationTimestamp") or "")
            derive = derive_gang_status if is_jobset(job) else derive_status
            try:
                first = derive(job, wl_of.get(key), mine, positions.get(job["metadata"]["name"]))
            except Exception:  # noqa: BLE001 - logged; the others are still listed
                log.exception("status of %s/%s could not be derived", *key)
                return unreadable(job)
            if not with_logs or not mine or first["state"] in FINISHED or first["state"] == QUEUED:
                return first
            logged = first.get("pod") or mine[-1]["metadata"]["name"]  # a multi-node job: rank 0's
            try:
                text = await read_log(self.logs, key[0], logged, 16 * 1024)
                return derive(job, wl_of.get(key), mine, positions.get(job["metadata"]["name"]), text)
            except Exception as e:  # noqa: BLE001 - the status without the current cell
                log.warning("log of %s/%s unreadable for its status (%s: %s)", key[0], logged, type(e).__name__,
                            str(e)[:200])
                return first

        out = list(await asyncio.gather(*(one(j) for j in jobs)))
        return [{**s, **marks} for s in out] if stale else out

    def _cached_parts(self, jobs: list[dict]) -> tuple[dict, dict, dict]:
        wl_of, pods_of, positions = {}, {}, {}
        for job in jobs:
            key = (job["metadata"]["namespace"], job["metadata"]["name"])
            if workloads := self.cache.indexed("workloads", [key[0]], key[1]):
                wl_of[key] = workloads[-1]
                if (pos := self.cache.position(workloads[-1])) is not None:
                    positions[key[1]] = pos
            pods_of[key] = self.cache.indexed("pods", [key[0]], key[1])
        return wl_of, pods_of, positions

    async def _listed_parts(self, namespaces: list[str]) -> tuple[dict, dict, dict]:
        return self.scan_parts(*await asyncio.gather(self.workloads(namespaces), self.pods(namespaces)))

    @staticmethod
    def scan_parts(workloads: list[dict], pods: list[dict]) -> tuple[dict, dict, dict]:
        """Each job's Workload, pods and queue position from whole lists (the path without the cache)."""
        wl_of = {(wl["metadata"]["namespace"], workload_owner(wl)): wl for wl in workloads if workload_owner(wl)}
        pods_of: dict[tuple[str, str], list[dict]] = {}
        for p in pods:
            if job := job_name_of(p):
                pods_of.setdefault((p["metadata"]["namespace"], job), []).append(p)
        return wl_of, pods_of, queue_positions(workloads)

    async def job_logs(self, job: dict, tail_bytes: int = LOG_TAIL_BYTES, rank: int | None = None) -> str:
        """The log of each of the Job's pods, oldest first (a resumed job shows both runs); of a
        multi-node job, one rank's pods (`rank`, default 0)."""
        ns = job["metadata"]["namespace"]
        pods = sorted(await self.pods([ns], job["metadata"]["name"]),
                      key=lambda p: p["metadata"].get("creationTimestamp") or "")
        if is_jobset(job):
            pods = [p for p in pods if (p["metadata"].get("labels") or {}).get(JOBSET_JOB_INDEX) == str(rank or 0)]
        parts = []
        for p in pods:
            try:
                text = await read_log(self.logs, ns, p["metadata"]["name"], tail_bytes)
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:  # no answer: a 503, not a 500
                raise ClusterUnavailable.no_answer(e) from e
            if len(pods) > 1:
                text = f"===== pod {p['metadata']['name']} =====\n{text}"
            parts.append(text)
        return "\n".join(parts)[-tail_bytes:]

    async def queue_info(self, namespace: str, queue: str, cluster_queue: str) -> dict:
        """Pending workloads in the LocalQueue and the ClusterQueue's free nominal quota, keyed
        `<flavor>/<resource>` (a flavor lists every resource of its group, most with quota 0)."""
        out: dict[str, Any] = {"pending": None, "free": {}}
        try:
            lq = await api_json(self.custom.get_namespaced_custom_object(*KUEUE, namespace, "localqueues", queue,
                                                                         _preload_content=False))
            out["pending"] = (lq.get("status") or {}).get("pendingWorkloads")
            cq = await api_json(self.custom.get_cluster_custom_object(*KUEUE, "clusterqueues", cluster_queue,
                                                                      _preload_content=False))
        except client.ApiException:
            return out
        usage = {(f["name"], r["name"]): r.get("total", 0) for f in (cq.get("status") or {}).get("flavorsUsage") or []
                 for r in f.get("resources") or []}
        for group in (cq.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for r in flavor.get("resources") or []:
                    if r["name"].startswith("nvidia.com/"):
                        used = parse(str(usage.get((flavor["name"], r["name"]), 0)))
                        free = int(parse(str(r["nominalQuota"])) - used)
                        out["free"][f"{flavor['name']}/{r['name']}"] = max(free, 0)
        return out

    # ------------------------------------------------------------------ writing (creating a submission: lifecycle.py)
    def delete_call(self, job: dict, grace: int | None = None):
        """The API call that deletes a Job or a JobSet (its Jobs and pods go with it)."""
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        if is_jobset(job):
            return self.custom.delete_namespaced_custom_object(*JOBSET, ns, "jobsets", name, grace_period_seconds=grace,
                                                               propagation_policy="Background", _preload_content=False)
        return self.batch.delete_namespaced_job(name, ns, propagation_policy="Background", grace_period_seconds=grace,
                                                _preload_content=False)

    async def delete(self, job: dict) -> None:
        """Cancel: the Job or JobSet (every pod goes with it), and its ConfigMap (also owned, deleted now)."""
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        kind = "jobsets" if is_jobset(job) else "jobs"
        for call in (lambda: self.delete_call(job, 30),
                     lambda: self.core.delete_namespaced_config_map(name, ns, _preload_content=False)):
            try:
                await api_json(call())
            except client.ApiException as e:
                if e.status != 404:
                    raise
        if self.cached([ns], kind):
            await self.cache.wait_for(lambda: self.cache.get(kind, ns, name) is None)
