"""Watching the cluster: informers that never trust an error (used by the hub and by gpu-jobs).

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
from kubernetes_asyncio.client.rest import ApiException

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
