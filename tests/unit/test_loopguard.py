"""The loop-stall guard (services/loopguard.py) and its test helper (tests/security/stalls.py): a callback
that computes on the loop is a stall over 50 ms, short ones are not, sleeping elsewhere is not; a process
without an event loop sees the GIL held by a long call."""
from __future__ import annotations

import asyncio
import gc
import time

import pytest
from prometheus_client import CollectorRegistry
from security.stalls import StallMeter

from jupyterhub_gpu.services.loopguard import LoopGuard


def spin(seconds: float) -> None:
    """Compute on this thread for `seconds` of its own CPU time (a busy machine may take longer)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def test_a_callback_computing_on_the_loop_is_a_stall_short_ones_are_not():
    guard = LoopGuard(CollectorRegistry()).start()
    meter = StallMeter(registry=guard.registry)
    await asyncio.sleep(0.05)
    before = meter.read()
    for _ in range(5):
        spin(0.02)  # 20 ms each, the loop running the ticker in between
        await asyncio.sleep(0.02)
    await asyncio.to_thread(time.sleep, 0.2)  # waiting elsewhere is no stall
    meter.check("short callbacks", before, meter.read())
    before = meter.read()
    spin(0.12)
    await asyncio.sleep(0.03)
    with pytest.raises(pytest.fail.Exception, match="stalled the event loop over 50 ms"):
        meter.check("a 120 ms callback", before, meter.read())
    assert meter.worst["a 120 ms callback"][0] >= 0.09  # the ticker's interval may hide up to 10 ms
    assert guard._longest >= 0.09
    guard._task.cancel()


def test_without_an_event_loop_the_guard_sees_the_gil_held():
    registry = CollectorRegistry()
    LoopGuard(registry, interval=0.005).start_in_thread()
    meter = StallMeter(registry=registry)
    time.sleep(0.1)
    before = meter.read()
    sum(range(15_000_000))  # one C call: no bytecode runs, so the GIL is held throughout (~0.4 s)
    time.sleep(0.05)
    with pytest.raises(pytest.fail.Exception, match="stalled"):
        meter.check("a C call holding the GIL", before, meter.read())


async def test_a_stall_the_garbage_collector_made_is_told_apart():
    guard = LoopGuard(CollectorRegistry()).start()
    meter = StallMeter(registry=guard.registry)
    await asyncio.sleep(0.05)
    garbage = [[] for _ in range(400_000)]
    for i, item in enumerate(garbage):  # cycles only the cyclic collector can free
        item.append(garbage[i - 1])
    del garbage, item
    before = meter.read()
    spin(0.03)  # computing, not collecting
    gc.collect()  # a full collection over ~400,000 containers, on the loop
    await asyncio.sleep(0.03)
    after = meter.read()
    assert after.gc_sum - before.gc_sum > 0.005, (before, after)  # the collection is in the stall
    assert after.busy_sum - before.busy_sum >= (after.gc_sum - before.gc_sum) + 0.02  # and the spin is not
    guard._task.cancel()


class _Cyclic:
    """A container in a reference cycle with itself: only the cyclic collector frees it."""

    def __init__(self):
        self.me = self


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()  # the frozen objects go back to the oldest generation: the next test sees a normal heap


async def test_a_started_service_freezes_its_heap_and_still_collects_later_garbage(unfrozen):
    import weakref

    guard = LoopGuard(CollectorRegistry()).start()
    await asyncio.sleep(0.02)
    assert gc.get_freeze_count() > 1000  # this process's modules and objects: out of every later collection
    later = _Cyclic()
    gone = weakref.ref(later)
    del later
    gc.collect()
    assert gone() is None  # garbage made after the freeze is collected as before
    guard._task.cancel()


async def test_the_heap_is_frozen_only_once_the_process_is_ready(unfrozen):
    ready = asyncio.get_running_loop().create_future()
    guard = LoopGuard(CollectorRegistry()).start(ready=ready)
    await asyncio.sleep(0.02)
    assert gc.get_freeze_count() == 0  # the hub still starting: what it builds is not frozen half-made
    ready.set_result(None)
    await asyncio.sleep(0.02)
    assert gc.get_freeze_count() > 1000
    guard._task.cancel()


def test_the_collectors_time_is_cpu_time_of_the_collecting_thread():
    """The same clock as a stall's "computing" share, so "N ms of it collecting garbage" is a part of it."""
    from jupyterhub_gpu.services.loopguard import collector_seconds

    collector_seconds()
    garbage = [_Cyclic() for _ in range(200_000)]
    del garbage
    before_gc, before_cpu = collector_seconds(), time.thread_time()
    gc.collect()
    collected, cpu = collector_seconds() - before_gc, time.thread_time() - before_cpu
    assert 0 < collected <= cpu + 1e-3, (collected, cpu)
