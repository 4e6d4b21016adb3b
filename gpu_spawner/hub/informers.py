"""Watching the cluster: informers that never trust an error, and the hub's ONE watch of pods.

Decision — one way to watch the cluster in the hub. KubeSpawner's own pod reflector lists and
watches only the hub's server pods (its namespace, label `component=singleuser-server`) and has no
hooks, while live capacity needs every pod on every node. So the hub runs one list + watch of ALL
pods (and one of nodes), `CapacityInformers`, and KubeSpawner's reflector becomes a *view* of it:
`SharedPodReflector` keeps KubeSpawner's `pods` dict with KubeSpawner's own selection (namespace and
labels), fed by the shared informer's events instead of a second watch (`hub/pod_reflector.py`).
`GPUSpawner` installs it when live capacity is on; with it off, KubeSpawner's reflector runs as is.
The cost: the hub's service account needs list/watch on pods cluster-wide (live capacity needs it
anyway), and a relist when a view joins after the first list.

Errors are not data. An `Informer` replaces its consumer's state only with a complete list from a
2xx answer; on an error status (403, 404, 429, 5xx), a refused connection or a timeout it keeps the
last good state, marks itself `stale`, and retries with exponential backoff and jitter. Every request
has a timeout; a watch that delivers nothing — no event and no bookmark (`allowWatchBookmarks`) —
for `silent_after` seconds is restarted with a fresh list. `synced`: a complete list was seen once;
`stale`: never synced, or the cluster has not answered since the last failure.
"""
from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpu_spawner.hub.capacity import ClusterState
from gpu_spawner.model.profiles import ProfilesConfig

log = logging.getLogger("gpuhub.informers")


@dataclass(frozen=True)
class WatchSettings:
    """Timeouts and backoff of an informer (seconds)."""

    request_timeout: float = 30   # a list, or connecting a watch
    watch_seconds: int = 300      # the API server ends each watch after this long; it is then resumed
    silent_after: float = 90      # no event and no bookmark for this long: the watch is restarted
    backoff_base: float = 0.5     # first retry delay after a failure, doubled per failure ...
    backoff_max: float = 10       # ... up to this (each delay jittered to 50-100 %): back soon after an outage

    def backoff(self, failures: int) -> float:
        return min(self.backoff_max, self.backoff_base * 2 ** max(failures - 1, 0)) * random.uniform(0.5, 1.0)


class TimeoutApiClient(client.ApiClient):
    """A kubernetes_asyncio ApiClient whose every request has a timeout (`request_timeout` seconds) unless
    the call gives its own `_request_timeout`: without one, aiohttp waits forever on a hung API server."""

    def __init__(self, *args, request_timeout: float = WatchSettings.request_timeout, **kwargs):
        super().__init__(*args, **kwargs)
        self.request_timeout = request_timeout

    def request(self, *args, _request_timeout=None, **kwargs):
        return super().request(*args, _request_timeout=_request_timeout or self.request_timeout, **kwargs)


class SilentWatch(Exception):
    """The watch delivered nothing, not even a bookmark, for `silent_after` seconds."""


def api_error(status: int, reason: str | None, body: bytes) -> ApiException:
    """An ApiException carrying the API's own message (a Status object's `message`) as its reason."""
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        message = None
    e = ApiException(status=status, reason=message or reason or f"HTTP {status}")
    e.body = body.decode(errors="replace")
    return e


async def read_json(resp) -> Any:
    """The body of a `_preload_content=False` answer as JSON; ApiException on an error status (that
    mode of kubernetes_asyncio does not raise on its own)."""
    try:
        body = await resp.read()
    finally:
        resp.release()
    if resp.status >= 400:
        raise api_error(resp.status, resp.reason, body)
    return json.loads(body) if body else {}


