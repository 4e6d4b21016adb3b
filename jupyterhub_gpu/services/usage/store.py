"""What the accounting keeps across restarts: the lifetimes of pods that are gone.

KubeSpawner deletes a server's pod when it stops and Jobs' pods go with their Job's TTL, so the cluster
forgets past usage; Prometheus keeps DCGM samples but not who held which GPU for how long. Two files:

- `usage.sqlite`: one row per finished lifetime, only ever inserted (WAL mode, one writer: the collector;
  one transaction per cycle, so a crash loses at most the transaction being written). A uid's first write
  wins (`INSERT OR IGNORE` on its primary key). Indexed on (user, end), (team, end) and (end), so the page,
  `gpuhub report` and the picker's hints read only the rows of their range (`query`), never the whole store
  (at 200 k lifetimes the JSON-lines file it replaced cost 4.8 s and ~260 MB per full read). Readers open it
  read-only (`live.UsageReader`). A `finished.jsonl` of the version before is imported once, on the
  writer's first start, then renamed `finished.jsonl.imported`.
- `open.json`: the lifetimes still running at the last cycle, replaced atomically each cycle, so a pod that
  ends while the collector is down is closed at its last-seen time instead of being lost.
- columns added after the first version (`ADDED_COLUMNS`: `devices`, what a pod got through DRA) are added
  by the writer when it opens an older file; a reader of a file not yet migrated reads them as their default.
- the `meta` table's `watch_positions`: each namespace's last list resourceVersion, where the collector's
  watch of pod events starts (after a restart too).

Retention: `prune()` deletes the lifetimes that ended before a cutoff in bounded batches (one short
transaction each), so the store stays bounded and nothing is rewritten.
"""
from __future__ import annotations

import json
import math
import os
import sqlite3
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable, Iterator

from jupyterhub_gpu.cluster.times import parse_time
from jupyterhub_gpu.services.sqlite_db import open_wal
from jupyterhub_gpu.services.usage.accounting import Lifetime

DB_NAME, OPEN_NAME, LEGACY_NAME = "usage.sqlite", "open.json", "finished.jsonl"
#: Lifetimes deleted per retention transaction, and lines imported per statement from finished.jsonl.
PRUNE_BATCH, IMPORT_BATCH = 5000, 10000
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The columns after uid, in Lifetime's field order; times are microseconds since the epoch (exact).
COLUMNS = ("uid", "kind", "namespace", "pod", "user", "team", "profile", "job", "gpus", "hourly_cost",
           "start_us", "end_us", "node", "spot", "ended_by", "devices")
#: Columns the first schema lacked: name → its definition (with the default older rows read as).
ADDED_COLUMNS = {"devices": "TEXT NOT NULL DEFAULT ''"}
SCHEMA = """
CREATE TABLE IF NOT EXISTS finished (
    uid TEXT PRIMARY KEY NOT NULL, kind TEXT NOT NULL, namespace TEXT NOT NULL, pod TEXT NOT NULL,
    user TEXT NOT NULL, team TEXT NOT NULL, profile TEXT NOT NULL, job TEXT NOT NULL, gpus INTEGER NOT NULL,
    hourly_cost REAL NOT NULL, start_us INTEGER NOT NULL, end_us INTEGER NOT NULL, node TEXT NOT NULL,
    spot INTEGER NOT NULL, ended_by TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS finished_user_end ON finished (user, end_us);
CREATE INDEX IF NOT EXISTS finished_team_end ON finished (team, end_us);
CREATE INDEX IF NOT EXISTS finished_end ON finished (end_us);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY NOT NULL, value);
"""
INSERT = (f"INSERT OR IGNORE INTO finished ({', '.join(COLUMNS)}) "
          f"VALUES ({', '.join('?' * len(COLUMNS))})")
#: The longest lifetime stored (µs): a range's query then reads only rows that ended inside it or that long after.
SPAN = ("INSERT INTO meta (key, value) VALUES ('max_span_us', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)")
POSITIONS = ("INSERT INTO meta (key, value) VALUES ('watch_positions', ?) "
             "ON CONFLICT (key) DO UPDATE SET value = excluded.value")


