"""What the accounting keeps across restarts: the lifetimes of pods that are gone.

KubeSpawner deletes a server's pod when it stops and Jobs' pods go with their Job's TTL, so the cluster
forgets past usage; Prometheus keeps DCGM samples but not who held which GPU for how long. Two files:

- `finished.jsonl`: one line per finished lifetime, only ever appended (a crash loses at most the line
  being written; a torn last line is skipped on read; duplicates by uid are read once). JSON lines rather
  than SQLite: one writer, append-only, greppable, no schema migrations, and `gpuhub report` reads it
  with nothing but the standard library.
- `open.json`: the lifetimes still running at the last cycle, replaced atomically each cycle, so a pod that
  ends while the collector is down is closed at its last-seen time instead of being lost.

Retention: `prune()` rewrites `finished.jsonl` without the lifetimes that ended before a cutoff (atomically,
by the collector, the only writer), so the file and every read of it stay bounded.
"""
from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Iterable

from gpu_spawner.cluster.times import parse_time
from gpu_spawner.services.usage.accounting import Lifetime


class UsageStore:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.finished_path = self.dir / "finished.jsonl"
        self.open_path = self.dir / "open.json"

    def append_finished(self, lifetimes: Iterable[Lifetime]) -> None:
        lines = "".join(json.dumps(lt.to_json(), sort_keys=True) + "\n" for lt in lifetimes)
        if lines:
            with self.finished_path.open("a", encoding="utf-8") as f:
                f.write(lines)
                f.flush()
                os.fsync(f.fileno())

    def finished(self) -> list[Lifetime]:
        """Every finished lifetime once (by uid), skipping lines that do not parse."""
        out: dict[str, Lifetime] = {}
        if not self.finished_path.exists():
            return []
        for line in self.finished_path.read_text(encoding="utf-8").splitlines():
            try:
                lt = Lifetime.from_json(json.loads(line))
            except (ValueError, TypeError, KeyError):
                continue
            out.setdefault(lt.uid, lt)
        return list(out.values())

    def prune(self, before: datetime) -> int:
        """Drop finished lifetimes that ended before `before` (and lines that do not parse); how many went."""
        if not self.finished_path.exists():
            return 0
        kept, dropped = [], 0
        for line in self.finished_path.read_text(encoding="utf-8").splitlines():
            try:
                end = Lifetime.from_json(json.loads(line)).end
            except (ValueError, TypeError, KeyError):
                end = None
            if end is None or end < before:
                dropped += 1
            else:
                kept.append(line + "\n")
        if dropped:
            self._replace(self.finished_path, "".join(kept), ".finished-")
        return dropped

    def _replace(self, path: Path, body: str, prefix: str) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=prefix)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def save_open(self, lifetimes: dict[str, Lifetime], seen: datetime) -> None:
        body = json.dumps({"seen": seen.isoformat(), "open": [lt.to_json() for lt in lifetimes.values()]})
        self._replace(self.open_path, body, ".open-")

    def load_open(self) -> tuple[dict[str, Lifetime], datetime | None]:
        return load_open(self.open_path)


def load_open(path: Path) -> tuple[dict[str, Lifetime], datetime | None]:
    """`open.json`: the lifetimes running at the last cycle and when it was; nothing when unreadable."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
        lts = [Lifetime.from_json(x) for x in d["open"]]
        return {lt.uid: lt for lt in lts}, parse_time(d.get("seen"))
    except (OSError, ValueError, TypeError, KeyError):
        return {}, None
