"""Every service's event-loop stall guard: how long the loop could not run anything else, as metrics.

The rule it makes testable: no single request holds a service's event loop for more than 50 ms (a
super-linear parser on the one loop freezes the service for every user). A ticker on the loop sleeps
`interval` and measures how late it wakes up: that lateness is a stall, up to `interval` shorter than
the real one. Each stall of at least MIN_STALL is observed twice:
  - `gpuhub_event_loop_stall_seconds`: wall time (what other users wait);
  - `gpuhub_event_loop_busy_stall_seconds`: CPU time the loop's thread spent in it (the loop computing,
    not the machine descheduling the process: what tests assert, generous to noise on a busy machine);
and the longest wall stall so far is `gpuhub_event_loop_longest_stall_seconds`. Stalls of `warn_after`
or more are logged, with how much of them Python's cyclic garbage collector took (a full collection of a
big process is a stall no request asked for: `gpuhub_event_loop_gc_stall_seconds` tells the two apart).
Once a service is ready (its guard started), its start-up heap is frozen (`freeze_heap`): modules, the app
and its clients leave the collector's generations, so a later full collection walks only what was made
since (measured: a full collection of the hub's start-up heap held its loop 180 ms in a picker request).
A process without an event loop (the usage collector: a plain loop and a threaded
/metrics server) runs the guard on a loop of its own in a thread (`start_in_thread`): there a stall is
the time any other thread, its /metrics server included, could not run (the GIL held by a long call).
"""
from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time

from prometheus_client import REGISTRY, CollectorRegistry, Gauge, Histogram

log = logging.getLogger("gpuhub.loopguard")

#: Shorter lateness is scheduling jitter, not worth a sample.
MIN_STALL = 0.005
#: The rule's bound (50 ms) is a bucket edge, so "stalls over 50 ms" is exact: count - bucket(le=0.05).
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _CollectorClock:
    """Seconds the cyclic garbage collector ran in this process so far (gc.callbacks: one start and one
    stop per collection, on the thread that triggered it)."""

    def __init__(self) -> None:
        self.total, self._started = 0.0, 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        # CPU time of the collecting thread, the same clock as a stall's "computing" share
        if phase == "start":
            self._started = time.thread_time()
        elif self._started:
            self.total += time.thread_time() - self._started
            self._started = 0.0


_collector_clock: _CollectorClock | None = None


def collector_seconds() -> float:
    """The garbage collector's time so far; its clock starts with the first LoopGuard of the process."""
    global _collector_clock
    if _collector_clock is None:
        _collector_clock = _CollectorClock()
    return _collector_clock.total


def freeze_heap() -> int:
    """Collect once, then move every object alive now to the collector's permanent generation (gc.freeze),
    so no later collection scans them again; returns how many are frozen. For a process that is done
    starting: what it made to start lives as long as it does, and garbage made later is still collected."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def _freeze_and_say(frozen_gauge: Gauge) -> None:
    started = time.perf_counter()
    frozen = freeze_heap()
    frozen_gauge.set(frozen)
    log.info("froze the start-up heap (%d objects, %.0f ms): later full collections skip it", frozen,
             (time.perf_counter() - started) * 1e3)


class LoopGuard:
    """The stall metrics of one process's event loop, in `registry` (the service's own, or the default)."""

    def __init__(self, registry: CollectorRegistry | None = None, interval: float = 0.01,
                 warn_after: float = 0.25):
        self.registry = registry = REGISTRY if registry is None else registry
        self.interval, self.warn_after = interval, warn_after
        self.stalls = Histogram("gpuhub_event_loop_stall_seconds", "Event-loop stalls of 5 ms or more: how "
                                "late the loop ran a ready callback (wall time)", buckets=BUCKETS, registry=registry)
        self.busy = Histogram("gpuhub_event_loop_busy_stall_seconds", "CPU time the event loop's thread spent in "
                              "each of those stalls (the loop computing, not the process descheduled)",
                              buckets=BUCKETS, registry=registry)
        self.collecting = Histogram("gpuhub_event_loop_gc_stall_seconds", "Of each of those stalls, the time "
                                    "Python's cyclic garbage collector ran", buckets=BUCKETS, registry=registry)
        self.longest = Gauge("gpuhub_event_loop_longest_stall_seconds", "The longest event-loop stall since "
                             "the process started (wall time)", registry=registry)
        self.frozen = Gauge("gpuhub_gc_frozen_objects", "Objects of the start-up heap moved out of the garbage "
                            "collector's generations once the process was ready (0: not yet)", registry=registry)
        self._longest = 0.0
        self._task: asyncio.Task | None = None
        collector_seconds()  # its clock runs from here on

    def observe(self, wall: float, busy: float, collecting: float = 0.0) -> None:
        if wall < MIN_STALL:
            return
        self.stalls.observe(wall)
        self.busy.observe(min(busy, wall))
        self.collecting.observe(min(collecting, wall))
        if wall > self._longest:
            self._longest = wall
            self.longest.set(wall)
        if wall >= self.warn_after:
            log.warning("the event loop stalled %.0f ms (%.0f ms of it computing, %.0f ms of that collecting "
                        "garbage)", wall * 1e3, busy * 1e3, collecting * 1e3)

    async def run(self, cpu_clock=time.thread_time) -> None:
        """The ticker: runs until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            start, cpu, collected = loop.time(), cpu_clock(), collector_seconds()
            await asyncio.sleep(self.interval)
            late = loop.time() - start - self.interval
            # the tick's CPU time and collector time; observe() caps both at the stall
            self.observe(late, cpu_clock() - cpu, collector_seconds() - collected)

    def start(self, ready: asyncio.Future | None = None) -> LoopGuard:
        """Start the ticker on the running loop (call it from a coroutine or a loop callback), and freeze the
        heap once the process is ready: when `ready` is done (the hub: its start), else right after this
        call (a service starts its guard when it is built)."""
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self.run())
        if ready is None or ready.done():
            loop.call_soon(_freeze_and_say, self.frozen)
        else:
            ready.add_done_callback(lambda _: loop.call_soon(_freeze_and_say, self.frozen))
        return self

    def start_in_thread(self) -> LoopGuard:
        """For a process without an event loop: the ticker on a loop of its own, in a daemon thread; its
        stalls are the times no other thread could run (the GIL), so busy = wall there. The heap is frozen
        first (the process is built when it starts its guard)."""
        _freeze_and_say(self.frozen)
        threading.Thread(target=asyncio.run, args=(self.run(cpu_clock=time.monotonic),), daemon=True,
                         name="loopguard").start()
        return self
