"""The durable outbox (outbox.py): an event that happens while gpu-jobs is down is sent once after it is back,
a delivery cut short by a stop is made after the restart, and nothing is sent twice however often the
service restarts. The real watch loop (watch.py), the real Notifier and a real webhook receiver on this
machine; each "process" is a new Notifier and Outbox on the same SQLite file, the cache a stand-in."""
from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from jupyterhub_gpu.contract import ADMITTED, QUEUED, RUNNING, SUCCEEDED
from jupyterhub_gpu.services.notify.events import Event, cull_event, job_events
from jupyterhub_gpu.services.notify.outbox import DROPPED, FAILED, PENDING, SENT, Outbox, outbox_id
from jupyterhub_gpu.services.notify.prefs import Channels, PreferenceStore, parse_webhooks
from jupyterhub_gpu.services.notify.send import Notifier
from jupyterhub_gpu.services.notify.watch import compare, watch_jobs

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
    # both deliveries pending: its start, seen only after the fact (queued, then succeeded), and its end
    assert list(Outbox(str(db)).states().values()) == [PENDING, PENDING]
    with WebhookSink() as up:
        await run_cycles(Kube(SUCCEEDED), process(db, up))
        await run_cycles(Kube(SUCCEEDED), process(db, up))  # and a third start sends nothing more
    assert sorted(slack_titles(up)) == ["GPU job gpu-alice-train-ab12cd started",
                                        "GPU job gpu-alice-train-ab12cd succeeded"]


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
    import jupyterhub_gpu.services.notify.outbox as outbox

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


# ---------------------------------------------------------------- the outbox off the event loop, and its limits

def three_succeeded(n: int = 3) -> list[Event]:
    return [job_events(status(RUNNING, name=f"gpu-alice-job-{i}"), status(SUCCEEDED, name=f"gpu-alice-job-{i}"))[0]
            for i in range(n)]


async def test_the_event_loop_never_waits_for_the_outbox(tmp_path, monkeypatch):
    """Queuing and marking deliveries (SQLite, fsync) run in worker threads, never on the loop's thread (which
    serves every request of gpu-jobs meanwhile): checked by the threads they run in, not by wall-clock lateness
    that a loaded machine would make up; nothing to write (no rows, no statuses) opens no transaction."""
    real_record, real_end, calls, threads = Outbox.record, Outbox.end, [], []

    def record(self, rows, changed=None):
        calls.append((list(rows), changed))
        threads.append(threading.get_ident())
        return real_record(self, rows, changed)

    def end(self, row_ids, state):
        threads.append(threading.get_ident())
        return real_end(self, row_ids, state)

    monkeypatch.setattr(Outbox, "record", record)
    monkeypatch.setattr(Outbox, "end", end)
    db = tmp_path / "notify.sqlite"
    with WebhookSink() as hooks:
        n = process(db, hooks)
        assert await n.notify_many(three_succeeded(), {("team-ds", "gpu-alice-job-0"): {"state": SUCCEEDED}}) == 3
        assert await n.notify(Event("bob", "failed", "job/x", "t", "x")) == 0  # bob wants nothing: no rows
        assert await n.notify_many([]) == 0
        await n.drain()
        await n.close()
    assert len(calls) == 1 and len(calls[0][0]) == 3  # one transaction; none for nothing to write
    assert len(threads) == 4 and threading.get_ident() not in threads  # a record and three marks, all off the loop
    assert len(slack_titles(hooks)) == 3 and set(Outbox(str(db)).states().values()) == {SENT}


