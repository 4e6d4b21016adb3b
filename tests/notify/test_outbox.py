"""The durable outbox (outbox.py): an event that happens while gpu-jobs is down is sent once after it is back,
a delivery cut short by a stop is made after the restart, and nothing is sent twice however often the
service restarts. The real watch loop (watch.py), the real Notifier and a real webhook receiver on this
machine; each "process" is a new Notifier and Outbox on the same SQLite file, the cache a stand-in."""
from __future__ import annotations

import asyncio
import json

import pytest

from gpu_spawner.contract import ADMITTED, QUEUED, RUNNING, SUCCEEDED
from gpu_spawner.services.notify.events import Event, cull_event, job_events
from gpu_spawner.services.notify.outbox import PENDING, SENT, Outbox, outbox_id
from gpu_spawner.services.notify.prefs import Channels, PreferenceStore, parse_webhooks
from gpu_spawner.services.notify.send import Notifier
from gpu_spawner.services.notify.watch import compare, watch_jobs

from .receivers import WebhookSink
from .test_events_payloads import status

JOB = {"metadata": {"name": "gpu-alice-train-ab12cd", "namespace": "team-ds", "uid": "uid-1"}}


class Cache:
    synced, stale = True, False

    def __init__(self):
        self.change_signal = asyncio.Event()


class Kube:
    """The cache-fed reads watch_jobs makes: the jobs, and their statuses as `state` says now."""

    def __init__(self, state: str, preempted: int = 0, job: dict = JOB):
        self.cache, self.state, self.preempted, self.job = Cache(), state, preempted, job

    async def jobs(self, user=None):
        return [self.job]

    async def statuses(self, jobs, with_logs=True):
        return [status(self.state, self.preempted)]


def process(path, hooks: WebhookSink, **kw) -> Notifier:
    """One gpu-jobs process's notifier: alice wants Slack on admitted and succeeded."""
    store = PreferenceStore(str(path))
    store.put("alice", {"channels": {"team-slack": ["admitted", "succeeded"]}, "email": None}, [])
    return Notifier(Channels(webhooks=parse_webhooks({"team-slack": f"slack:{hooks.url}/slack"})), store,
                    backoff=0.01, outbox=Outbox(str(path)), **kw)


async def run_cycles(kube: Kube, notifier: Notifier, cycles: int = 2) -> None:
    """watch_jobs for a few cycles, then stopped as the hub stops gpu-jobs (deliveries in flight cancelled)."""
    task = asyncio.create_task(watch_jobs(kube, notifier, settle=0.01, every=0.05))
    await asyncio.sleep(0.08 * cycles)
    await notifier.drain()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await notifier.close()


def slack_titles(hooks: WebhookSink) -> list[str]:
    return [body["text"].split(" (for")[0] for path, body in hooks.received if path == "/slack"]


async def test_an_event_while_gpu_jobs_is_down_is_sent_once_after_it_is_back(tmp_path):
    db = tmp_path / "notify.sqlite"
    with WebhookSink() as hooks:
        await run_cycles(Kube(QUEUED), process(db, hooks))  # the first run: its baseline, nothing sent
        await run_cycles(Kube(RUNNING), process(db, hooks))
        assert slack_titles(hooks) == ["GPU job gpu-alice-train-ab12cd started"]
        # gpu-jobs is down; the job finishes meanwhile; then it starts again, and again
        for _ in range(3):
            await run_cycles(Kube(SUCCEEDED), process(db, hooks))
    assert slack_titles(hooks) == ["GPU job gpu-alice-train-ab12cd started", "GPU job gpu-alice-train-ab12cd succeeded"]
    assert set(Outbox(str(db)).states().values()) == {SENT}


