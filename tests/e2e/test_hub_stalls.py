"""The hub's own handlers of this package never stall the hub's event loop over 50 ms (issue 25): the
picker's render (GPUSpawner's form with live capacity) and a spawn's progress stream (its events put in
plain words), measured by the hub's LoopGuard at the real hub's /hub/metrics."""
from __future__ import annotations

import re

import pytest
import requests
from security.stalls import StallMeter

pytestmark = pytest.mark.cluster


def frozen_objects(metrics_text: str) -> float:
    found = re.search(r"^gpuhub_gc_frozen_objects (\S+)$", metrics_text, re.M)
    assert found, "no gpuhub_gc_frozen_objects at /hub/metrics"
    return float(found.group(1))


def test_a_picker_render_and_a_progress_stream_never_stall_the_hubs_loop(hub):
    # the hub froze its start-up heap once it had started: a full collection no longer walks it in a request
    # (before: one of 180 ms of garbage collecting inside a picker render failed this test under load)
    assert frozen_objects(requests.get(f"{hub.url}/hub/metrics", timeout=30).text) > 10_000
    meter = StallMeter(url=f"{hub.url}/hub/metrics")
    session = hub.login("alice")
    for _ in range(10):
        with meter.request("GET /hub/spawn (the picker, live capacity)"):
            page = session.get(f"{hub.url}/hub/spawn", timeout=30)
        assert page.ok and 'data-profile="a100-mig-1g10gb"' in page.text, page.status_code
    try:
        with meter.request("POST /hub/api/users/alice/server and its progress stream (a spawn until ready)"):
            r = hub.api("POST", "/users/alice/server", json={"profile": "a100-mig-1g10gb"}, timeout=60)
            assert r.status_code in (201, 202), r.text
            events = hub.progress("alice", lambda e: e.get("ready") or e.get("failed"), timeout=180)
        assert events[-1].get("ready"), events[-5:]
    finally:
        hub.stop("alice")
    print("the hub's loop, worst stall:\n" + meter.report())
