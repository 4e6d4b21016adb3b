"""Hub metrics at /hub/metrics: running servers and pending spawns per profile, read from the shared
ClusterState at scrape time (so they are right after a hub restart, with no bookkeeping); and the hub's
own event-loop stalls (`LoopGuard`: the picker's render and the spawn progress run on that loop)."""
from __future__ import annotations

import asyncio
from typing import Callable

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily

from jupyterhub_gpu.services.loopguard import LoopGuard

_source: list[Callable] = []


class ProfileServersCollector:
    def collect(self):
        running = GaugeMetricFamily("gpuhub_running_servers", "Running single-user servers per profile",
                                    labels=["profile"])
        pending = GaugeMetricFamily("gpuhub_pending_spawns", "Single-user servers not yet running, per profile",
                                    labels=["profile"])
        state = _source[0]() if _source else None
        if state is not None:
            r, p = state.servers_by_profile()
            for slug in state.cfg.by_slug:
                running.add_metric([slug], r.get(slug, 0))
                pending.add_metric([slug], p.get(slug, 0))
        yield running
        yield pending


def watch_state(get_state: Callable) -> None:
    """Register the collector once per process; it reads whatever state `get_state` returns."""
    if not _source:
        _source.append(get_state)
        REGISTRY.register(ProfileServersCollector())


_guard: list[LoopGuard] = []


def hub_started() -> asyncio.Future | None:
    """Done once the running JupyterHub has started (its own start future, set where it logs "JupyterHub is
    now running"); None outside a hub, or a JupyterHub without it."""
    from jupyterhub.app import JupyterHub

    if not JupyterHub.initialized():
        return None
    started = getattr(JupyterHub.instance(), "_start_future", None)
    return started if isinstance(started, asyncio.Future) else None


def guard_loop() -> LoopGuard | None:
    """The hub loop's stall guard, in the hub's registry (/hub/metrics): started on the running loop the first
    time this is called there (the config's load), again on a later loop (tests); None with no loop. The hub's
    start-up heap is frozen once the hub has started (LoopGuard.start); outside a hub, never."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    if not _guard:
        _guard.append(LoopGuard(REGISTRY))
    guard = _guard[0]
    task = guard._task
    if task is None or task.done() or task.get_loop() is not loop:
        started = hub_started()
        guard.start(ready=started if started is not None else loop.create_future())  # never done: no freeze
    return guard