async def test_a_delivery_cut_short_by_a_stop_is_made_after_the_restart(tmp_path):
    db = tmp_path / "notify.sqlite"
    with WebhookSink(fail_first=1000) as down:  # the receiver refuses while the first process runs
        first = process(db, down, retries=50, backoff_max=0.05)
        await run_cycles(Kube(QUEUED), first, cycles=1)
        kube = Kube(SUCCEEDED)
        task = asyncio.create_task(watch_jobs(kube, first, settle=0.01, every=0.05))
        await asyncio.sleep(0.3)  # queued, retrying
        task.cancel()
        await first.close()  # the stop: the delivery is cancelled mid-retry
        assert down.attempts["/slack"] and not down.received
    (state,) = Outbox(str(db)).states().values()
    assert state == PENDING
    with WebhookSink() as up:
        await run_cycles(Kube(SUCCEEDED), process(db, up))
        await run_cycles(Kube(SUCCEEDED), process(db, up))  # and a third start sends nothing more
    assert slack_titles(up) == ["GPU job gpu-alice-train-ab12cd succeeded"]


async def test_a_job_submitted_while_down_is_compared_with_just_submitted():
    """A job the service never saw (submitted and admitted while it was down) still gets its "admitted"."""
    other = {"metadata": {"name": "gpu-alice-new-000001", "namespace": "team-ds", "uid": "uid-2"}}
    seen = {("team-ds", "gpu-alice-train-ab12cd"): {"state": RUNNING, "preempted": 0, "uid": "uid-1"}}
    events, now, changed = compare(seen, [other], [status(ADMITTED, name="gpu-alice-new-000001")])
    assert [e.kind for e in events] == ["admitted"] and events[0].key.endswith("/uid-2")
    assert changed == {("team-ds", "gpu-alice-new-000001"): {"state": ADMITTED, "preempted": 0, "uid": "uid-2"},
                       ("team-ds", "gpu-alice-train-ab12cd"): None}  # the one gone is forgotten
    reused = {("team-ds", "gpu-alice-new-000001"): {"state": SUCCEEDED, "preempted": 0, "uid": "uid-old"}}
    assert [e.kind for e in compare(reused, [other], [status(ADMITTED, name="gpu-alice-new-000001")])[0]] == \
        ["admitted"]  # the same name, another uid: a new job, not the finished one
    assert compare(None, [other], [status(ADMITTED)])[0] == []  # the first run: the baseline


def test_statuses_and_their_events_are_written_together_or_not_at_all(tmp_path, monkeypatch):
    box = Outbox(str(tmp_path / "o.sqlite"))
    (ev,) = job_events(status(RUNNING), status(SUCCEEDED))
    box.record([], {("team-ds", "a"): {"state": RUNNING}})
    import gpu_spawner.services.notify.outbox as outbox

    real, calls = outbox._event_json, []

    def fails_second(event):
        calls.append(event)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(event)

    monkeypatch.setattr(outbox, "_event_json", fails_second)
    rows = [(outbox_id("a", ev), "a", ev), (outbox_id("b", ev), "b", ev)]
    with pytest.raises(OSError):
        box.record(rows, {("team-ds", "a"): {"state": SUCCEEDED}})
    assert box.states() == {} and box.seen() == {("team-ds", "a"): {"state": RUNNING}}
    monkeypatch.setattr(outbox, "_event_json", real)
    assert [r[0] for r in box.record(rows, {})] == [rows[0][0], rows[1][0]]
    assert box.record(rows, {}) == []  # queued once
    assert [(i, c, e) for i, c, e in box.pending()] == rows  # the event read back equals the one queued


def test_events_read_back_equal_the_queued_ones_cull_warnings_too(tmp_path):
    box = Outbox(str(tmp_path / "o.sqlite"))
    ev = cull_event("alice", {"server": "gpu", "profile": "t4-shared", "cull_in_s": 300,
                              "cull_at": "2026-12-01T12:00:00+00:00", "message": "idle ✓ \"quoted\""}, "https://hub")
    box.record([(outbox_id("email", ev), "email", ev)])
    ((_, _, back),) = box.pending()
    assert back == ev and isinstance(back, Event) and json.dumps(back.facts)
    assert box.seen() is None  # a cull warning takes no baseline
