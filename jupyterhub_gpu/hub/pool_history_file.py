"""A full pool's wait history kept across hub restarts: `PoolHistory`'s bindings in a small JSON file.

Why a file and not a rebuild: the pods whose bindings made the history are mostly gone by the time the hub
restarts (a stopped or culled server's pod is deleted, and Kueue's Workload for it with it), so neither the
pod relist nor the Workloads hold them any more; the hub's own folder (z2jh: /srv/jupyterhub, the hub-db
volume beside jupyterhub.sqlite) survives the restart. The file is written at most every `SAVE_EVERY_S`
seconds after a change (off the event loop, fsynced, then renamed: a crash or power loss leaves the old file
whole), read once when the pod watch starts (in a thread: the size checked first, then parsed off the event
loop), and merged with what the relist adds. Bounded like the history itself; a damaged or
foreign file is ignored (the history starts empty, as before) with one warning. Beside the bindings it keeps
each GPU pool's last measured times to add a node (`node_adds`, `node_add_times.py`): a file written without
them loads as before, and an older hub reading a newer file skips the key it does not know.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from jupyterhub_gpu.cluster.times import parse_time
from jupyterhub_gpu.hub.node_add_times import valid_samples
from jupyterhub_gpu.hub.pool_wait_estimate import MAX_HISTORY, PoolHistory
from jupyterhub_gpu.model.wait_estimate import Admission

log = logging.getLogger("gpuhub.hub")

VERSION = 1
#: At most this many (pool, resource) histories are read: more than any profiles file has pools.
MAX_KEYS = 256
#: A bigger file is not ours (MAX_KEYS x MAX_HISTORY entries of ~120 bytes would be ~30 MiB; real ones are small).
MAX_FILE_BYTES = 32 * 2**20
SAVE_EVERY_S = 60.0


def dump(history: PoolHistory) -> bytes:
    """The history as the file holds it: per (pool, resource), its bindings in the order they were seen."""
    pools = [{"pool": pool, "resource": resource,
              "bindings": [[uid, a.created.isoformat(), a.admitted.isoformat()] for uid, a in hist.items()]}
             for (pool, resource), hist in history.history.items()]
    node_adds = [{"pool": pool, "seconds": seconds} for pool, seconds in history.node_adds.samples.items() if seconds]
    return json.dumps({"version": VERSION, "pools": pools, "node_adds": node_adds}, separators=(",", ":")).encode()


def _text(value: Any, limit: int = 253) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


class Parsed(dict):
    """(pool, resource) -> its bindings (OrderedDict uid -> Admission); `node_adds`: pool -> its measured
    times to add a node (`node_add_times`; a file written before them has none: it loads as before)."""

    node_adds: dict[str, list[float]]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.node_adds = {}


def parse(data: bytes) -> Parsed:
    """The file's bindings per (pool, resource), at most MAX_HISTORY each (the newest), pure: runs off the loop.
    ValueError for a file that is not this format; entries that do not read as bindings (a bad time
    included) are skipped, the rest kept."""
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{len(data)} bytes, over the {MAX_FILE_BYTES} a history file can be")
    doc = json.loads(data)  # ValueError (JSONDecodeError, UnicodeDecodeError) when it is not JSON
    if not isinstance(doc, dict) or doc.get("version") != VERSION or not isinstance(doc.get("pools"), list):
        raise ValueError("not a version-1 pool history")
    parsed = Parsed()
    for entry in doc["pools"][:MAX_KEYS]:
        key = (_text(entry.get("pool")), _text(entry.get("resource"))) if isinstance(entry, dict) else (None, None)
        bindings = entry.get("bindings") if isinstance(entry, dict) else None
        if None in key or not isinstance(bindings, list):
            continue
        hist = parsed.setdefault(key, OrderedDict())
        for b in bindings[-MAX_HISTORY:]:
            if not (isinstance(b, list) and len(b) == 3 and (uid := _text(b[0], 300)) and uid not in hist):
                continue
            try:
                created, admitted = (parse_time(t) if _text(t, 64) else None for t in b[1:])
            except (ValueError, OverflowError):
                continue  # one bad time: that binding only
            if created and admitted:
                hist[uid] = Admission(created, admitted)
        if not hist:
            del parsed[key]
    entries = doc.get("node_adds")
    for entry in (entries if isinstance(entries, list) else [])[:MAX_KEYS]:
        pool = _text(entry.get("pool")) if isinstance(entry, dict) else None
        if pool and (seconds := valid_samples(entry.get("seconds"))):
            parsed.node_adds[pool] = seconds
    return parsed


def merge(history: PoolHistory, parsed: Parsed) -> int:
    """Merge parsed bindings into `history` (those it has already win); returns how many were added. Cheap
    enough for the loop: a (pool, resource) the history does not have yet is taken whole."""
    added = 0
    for key, got in parsed.items():
        hist = history.history.get(key)
        if hist is None:
            history.history[key] = got
            added += len(got)
            continue
        for uid, a in got.items():
            if uid not in hist:
                hist[uid] = a
                added += 1
        while len(hist) > MAX_HISTORY:
            del hist[next(iter(hist))]
    history.node_adds.merge(getattr(parsed, "node_adds", {}))
    return added


def load_into(history: PoolHistory, data: bytes) -> int:
    """parse + merge: the file's bindings into `history`; returns how many were added (ValueError as parse)."""
    return merge(history, parse(data))


