"""The hub's own event loop has its stall guard (services/loopguard.py) at /hub/metrics (the hub's registry,
which JupyterHub serves there): started by configure(c), which JupyterHub runs on its loop, and by a
GPUSpawner made on it; the picker's render, measured on this loop, never stalls it over 50 ms."""
from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import REGISTRY, generate_latest
from security.stalls import StallMeter
from traitlets.config import Config

from jupyterhub_gpu.config import configure
from jupyterhub_gpu.hub import metrics
from jupyterhub_gpu.hub.render_pod import make_spawner
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES


def _guarded_here() -> bool:
    task = metrics._guard[0]._task if metrics._guard else None
    return task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop()


def test_without_a_running_loop_nothing_starts():
    assert metrics.guard_loop() is None


async def test_configure_starts_the_guard_on_the_hubs_loop(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    configure(Config(), profiles_file=str(EXAMPLE_PROFILES), env={})
    assert _guarded_here()
    assert b"gpuhub_event_loop_busy_stall_seconds_bucket" in generate_latest(REGISTRY)  # what /hub/metrics serves


async def test_a_picker_render_never_stalls_the_hubs_loop():
    sp = make_spawner(EXAMPLE_PROFILES, "admin", ["data-science", "ml-research"])
    try:
        assert _guarded_here()  # the spawner, made on the hub's loop, started it
        meter = StallMeter(registry=REGISTRY)
        await asyncio.sleep(0.05)  # the ticker runs
        for _ in range(20):
            with meter.request("the picker (every profile)", tolerate=2):  # 2 of 20 on a busy machine
                page = await sp._render_options_form_dynamically(sp)
                await asyncio.sleep(0.03)  # the ticker wakes after the render: a stall in it is counted
            assert 'data-profile="h100-full"' in page
        factor = meter.factor or meter.calibrate()  # on a busy machine the same work costs more CPU: so does this
        with pytest.raises(pytest.fail.Exception, match="stalled the event loop over 50 ms"):
            with meter.request("a render that computes 80 ms (times this run's slowdown) on the loop"):
                await sp._render_options_form_dynamically(sp)
                end = time.thread_time() + 0.08 * factor
                while time.thread_time() < end:
                    pass
                await asyncio.sleep(0.03)
        print(meter.report())
    finally:
        await sp.api.api_client.close()


async def test_outside_a_running_hub_the_hubs_guard_freezes_nothing():
    """The hub's heap is frozen when JupyterHub has started (its start future); a process that is no hub
    (this one) keeps its heap as it is."""
    import gc

    gc.unfreeze()
    assert metrics.hub_started() is None
    metrics.guard_loop()
    await asyncio.sleep(0.02)
    assert gc.get_freeze_count() == 0