class Informer:
    """List, then watch from that resourceVersion. `replace(items)` takes each complete list, `apply(event_type,
    obj)` each watch event. Failures keep the last state (see the module docstring)."""

    def __init__(self, kind: str, list_fn: Callable[..., Awaitable], replace: Callable[[list[dict]], None],
                 apply: Callable[[str, dict], None], settings: WatchSettings | None = None):
        self.kind = kind
        self.list_fn = list_fn
        self.replace = replace
        self.apply = apply
        self.settings = settings or WatchSettings()
        self.requests = 0
        self.restarts = 0                       # silent watches restarted
        self.synced = asyncio.Event()           # a complete list was seen (and is kept)
        self.error: str | None = None           # the failure we are retrying after, if any
        self.failing_since: float | None = None
        self.last_seen: float | None = None     # wall-clock time of the last list, event or bookmark
        self._task: asyncio.Task | None = None

    @property
    def stale(self) -> bool:
        return not self.synced.is_set() or self.failing_since is not None

    def _seen(self) -> None:
        self.last_seen = time.time()

    def _failed(self, e: BaseException) -> None:
        self.error = (f"HTTP {e.status}: {e.reason}" if isinstance(e, ApiException)
                      else f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
        if self.failing_since is None:
            self.failing_since = time.monotonic()

    async def _list(self) -> str:
        self.requests += 1
        body = await read_json(await self.list_fn(_preload_content=False,
                                                  _request_timeout=self.settings.request_timeout))
        items, rv = body.get("items"), (body.get("metadata") or {}).get("resourceVersion")
        if not isinstance(items, list) or not rv:
            raise ApiException(status=502, reason=f"the {self.kind} list has no items or resourceVersion")
        self.replace(items)
        self.synced.set()
        self.error = self.failing_since = None
        self._seen()
        return rv

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                rv = await self._list()
                failures = 0
                while True:
                    rv = await self._watch(rv)
            except asyncio.CancelledError:
                raise
            except SilentWatch:
                self.restarts += 1
                log.warning("watch of %s silent for %.0f s; restarting it", self.kind, self.settings.silent_after)
            except ApiException as e:
                if e.status == 410:  # the resourceVersion expired: relist at once, nothing is wrong
                    continue
                failures += 1
                await self._retry_later(e, failures)
            except Exception as e:  # refused, reset, timed out, garbled: keep the last state, retry
                failures += 1
                await self._retry_later(e, failures)

    async def _retry_later(self, e: BaseException, failures: int) -> None:
        self._failed(e)
        delay = self.settings.backoff(failures)
        log.warning("%s: list/watch failed (%s); keeping the last state, retrying in %.1f s", self.kind,
                    self.error, delay)
        await asyncio.sleep(delay)

    async def _watch(self, rv: str) -> str:
        """One watch request, read as raw JSON lines (no model objects: this runs for every pod event of the
        cluster, in the hub's event loop). Returns the resourceVersion to continue from."""
        s = self.settings
        self.requests += 1
        timeout = aiohttp.ClientTimeout(total=s.watch_seconds + s.request_timeout, sock_connect=s.request_timeout,
                                        sock_read=s.silent_after)
        resp = await self.list_fn(watch=True, resource_version=rv, timeout_seconds=s.watch_seconds,
                                  allow_watch_bookmarks=True, _preload_content=False, _request_timeout=timeout)
        try:
            if resp.status >= 400:
                raise api_error(resp.status, resp.reason, await resp.read())
            async for line in resp.content:
                self._seen()
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                if event.get("type") not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
                    raise ValueError(f"unexpected watch event type {event.get('type')!r}")
                if event["type"] != "BOOKMARK":
                    self.apply(event["type"], obj)
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
        except asyncio.TimeoutError:
            raise SilentWatch() from None
        finally:
            resp.release()
        return rv

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"gpuhub-informer-{self.kind}")

    def relist(self) -> None:
        """Start over with a fresh list (the current state stays until that list arrives)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None
        self.start()

    async def wait_synced(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.synced.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None


class CapacityInformers:
    """The hub's one ClusterState with its node and pod informers; the pod informer also feeds
    KubeSpawner's pod reflector (`SharedPodReflector` views)."""

    def __init__(self, cfg: ProfilesConfig, core: client.CoreV1Api, settings: WatchSettings | None = None):
        self.settings = settings or WatchSettings()
        self.state = ClusterState(cfg)
        self.state.is_current = lambda: not self.stale
        self.views: list = []  # SharedPodReflector: replace(items), apply(kind, pod)
        self.nodes = Informer("nodes", core.list_node, lambda items: self.state.replace("nodes", items),
                              lambda kind, obj: self.state.apply_node(kind, obj), self.settings)
        self.pods = Informer("pods", core.list_pod_for_all_namespaces, self._replace_pods, self._apply_pod,
                             self.settings)

    def _replace_pods(self, items: list[dict]) -> None:
        self.state.replace("pods", items)
        for view in self.views:
            view.replace(items)

    def _apply_pod(self, kind: str, pod: dict) -> None:
        self.state.apply_pod(kind, pod)
        for view in self.views:
            view.apply(kind, pod)

    def attach(self, view) -> None:
        """A new view is filled by the next list: the first one, or a fresh one if that has passed."""
        self.views.append(view)
        if self.pods.synced.is_set():
            self.pods.relist()

    def detach(self, view) -> None:
        if view in self.views:
            self.views.remove(view)

    @property
    def stale(self) -> bool:
        return self.nodes.stale or self.pods.stale

    @property
    def requests(self) -> int:
        return self.nodes.requests + self.pods.requests

    def reconfigure(self, cfg: ProfilesConfig) -> None:
        """A changed profiles file: a new state, filled by fresh lists (views keep theirs meanwhile)."""
        is_current = self.state.is_current
        self.state = ClusterState(cfg)
        self.state.is_current = is_current
        for informer in (self.nodes, self.pods):
            informer.synced.clear()
            informer.relist()

    async def start(self, timeout: float = 10) -> bool:
        """Start both; wait up to `timeout` s for their lists (nodes first, so pods are attributed to their
        node's pool from the start). Returns whether they synced; if not, the state says unknown until then."""
        deadline = time.monotonic() + timeout
        self.nodes.start()
        await self.nodes.wait_synced(timeout)
        self.pods.start()
        await self.pods.wait_synced(max(deadline - time.monotonic(), 0.1))
        return not self.stale

    async def stop(self) -> None:
        await self.nodes.stop()
        await self.pods.stop()