def read(path: Path) -> Parsed:
    """The file at `path`, parsed (blocking: run it off the loop). Its size is checked before it is read: a
    file over MAX_FILE_BYTES is refused unread (and at most MAX_FILE_BYTES + 1 bytes are ever read)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_FILE_BYTES:
            raise ValueError(f"{size} bytes, over the {MAX_FILE_BYTES} a history file can be")
        return parse(f.read(MAX_FILE_BYTES + 1))


class HistoryFile:
    """`PoolHistory`'s file: `attach` reads it into the history and saves it after each new binding."""

    def __init__(self, path: str | os.PathLike, every: float = SAVE_EVERY_S):
        self.path, self.every = Path(path), every
        self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def attach(self, history: PoolHistory) -> PoolHistory:
        """Read the file into `history` here (blocking: a script, a test) and save it after each change."""
        return self._attached(history, self._read())

    async def load(self, history: PoolHistory) -> PoolHistory:
        """`attach` for the hub: the file is read and parsed in a thread, the event loop keeps running."""
        return self._attached(history, await asyncio.to_thread(self._read))

    def _read(self) -> Parsed | None:
        try:
            return read(self.path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            log.warning("pool wait history: %s is unreadable (%s); starting without it", self.path, e)
            return None

    def _attached(self, history: PoolHistory, parsed: Parsed | None) -> PoolHistory:
        if parsed is not None:
            added = merge(history, parsed)
            log.info("pool wait history: %d binding(s) and %d pool(s)' times to add a node read back from %s",
                     added, len(getattr(parsed, "node_adds", {})), self.path)
        history.on_change = lambda: self.changed(history)
        return history

    def changed(self, history: PoolHistory) -> None:
        """A binding was added: save within `every` seconds of the last save (one save in flight at most)."""
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a script, a test): now
            self.save(dump(history))
            return
        self._timer = loop.call_later(max(0.0, self.every - (time.monotonic() - self._last)), self._flush, history)

    def _flush(self, history: PoolHistory) -> None:
        self._timer, self._last = None, time.monotonic()
        asyncio.get_running_loop().run_in_executor(None, self.save, dump(history))

    def save(self, data: bytes) -> None:
        """Write by a rename (the old file stays whole until the new one is complete)."""
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())  # on disk before the rename: a power loss leaves the old file or the new
            os.replace(tmp, self.path)
        except OSError as e:
            log.warning("pool wait history: could not save %s (%s); kept in memory", self.path, e)
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
