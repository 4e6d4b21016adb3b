"""The usage store kept parsed in memory, for readers that answer many views (the showback page, the
picker's hints): at 200 k stored lifetimes a full re-read costs seconds of CPU, so each view re-reading the
store stalled every other one.

`LifetimeIndex` (pure): finished lifetimes once by uid, per user and per day of their end, so a user's view
reads only that user's rows and the admins' view only the days in its range. `LiveStore` (the async shell)
follows the collector's files: the appended tail of `finished.jsonl` is parsed in a thread and added on the
loop in small batches; a replaced file (`prune()`, an atomic rename) is re-read whole in a thread while the
views keep the old index; `open.json` (small, replaced every cycle) is re-read when it changed. The open
file handle pins the inode, so a rename is always seen as one (an inode number is never reused under us).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterable

from gpu_spawner.services.usage.accounting import Lifetime
from gpu_spawner.services.usage.store import load_open

log = logging.getLogger(__name__)
#: Lifetimes added to the index per step on the event loop (about a millisecond each).
APPLY_BATCH = 2000


def parse_lines(data: bytes) -> list[Lifetime]:
    """The lifetimes of `finished.jsonl` lines, skipping those that do not parse (as `UsageStore.finished`)."""
    out = []
    for line in data.split(b"\n"):
        try:
            out.append(Lifetime.from_json(json.loads(line)))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
    return out


def _day(t: datetime) -> int:
    return t.toordinal()


@dataclass
class LifetimeIndex:
    """Finished lifetimes, the first line of a uid winning (as `UsageStore.finished`), indexed by user and by
    the day they ended."""

    uids: set[str] = field(default_factory=set)
    by_user: dict[str, list[Lifetime]] = field(default_factory=dict)
    by_day: dict[int, list[Lifetime]] = field(default_factory=dict)

    def add(self, lifetimes: Iterable[Lifetime]) -> None:
        for lt in lifetimes:
            if lt.uid in self.uids or lt.end is None:
                continue
            self.uids.add(lt.uid)
            self.by_user.setdefault(lt.user, []).append(lt)
            self.by_day.setdefault(_day(lt.end), []).append(lt)

    def __len__(self) -> int:
        return len(self.uids)

    def of_user(self, user: str) -> list[Lifetime]:
        return self.by_user.get(user, [])

    def ended_since(self, since: datetime, until: datetime) -> list[Lifetime]:
        """Every lifetime that ended at or after `since` (the only ones holding anything in the range)."""
        out: list[Lifetime] = []
        for day in range(_day(since), _day(until) + 1):
            out += [lt for lt in self.by_day.get(day, ()) if lt.end >= since]
        return out


@dataclass
class _Read:
    """What one refresh found, built in a thread (nothing shared is touched there)."""

    index: LifetimeIndex | None = None  # a whole new index (first read, or the file was replaced)
    tail: list[Lifetime] = field(default_factory=list)  # lines appended since the last read
    open_: list[Lifetime] | None = None  # open.json changed: its lifetimes


class LiveStore:
    """The store as many views read it (see the module's docstring); `refresh()` before each view."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = Path(directory)
        self.index = LifetimeIndex()
        self.open_by_user: dict[str, list[Lifetime]] = {}
        self._file = None  # finished.jsonl, open: its inode stays ours until we let go
        self._offset = 0  # bytes of complete lines read
        self._open_stamp: tuple | None = None
        self._pending: asyncio.Future | None = None
        self._loaded = False
        self.wait_s = 0.5

    async def refresh(self) -> None:
        """Bring the index up to the files: one refresh at a time, the parsing in a thread, the new lines
        added on the loop in batches. A view waits for it at most `wait_s` once something was loaded (a
        whole re-read after a prune takes seconds at 200 k lifetimes: views keep the old index meanwhile)."""
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._refresh())
        task = self._pending
        if self._loaded:
            await asyncio.wait([task], timeout=self.wait_s)
        else:
            await asyncio.shield(task)

    async def _refresh(self) -> None:
        try:
            read = await asyncio.get_running_loop().run_in_executor(None, self._read)
            for i in range(0, len(read.tail), APPLY_BATCH):
                self._apply(_Read(tail=read.tail[i:i + APPLY_BATCH]))
                await asyncio.sleep(0)
            self._apply(_Read(index=read.index, open_=read.open_))
            self._loaded = True
        except Exception:  # an unreadable store: the views keep what they had, the next one tries again
            log.exception("reading the usage store %s failed", self.dir)
            self.close()
        finally:
            self._pending = None

    def refresh_now(self) -> None:
        """The same in the caller's thread, for an owner that reads the index in that thread only."""
        self._apply(self._read())

    def _apply(self, read: _Read) -> None:
        if read.index is not None:
            self.index = read.index
        self.index.add(read.tail)
        if read.open_ is not None:
            by_user: dict[str, list[Lifetime]] = {}
            for lt in read.open_:
                by_user.setdefault(lt.user, []).append(lt)
            self.open_by_user = by_user

    def lifetimes(self, user: str | None, since: datetime, until: datetime) -> list[Lifetime]:
        """`user`'s lifetimes (every one of theirs), or for None everyone's that may hold anything in
        [since, until]; a running one once, even while the collector still lists it after it finished."""
        finished = self.index.of_user(user) if user is not None else self.index.ended_since(since, until)
        opened = self.open_by_user.get(user, []) if user is not None else \
            [lt for lts in self.open_by_user.values() for lt in lts]
        return [*finished, *(lt for lt in opened if lt.uid not in self.index.uids)]

    # ------------------------------------------------------------------ in the refresh thread

    def _read(self) -> _Read:
        out = _Read()
        path = self.dir / "finished.jsonl"
        try:
            now = os.stat(path)
        except OSError:
            now = None
        if self._file is not None:
            held = os.fstat(self._file.fileno())
            if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino) or now.st_size < self._offset:
                self._file.close()  # replaced (pruned) or truncated: read the new one whole
                self._file, self._offset, out.index = None, 0, LifetimeIndex()
        if self._file is None and now is not None:
            try:
                self._file, self._offset = open(path, "rb"), 0
            except OSError:
                self._file = None
            if self._file is not None:
                out.index = LifetimeIndex()
        if self._file is not None:
            self._file.seek(self._offset)
            data = self._file.read()
            complete = data.rfind(b"\n") + 1  # a torn last line waits for its newline
            self._offset += complete
            found = parse_lines(data[:complete])
            if out.index is not None:
                out.index.add(found)
            else:
                out.tail = found
        out.open_ = self._read_open()
        return out

    def _read_open(self) -> list[Lifetime] | None:
        try:
            st = os.stat(self.dir / "open.json")
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp == self._open_stamp:
            return None
        self._open_stamp = stamp
        if stamp is None:
            return []
        return list(load_open(self.dir / "open.json")[0].values())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
