"""Right-sizing hints on the picker's cards: the logged-in user's own hint (the usage service's `Hint`) for
each profile, e.g. "Your last 10 sessions here peaked at 7 GB, 12 % — “A100 MIG 1g.10gb” would do, $2.10/h
cheaper". Nothing without enough data, and never a reason for the picker to fail.

The hints need the usage store (lifetimes of past pods) and DCGM use from Prometheus: both blocking reads,
so they run in a thread, one at a time, and their answer (a failure included) is reused for `ttl` seconds;
each user's hints are cached as well (at most `size` users), so a page render never reads a file. The store
stays parsed between reads (`LiveStore`) and the snapshot is grouped per user in the thread, so
a render costs that user's rows, never the whole store's.
"""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Iterable

from cachetools import TTLCache

from gpu_spawner.model.profiles import ProfilesConfig
from gpu_spawner.services.usage import accounting as acc
from gpu_spawner.services.usage.rightsize import hints

log = logging.getLogger(__name__)
#: The DCGM exporter's scrape interval, seconds (the usage page's default too).
SCRAPE_INTERVAL = 30.0
#: (lifetimes, DCGM use per pod) over [since, until]: the blocking read.
Reader = Callable[[datetime, datetime], tuple[list[acc.Lifetime], dict[tuple[str, str], acc.PodUse]]]


def picker_hints(lifetimes: Iterable[acc.Lifetime], used: dict[tuple[str, str], acc.PodUse], cfg: ProfilesConfig,
                 user: str, since: datetime, until: datetime, allowed: set[str] | None = None) -> dict[str, str]:
    """Profile slug → the card's line for `user`, from that user's own lifetimes only (pure); `allowed`: the
    slugs on this user's picker (a suggestion they may not choose is not shown)."""
    mine = [lt for lt in lifetimes if lt.user == user]
    costs = {slug: r.hourly_cost for slug, r in acc.rules_and_teams(cfg)[0].items()}
    names = {p.slug: p.display_name for p in cfg.profiles}
    out = {}
    for h in hints(mine, used, cfg, costs, since, until):
        if h.user == user and h.profile in names and (allowed is None or h.suggestion in allowed):
            out[h.profile] = (f"Your last {h.sessions} sessions here peaked at {h.peak_memory_gb:.0f} GB, "
                              f"{h.peak_activity_pct:.0f} % — “{names.get(h.suggestion, h.suggestion)}” would do, "
                              f"${h.saving_per_hour:.2f}/h cheaper")
    return out


def read_store_and_prometheus(store_dir: str, prometheus_url: str, scrape_interval: float) -> Reader:
    """The hub's reader: the usage store's lifetimes in the range (never creating the folder; kept parsed
    between reads, so a read parses only what the collector appended) and Prometheus's DCGM use."""
    from gpu_spawner.services.usage import collect
    from gpu_spawner.services.usage.live import LiveStore

    live = LiveStore(store_dir)  # read in the reader's thread only (PickerHints: one read at a time)

    def read(since: datetime, until: datetime):
        if not Path(store_dir).is_dir():
            return [], {}
        live.refresh_now()
        lifetimes = live.lifetimes(None, since, until)
        if not lifetimes:
            return [], {}
        return lifetimes, collect.used_from_prometheus(prometheus_url, since, until, scrape_interval)

    return read


def by_user(lifetimes: Iterable[acc.Lifetime]) -> dict[str, list[acc.Lifetime]]:
    """Lifetimes per user: a render then reads only the logged-in user's rows."""
    out: dict[str, list[acc.Lifetime]] = {}
    for lt in lifetimes:
        out.setdefault(lt.user, []).append(lt)
    return out


class PickerHints:
    """The hints as every picker render shares them (see the module's docstring)."""

    def __init__(self, cfg: Callable[[], ProfilesConfig], read: Reader, window: timedelta = timedelta(days=30),
                 ttl: float = 300.0, size: int = 1024, clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
        self.cfg, self.read, self.window, self.now = cfg, read, window, now
        self.snapshot: TTLCache = TTLCache(1, ttl, timer=clock)
        self.users: TTLCache = TTLCache(size, ttl, timer=clock)
        self._lock = asyncio.Lock()

    async def for_user(self, user: str, allowed: set[str] | None = None) -> dict[str, str]:
        found = self.users.get(user)
        if found is not None:
            return found
        async with self._lock:  # renders waiting here take the snapshot the first one read
            if user not in self.users:
                snap = self.snapshot.get("all")
                if snap is None:
                    until = self.now()
                    since = until - self.window
                    try:
                        per_user, used = await asyncio.get_running_loop().run_in_executor(
                            None, self._read_per_user, since, until)
                    except Exception as e:  # store unreadable, Prometheus down: no hints until ttl passes
                        log.warning("right-sizing hints for the picker unavailable: %s: %s", type(e).__name__, e)
                        per_user, used = {}, {}
                    snap = self.snapshot["all"] = (per_user, used, since, until)
                per_user, used, since, until = snap
                try:
                    self.users[user] = picker_hints(per_user.get(user, []), used, self.cfg(), user, since, until,
                                                    allowed)
                except Exception as e:  # a profiles file changed under the snapshot: no hint, not a broken picker
                    log.warning("right-sizing hints for %s failed: %s: %s", user, type(e).__name__, e)
                    self.users[user] = {}
            return self.users[user]

    def _read_per_user(self, since: datetime, until: datetime):
        """The read and its grouping per user, both in the reader's thread."""
        lifetimes, used = self.read(since, until)
        return by_user(lifetimes), used
