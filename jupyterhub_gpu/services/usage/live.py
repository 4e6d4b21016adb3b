"""The usage store as its readers see it (the showback page, `gpuhub report`, the picker's hints): read-only,
never creating anything, one range query per view (store.query: an index range of the rows it shows, so a
view costs the same at 10 k and at 2 M stored lifetimes), plus the running lifetimes of `open.json`.

SQLite in WAL mode lets these readers run beside the collector's writes: each query sees the last committed
cycle. A connection per thread (the page's queries run in the loop's executor), opened `mode=ro`.
"""
from __future__ import annotations

import os
import sqlite3
import threading
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

from jupyterhub_gpu.services.usage.accounting import Lifetime
from jupyterhub_gpu.services.usage.store import DB_NAME, LEGACY_NAME, OPEN_NAME, load_open, query


class UsageReader:
    """The store folder `directory`, read only; a missing store (the collector not started yet) reads empty."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = Path(directory)
        self._local = threading.local()
        self._open: tuple[tuple | None, dict[str, list[Lifetime]]] = (None, {})
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def _conn(self) -> sqlite3.Connection | None:
        conn = getattr(self._local, "conn", None)
        if conn is None and (self.dir / DB_NAME).exists():
            uri = f"file:{quote(str((self.dir / DB_NAME).resolve()))}?mode=ro"
            conn = self._local.conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            with self._lock:
                self._conns.append(conn)
        return conn

    def unimported(self) -> bool:
        """A store the collector has not upgraded yet: a `finished.jsonl` and no database."""
        return not (self.dir / DB_NAME).exists() and (self.dir / LEGACY_NAME).exists()

    def finished(self, since: datetime | None = None, until: datetime | None = None, user: str | None = None,
                 team: str | None = None) -> list[Lifetime]:
        """The stored lifetimes that may hold anything in [since, until], of `user` / `team` when given."""
        conn = self._conn()
        if conn is None:
            return []
        try:
            return query(conn, since, until, user, team)
        except sqlite3.OperationalError as e:
            if "no such table" in str(e):  # the collector is creating the schema right now
                return []
            raise

    def running(self) -> dict[str, list[Lifetime]]:
        """`open.json`'s lifetimes per user, re-read only when the collector replaced it."""
        path = self.dir / OPEN_NAME
        try:
            st = os.stat(path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp != self._open[0]:
            by_user: dict[str, list[Lifetime]] = {}
            for lt in (load_open(path)[0].values() if stamp else ()):
                by_user.setdefault(lt.user, []).append(lt)
            self._open = (stamp, by_user)
        return self._open[1]

    def lifetimes(self, user: str | None, since: datetime, until: datetime,
                  team: str | None = None) -> list[Lifetime]:
        """What a view over [since, until] aggregates: the stored ones of the range (of `user` / `team`) and
        the running ones; a running one once, even while the collector still lists it after it finished."""
        finished = self.finished(since, until, user, team)
        running = self.running()
        opened = running.get(user, []) if user is not None else [lt for lts in running.values() for lt in lts]
        if team is not None:
            opened = [lt for lt in opened if lt.team == team]
        stored = {lt.uid for lt in finished}
        opened = [lt for lt in opened if lt.uid not in stored]
        stored |= self._stored([lt.uid for lt in opened])
        return [*finished, *(lt for lt in opened if lt.uid not in stored)]

    def _stored(self, uids: list[str]) -> set[str]:
        """Which of these running uids the store has finished already (outside the range asked, too)."""
        conn, out = self._conn(), set()
        for i in range(0, len(uids) if conn is not None else 0, 500):
            chunk = uids[i:i + 500]
            try:
                out |= {r[0] for r in conn.execute(
                    f"SELECT uid FROM finished WHERE uid IN ({', '.join('?' * len(chunk))})", chunk)}
            except sqlite3.OperationalError as e:
                if "no such table" not in str(e):
                    raise
        return out

    def close(self) -> None:
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
        self._local = threading.local()
