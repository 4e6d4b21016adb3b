"""Shared informers: one list + watch of nodes and one of pods (all namespaces) per hub process
(and the `Informer` the gpu-jobs service's cache uses too).

They feed `capacity.ClusterState`, so the picker, the Pending explanations and the metrics read
memory, never the API. Thin async shell; every request it makes is counted (`requests`).
"""
from __future__ import annotations

import asyncio
import json
import logging
from functools import partial
from typing import Awaitable, Callable

from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpu_spawner.hub.capacity import ClusterState
from gpu_spawner.model.profiles import ProfilesConfig

log = logging.getLogger("gpuhub.informers")

WATCH_SECONDS = 300


class Informer:
    """List once, then watch from that resourceVersion; relist when the watch expires (410).
    `replace(items)` takes each full list, `apply(event_type, obj)` each watch event."""

    def __init__(self, kind: str, list_fn: Callable[..., Awaitable], replace: Callable[[list[dict]], None],
                 apply: Callable[[str, dict], None]):
        self.kind = kind
        self.list_fn = list_fn
        self.replace = replace
        self.apply = apply
        self.requests = 0
        self.synced = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def _list(self) -> str:
        self.requests += 1
        resp = await self.list_fn(_preload_content=False)
        body = json.loads(await resp.read())
        self.replace(body.get("items") or [])
        self.synced.set()
        return body["metadata"]["resourceVersion"]

    async def _run(self) -> None:
        delay = 0.5
        while True:
            try:
                rv = await self._list()
                while True:
                    rv = await self._watch(rv, self.apply)
                    delay = 0.5
            except asyncio.CancelledError:
                raise
            except ApiException as e:
                if e.status != 410:
                    log.warning("watch of %s failed (%s); relisting in %.1fs", self.kind, e.reason, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30)
            except Exception as e:  # network errors: keep the last state, retry
                log.warning("watch of %s failed (%s); relisting in %.1fs", self.kind, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30)

    async def _watch(self, rv: str, apply) -> str:
        """One watch request, read as raw JSON lines (no model objects: this runs for every pod event of the
        cluster, in the hub's event loop). Returns the resourceVersion to continue from."""
        self.requests += 1
        resp = await self.list_fn(watch=True, resource_version=rv, timeout_seconds=WATCH_SECONDS,
                                  allow_watch_bookmarks=True, _preload_content=False)
        try:
            async for line in resp.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                if event.get("type") != "BOOKMARK":
                    apply(event["type"], obj)
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
        finally:
            resp.release()
        return rv

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"gpuhub-informer-{self.kind}")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass


class CapacityInformers:
    """The hub's one ClusterState with its node and pod informers."""

    def __init__(self, cfg: ProfilesConfig, core: client.CoreV1Api):
        self.state = ClusterState(cfg)
        self.nodes = Informer("nodes", core.list_node, partial(self.state.replace, "nodes"), self.state.apply_node)
        self.pods = Informer("pods", core.list_pod_for_all_namespaces, partial(self.state.replace, "pods"),
                             self.state.apply_pod)

    @property
    def requests(self) -> int:
        return self.nodes.requests + self.pods.requests

    async def start(self, timeout: float = 30) -> None:
        # nodes first, so pods are attributed to their node's pool from the start
        self.nodes.start()
        await asyncio.wait_for(self.nodes.synced.wait(), timeout)
        self.pods.start()
        await asyncio.wait_for(self.pods.synced.wait(), timeout)

    async def stop(self) -> None:
        await self.nodes.stop()
        await self.pods.stop()