@pytest.mark.parametrize("change", ["opted out", "webhook removed"])
async def test_a_pending_row_for_a_channel_no_longer_wanted_is_dropped_not_sent(tmp_path, change):
    """Queued, then gpu-jobs stopped; meanwhile alice opted out of the channel, or the admin removed that
    webhook (its name may come back with another team's URL): the next start ends the row DROPPED, posts
    nothing, and no start after it tries again."""
    db = tmp_path / "notify.sqlite"
    (ev,) = three_succeeded(1)
    row = (outbox_id("team-slack", ev), "team-slack", ev)
    assert Outbox(str(db)).record([row]) == [row]
    with WebhookSink() as hooks:
        n = process(db, hooks)
        if change == "opted out":
            n.store.put("alice", {"channels": {"team-slack": ["admitted"]}, "email": None}, [])
        else:  # her choice still names it; the hub's config no longer has it
            n.channels = Channels(webhooks=parse_webhooks({"other-team": f"slack:{hooks.url}/other"}))
        assert await n.resume() == 0
        await n.drain()
        await n.close()
        assert Outbox(str(db)).states() == {row[0]: DROPPED}
        again = process(db, hooks)
        assert await again.resume() == 0
        await again.close()
    assert hooks.received == [] and hooks.attempts == {}
    assert n.stats["dropped"] == 1


async def test_a_removed_webhook_is_a_refusal_not_an_error(tmp_path):
    with WebhookSink() as hooks:
        n = process(tmp_path / "notify.sqlite", hooks, retries=3)
        assert await n.deliver("gone-webhook", three_succeeded(1)[0]) is False
        await n.close()
    assert n.stats == {"failed": 1}  # Permanent: not retried


async def test_over_max_pending_rows_stay_pending_and_the_next_start_delivers_them(tmp_path):
    db = tmp_path / "notify.sqlite"
    with WebhookSink() as hooks:
        first = process(db, hooks, max_pending=1)
        assert await first.notify_many(three_succeeded()) == 1
        await first.drain()
        await first.close()
        assert first.stats["deferred"] == 2 and "dropped" not in first.stats
        assert sorted(Outbox(str(db)).states().values()) == [PENDING, PENDING, SENT]
        assert len(slack_titles(hooks)) == 1
        second = process(db, hooks)
        assert await second.resume() == 2
        await second.drain()
        await second.close()
        assert set(Outbox(str(db)).states().values()) == {SENT}
        assert sorted(slack_titles(hooks)) == sorted(f"GPU job gpu-alice-job-{i} succeeded" for i in range(3))
        no_outbox = process(db, hooks, max_pending=0)
        no_outbox.outbox = None  # without an outbox nothing could keep them: dropped, as before
        assert await no_outbox.notify_many(three_succeeded()) == 0
        assert no_outbox.stats == {"dropped": 3}


def test_ended_rows_are_pruned_after_keep_done_s_at_most_once_an_hour(tmp_path):
    from jupyterhub_gpu.services.notify.outbox import KEEP_DONE_S, PRUNE_EVERY_S

    now = [1000.0]
    box = Outbox(str(tmp_path / "o.sqlite"), clock=lambda: now[0])
    events = three_succeeded(5)
    rows = [(outbox_id("c", ev), "c", ev) for ev in events]
    box.record(rows)
    ids = [r[0] for r in rows]

    def age(row_id: str) -> None:  # ended (or, for a pending row, created) longer ago than kept
        box._db.execute("UPDATE outbox SET ended = ?, created = ? WHERE id = ?",
                        (time.time() - KEEP_DONE_S - 60,) * 2 + (row_id,))

    box.end(ids[:2], SENT)  # one call, one transaction, both marked; the first end prunes (nothing old yet)
    assert [box.states()[i] for i in ids] == [SENT, SENT, PENDING, PENDING, PENDING]
    age(ids[0])
    age(ids[4])  # pending: never pruned, however old
    now[0] += PRUNE_EVERY_S - 1
    box.end([ids[2]], DROPPED)  # within the hour: not looked for again
    assert ids[0] in box.states()
    now[0] += 1
    box.end([ids[3]], FAILED)
    assert box.states() == {ids[1]: SENT, ids[2]: DROPPED, ids[3]: FAILED, ids[4]: PENDING}
    plan = box._db.execute("EXPLAIN QUERY PLAN DELETE FROM outbox WHERE state IN (?, ?, ?) AND ended < ?",
                           (SENT, DROPPED, FAILED, 0)).fetchall()
    assert "outbox_state_ended" in str(plan)  # the prune reads the index, not the whole table
