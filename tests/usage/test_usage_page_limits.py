"""The showback page's right-sizing hints read Prometheus over the whole page range, for every pod in the
cluster. Any logged-in user reloading their page (or scripting it with their cookie) must not turn into
as many concurrent cluster-wide Prometheus reads: one read at a time, and one answer per page reused for a
while, a failure included. A real thread pool runs the reads, as on the page."""
from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.services.usage.web import SharedHints

UNTIL = datetime(2026, 12, 1, tzinfo=timezone.utc)
SINCE = UNTIL - timedelta(days=7)


class CountingHinter:
    def __init__(self, fail: bool = False):
        self.calls, self.inside, self.most_inside, self.fail = 0, 0, 0, fail
        self._lock = threading.Lock()

    def __call__(self, lifetimes, since, until):
        with self._lock:
            self.calls += 1
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        time.sleep(0.05)  # a Prometheus read
        with self._lock:
            self.inside -= 1
        if self.fail:
            raise ConnectionRefusedError("prometheus down")
        return [f"hint for {len(lifetimes)} lifetimes"]


async def test_many_page_views_make_one_prometheus_read_at_a_time_and_reuse_it():
    hinter, now = CountingHinter(), [1000.0]
    shared = SharedHints(hinter, ttl=60, clock=lambda: now[0])
    views = [shared.get("alice", [1, 2], SINCE, UNTIL) for _ in range(20)] + \
            [shared.get("bob", [1], SINCE, UNTIL) for _ in range(5)] + [shared.get(None, [], SINCE, UNTIL)]
    got = await asyncio.gather(*views)
    assert got[0] == ["hint for 2 lifetimes"] and got[20] == ["hint for 1 lifetimes"]
    assert hinter.calls == 3  # alice's page, bob's, the admins' view
    assert hinter.most_inside == 1  # never two reads at once
    now[0] += 61  # an answer is reused for ttl seconds only
    assert await shared.get("alice", [1, 2, 3], SINCE, UNTIL) == ["hint for 3 lifetimes"] and hinter.calls == 4


async def test_prometheus_down_is_asked_once_per_ttl_not_per_view():
    hinter, now = CountingHinter(fail=True), [0.0]
    shared = SharedHints(hinter, ttl=30, clock=lambda: now[0])
    results = await asyncio.gather(*(shared.get("alice", [], SINCE, UNTIL) for _ in range(10)), return_exceptions=True)
    assert all(isinstance(r, ConnectionRefusedError) for r in results) and hinter.calls == 1
    now[0] += 31
    with pytest.raises(ConnectionRefusedError):
        await shared.get("alice", [], SINCE, UNTIL)
    assert hinter.calls == 2


async def test_the_reuse_cache_is_bounded():
    shared = SharedHints(CountingHinter(), ttl=60, size=4)
    for i in range(10):
        await shared.get(f"user{i}", [], SINCE, UNTIL)
    assert len(shared.cache) == 4
