"""The hub's own handlers of this package never stall the hub's event loop over 50 ms (issue 25): the
picker's render (GPUSpawner's form with live capacity) and a spawn's progress stream (its events put in
plain words), measured by the hub's LoopGuard at the real hub's /hub/metrics."""
from __future__ import annotations

import pytest
from security.stalls import StallMeter

pytestmark = pytest.mark.cluster


def test_a_picker_render_and_a_progress_stream_never_stall_the_hubs_loop(hub):
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