def to_us(t: datetime) -> int:
    return (t - EPOCH) // timedelta(microseconds=1)


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def row_of(lt: Lifetime) -> tuple:
    return (lt.uid, lt.kind, lt.namespace, lt.pod, lt.user, lt.team, lt.profile, lt.job, lt.gpus, lt.hourly_cost,
            to_us(lt.start), to_us(lt.end), lt.node, int(lt.spot), lt.ended_by, lt.devices)


def lifetime_of_row(r: tuple) -> Lifetime:
    """A row of COLUMNS; one of a file not yet migrated lacks the ADDED_COLUMNS at its end (their defaults)."""
    return Lifetime(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], from_us(r[10]), from_us(r[11]),
                    r[12], bool(r[13]), r[14], *r[15:])


def present_columns(conn: sqlite3.Connection) -> tuple[str, ...]:
    """COLUMNS as far as this file has them (the added ones come last)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(finished)")}
    return tuple(c for c in COLUMNS if c in have)


def add_columns(conn: sqlite3.Connection) -> None:
    """The writer's migration: every ADDED_COLUMNS column an older file lacks (older rows get its default)."""
    have = present_columns(conn)
    for name, definition in ADDED_COLUMNS.items():
        if name not in have:
            conn.execute(f"ALTER TABLE finished ADD COLUMN {name} {definition}")  # fixed names, never input


def query(conn: sqlite3.Connection, since: datetime | None = None, until: datetime | None = None,
          user: str | None = None, team: str | None = None) -> list[Lifetime]:
    """The finished lifetimes that may hold anything in [since, until] (all of them without a range), of
    `user` / `team` when given, in the order they were written. An index range: the rows that ended from
    `since` to `until` plus the longest stored lifetime, not the store."""
    where, args = [], []
    if user is not None:
        where.append("user = ?")
        args.append(user)
    if team is not None:
        where.append("team = ?")
        args.append(team)
    if since is not None:
        where.append("end_us >= ?")
        args.append(to_us(since))
    if until is not None:
        span = conn.execute("SELECT value FROM meta WHERE key = 'max_span_us'").fetchone()
        where.append("end_us <= ? AND start_us <= ?")
        args += [to_us(until) + int(span[0] if span else 0), to_us(until)]
    sql = f"SELECT {', '.join(present_columns(conn))} FROM finished"
    sql += f" WHERE {' AND '.join(where)}" if where else ""
    return [lifetime_of_row(r) for r in conn.execute(sql + " ORDER BY rowid", args)]


