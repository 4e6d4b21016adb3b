"""Notifications that survive a gpu-jobs restart: a durable outbox in the notification service's SQLite file.

Why that file and not an annotation on the Job: the outbox must hold deliveries not yet made (the message,
its channel) and cull warnings, which have no object to annotate; the preferences file is already this
service's persistent state (`Notifications.preferences_file`, on a volume when gpu-jobs runs in its own
pod), so it needs no new volume, no new RBAC verb (patch on Jobs) and no API write per event.

Two tables, written together:
  job_seen: the status each job was last seen in ((namespace, name) → state, preemptions, uid), plus a mark
    that a baseline was taken. A restarted gpu-jobs compares each job's status now with the one it saw
    last, so a change while it was down (admitted, preempted, finished) is still an event; a job it never
    saw (submitted while it was down) is compared with "just submitted". The very first run takes the jobs
    it finds as its baseline (no flood of old news on an upgrade).
  outbox: one row per (channel, event id), the event id stable (the job's uid, the kind, the preemption
    count; a cull warning's server and time): pending until delivered, dropped or given up. INSERT OR
    IGNORE: an event found again after a restart is not queued twice; a pending row is delivered after a
    restart; one that was sent, never again (at least once: a crash between a delivery and its mark resends
    that one message).
The new statuses and the events they make go in one transaction: a crash leaves both or neither.
Every method blocks (SQLite, fsync at COMMIT): the Notifier calls them with asyncio.to_thread, never on the
event loop; one connection (check_same_thread=False) serialised by the Outbox's own lock.
"""
from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Callable, Iterable

from jupyterhub_gpu.services.notify.events import Event
from jupyterhub_gpu.services.sqlite_db import open_wal

#: Rows that ended (sent, dropped, failed) are kept this long, then deleted: enough to de-duplicate a replay.
KEEP_DONE_S = 14 * 86400
#: ... and looked for at most this often (the first `end` after opening, then once an hour), not per delivery.
PRUNE_EVERY_S = 3600.0
SCHEMA = """
CREATE TABLE IF NOT EXISTS job_seen (namespace TEXT NOT NULL, name TEXT NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (namespace, name));
CREATE TABLE IF NOT EXISTS outbox (id TEXT PRIMARY KEY, channel TEXT NOT NULL, event TEXT NOT NULL,
    state TEXT NOT NULL, created REAL NOT NULL, ended REAL);
CREATE INDEX IF NOT EXISTS outbox_state_ended ON outbox (state, ended);
CREATE TABLE IF NOT EXISTS outbox_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
PENDING, SENT, DROPPED, FAILED = "pending", "sent", "dropped", "failed"

Key = tuple[str, str]  # (namespace, job name)
Row = tuple[str, str, Event]  # (outbox id, channel, event)


def outbox_id(channel: str, event: Event) -> str:
    return f"{channel}|{event.user}|{event.key}"


def _event_json(event: Event) -> str:
    return json.dumps(dataclasses.asdict(event))


def _event(text: str) -> Event:
    data = json.loads(text)
    data["facts"] = tuple(tuple(f) for f in data.get("facts") or ())
    return Event(**data)


class Outbox:
    def __init__(self, path: str, clock: Callable[[], float] = time.monotonic):
        self.path, self._clock = path, clock
        self._lock = threading.Lock()
        self._db = open_wal(path, SCHEMA)
        self._pruned: float | None = None  # when (clock) ended rows were last pruned; None: not yet

    def seen(self) -> dict[Key, dict] | None:
        """The statuses last seen per job; None before the first baseline."""
        with self._lock:
            if self._db.execute("SELECT 1 FROM outbox_meta WHERE name = 'baseline'").fetchone() is None:
                return None
            return {(ns, name): json.loads(data) for ns, name, data in
                    self._db.execute("SELECT namespace, name, data FROM job_seen")}

    def record(self, rows: Iterable[Row], changed: dict[Key, dict | None] | None = None) -> list[Row]:
        """Queue `rows` and write the `changed` statuses (None: the job is gone) in one transaction; returns
        the rows that were new (the others were queued before: not again). No rows and `changed` None: nothing
        to write, no transaction."""
        rows = list(rows)
        if not rows and changed is None:
            return []
        now, new = time.time(), []
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for row in rows:
                    cur = self._db.execute("INSERT OR IGNORE INTO outbox VALUES (?, ?, ?, ?, ?, NULL)",
                                           (row[0], row[1], _event_json(row[2]), PENDING, now))
                    if cur.rowcount:
                        new.append(row)
                for (ns, name), data in (changed or {}).items():
                    if data is None:
                        self._db.execute("DELETE FROM job_seen WHERE namespace = ? AND name = ?", (ns, name))
                    else:
                        self._db.execute("INSERT INTO job_seen VALUES (?, ?, ?) ON CONFLICT(namespace, name) DO "
                                         "UPDATE SET data = excluded.data", (ns, name, json.dumps(data)))
                if changed is not None:
                    self._db.execute("INSERT OR IGNORE INTO outbox_meta VALUES ('baseline', ?)", (str(now),))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return new

    def pending(self) -> list[Row]:
        """Deliveries queued and not ended: after a restart, they are made."""
        with self._lock:
            found = self._db.execute("SELECT id, channel, event FROM outbox WHERE state = ? ORDER BY created",
                                     (PENDING,)).fetchall()
        return [(i, channel, _event(text)) for i, channel, text in found]

    def end(self, row_ids: Iterable[str], state: str) -> None:
        """Deliveries ended (SENT, DROPPED, FAILED), all in one transaction; ended rows older than KEEP_DONE_S
        go, looked for at most once every PRUNE_EVERY_S."""
        ids = [row_ids] if isinstance(row_ids, str) else list(row_ids)
        if not ids:
            return
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("UPDATE outbox SET state = ?, ended = ? WHERE id = ?",
                                     [(state, now, i) for i in ids])
                tick = self._clock()
                prune = self._pruned is None or tick - self._pruned >= PRUNE_EVERY_S
                if prune:
                    self._db.execute("DELETE FROM outbox WHERE state IN (?, ?, ?) AND ended < ?",  # the index
                                     (SENT, DROPPED, FAILED, now - KEEP_DONE_S))  # (state != ? would scan)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            if prune:
                self._pruned = tick

    def states(self) -> dict[str, str]:
        """id → state (tests, the doctor)."""
        with self._lock:
            return dict(self._db.execute("SELECT id, state FROM outbox"))

    def close(self) -> None:
        with self._lock:
            self._db.close()