class UsageStore:
    """The collector's side: the only writer. Opening it creates the folder and the schema and imports a
    `finished.jsonl` left by the version before (once)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.db_path = self.dir / DB_NAME
        self.open_path = self.dir / OPEN_NAME
        # synchronous FULL: a commit is on disk, so a crash loses at most the one under way
        self.conn = open_wal(self.db_path, SCHEMA, synchronous="FULL")
        add_columns(self.conn)
        self.import_jsonl()

    def close(self) -> None:
        self.conn.close()

    def append_finished(self, lifetimes: Iterable[Lifetime]) -> int:
        """Insert finished lifetimes in one transaction (a uid already stored keeps its first row); how many
        were new. Lifetimes without an end are not finished and are skipped."""
        with _transaction(self.conn):
            return self._insert(lt for lt in lifetimes if lt.end is not None)

    def _insert(self, lifetimes: Iterable[Lifetime]) -> int:
        before, span = self.conn.total_changes, 0
        rows = []
        for lt in lifetimes:
            rows.append(row_of(lt))
            span = max(span, rows[-1][11] - rows[-1][10])
            if len(rows) >= IMPORT_BATCH:
                self.conn.executemany(INSERT, rows)
                rows = []
        self.conn.executemany(INSERT, rows)
        added = self.conn.total_changes - before
        if added:
            self.conn.execute(SPAN, (span,))
        return added

    def finished(self, since: datetime | None = None, until: datetime | None = None, user: str | None = None,
                 team: str | None = None) -> list[Lifetime]:
        """Every finished lifetime once (by uid), or those of a range / user / team (`query`)."""
        return query(self.conn, since, until, user, team)

    def prune(self, before: datetime, batch: int = PRUNE_BATCH) -> int:
        """Delete the lifetimes that ended before `before`, `batch` rows per transaction (readers and the
        next cycle never wait long, and the WAL stays small); how many went."""
        gone = 0
        while True:
            with _transaction(self.conn):
                n = self.conn.execute("DELETE FROM finished WHERE rowid IN (SELECT rowid FROM finished "
                                      "WHERE end_us < ? LIMIT ?)", (to_us(before), batch)).rowcount
            gone += n
            if n < batch:
                return gone

    def import_jsonl(self) -> int:
        """`finished.jsonl` (the JSON-lines store before SQLite) → rows, in one transaction, in file order
        (its first line of a uid wins, as it did), streamed (memory does not grow with the file); then the
        file is renamed `.imported`. Idempotent: a crash before the rename imports nothing twice."""
        legacy = self.dir / LEGACY_NAME
        if not legacy.exists():
            return 0
        with _transaction(self.conn):
            added = self._insert(read_jsonl(legacy))
        os.replace(legacy, legacy.with_name(LEGACY_NAME + ".imported"))
        return added

    def _replace(self, path: Path, body: str, prefix: str) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=prefix)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def stored(self, uids: Iterable[str]) -> set[str]:
        """Which of `uids` already have their row."""
        wanted = list(dict.fromkeys(uids))
        found: set[str] = set()
        for i in range(0, len(wanted), 500):
            part = wanted[i:i + 500]
            found.update(r[0] for r in self.conn.execute(
                f"SELECT uid FROM finished WHERE uid IN ({', '.join('?' * len(part))})", part))
        return found

    def save_positions(self, positions: dict[str, str]) -> None:
        """Each namespace's last list resourceVersion: where the next watch starts, after a restart too."""
        with _transaction(self.conn):
            self.conn.execute(POSITIONS, (json.dumps(positions, sort_keys=True),))

    def load_positions(self) -> dict[str, str]:
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'watch_positions'").fetchone()
        try:
            got = json.loads(row[0]) if row else {}
        except (TypeError, ValueError):
            return {}
        return {k: v for k, v in got.items() if isinstance(k, str) and isinstance(v, str)} \
            if isinstance(got, dict) else {}

    def save_open(self, lifetimes: dict[str, Lifetime], seen: datetime) -> None:
        body = json.dumps({"seen": seen.isoformat(), "open": [lt.to_json() for lt in lifetimes.values()]})
        self._replace(self.open_path, body, ".open-")

    def load_open(self) -> tuple[dict[str, Lifetime], datetime | None]:
        return load_open(self.open_path)


class _transaction:
    """BEGIN IMMEDIATE … COMMIT, or ROLLBACK on any error (autocommit connection: nothing is implicit)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, value, tb) -> None:
        self.conn.execute("COMMIT" if kind is None else "ROLLBACK")


def read_jsonl(path: Path) -> Iterator[Lifetime]:
    """The finished lifetimes of a `finished.jsonl`, line by line, skipping lines that do not parse or do
    not make a row (a torn last one, a hand edit): one bad line must not stop the import of the rest."""
    with path.open("rb") as f:
        for line in f:
            try:
                lt = Lifetime.from_json(json.loads(line))
                if lt.end is not None and well_formed(lt):
                    yield lt
            except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
                continue


TEXT_FIELDS = ("uid", "kind", "namespace", "pod", "user", "team", "profile", "job", "node", "ended_by", "devices")


def well_formed(lt: Lifetime) -> bool:
    """What a row needs (a JSON line may hold anything): text that encodes, a GPU count and price that fit
    their columns, aware times (parse_time makes naive ones UTC)."""
    try:
        for f in TEXT_FIELDS:
            getattr(lt, f).encode("utf-8")  # not a str, or a lone surrogate: not a row
    except (AttributeError, UnicodeEncodeError):
        return False
    return (type(lt.gpus) is int and 0 <= lt.gpus < 2**31 and type(lt.hourly_cost) in (int, float)
            and math.isfinite(lt.hourly_cost) and isinstance(lt.spot, bool)
            and isinstance(lt.start, datetime) and isinstance(lt.end, datetime))


def load_open(path: Path) -> tuple[dict[str, Lifetime], datetime | None]:
    """`open.json`: the lifetimes running at the last cycle and when it was; nothing when unreadable."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
        lts = [Lifetime.from_json(x) for x in d["open"]]
        return {lt.uid: lt for lt in lts}, parse_time(d.get("seen"))
    except (OSError, ValueError, TypeError, KeyError):
        return {}, None
