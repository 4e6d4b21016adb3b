"""Right-sizing hints on the picker's cards: the logged-in user's own hint (the usage service's `Hint`) for
each profile, e.g. "Your last 10 sessions here peaked at 7 GB, 12 % — “A100 MIG 1g.10gb” would do, $2.10/h
cheaper". Nothing without enough data, and never a reason for the picker to fail.

The hints need the usage store (lifetimes of past pods) and DCGM use from Prometheus: both blocking reads,
so they run in a thread, one at a time. Prometheus' answer (every pod's use over the window, a failure
included) is read once per `ttl`; the store is asked for the logged-in user's rows of the window only (one
index range query, store.query), and each user's hints are cached as well (at most `size` users), so a
render never reads the whole store, and a user without past sessions never makes Prometheus be asked.
"""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable, Protocol

from cachetools import TTLCache

from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.services.usage import accounting as acc
from jupyterhub_gpu.services.usage.rightsize import hints

log = logging.getLogger(__name__)
#: The DCGM exporter's scrape interval, seconds (the usage page's default too).
SCRAPE_INTERVAL = 30.0


class Source(Protocol):
    """The two blocking reads: a user's stored lifetimes of [since, until], and DCGM use per pod."""

    def lifetimes(self, user: str, since: datetime, until: datetime) -> list[acc.Lifetime]: ...

    def used(self, since: datetime, until: datetime) -> dict[tuple[str, str], acc.PodUse]: ...


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


class StoreAndPrometheus:
    """The hub's source: the usage store read only (never creating the folder) and Prometheus."""

    def __init__(self, store_dir: str, prometheus_url: str, scrape_interval: float) -> None:
        from jupyterhub_gpu.services.usage.live import UsageReader

        self.reader, self.url, self.scrape_interval = UsageReader(store_dir), prometheus_url, scrape_interval

    def lifetimes(self, user: str, since: datetime, until: datetime) -> list[acc.Lifetime]:
        return self.reader.lifetimes(user, since, until)

    def used(self, since: datetime, until: datetime) -> dict[tuple[str, str], acc.PodUse]:
        from jupyterhub_gpu.services.usage import collect

        return collect.used_from_prometheus(self.url, since, until, self.scrape_interval)


class PickerHints:
    """The hints as every picker render shares them (see the module's docstring)."""

    def __init__(self, cfg: Callable[[], ProfilesConfig], source: Source, window: timedelta = timedelta(days=30),
                 ttl: float = 300.0, size: int = 1024, clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
        self.cfg, self.source, self.window, self.now = cfg, source, window, now
        self.snapshot: TTLCache = TTLCache(1, ttl, timer=clock)  # Prometheus' answer and its window
        self.users: TTLCache = TTLCache(size, ttl, timer=clock)
        self._lock = asyncio.Lock()

    async def for_user(self, user: str, allowed: set[str] | None = None) -> dict[str, str]:
        found = self.users.get(user)
        if found is not None:
            return found
        async with self._lock:  # renders waiting here take what the first one read
            if user not in self.users:
                self.users[user] = await self._hints(user, allowed)
            return self.users[user]

    async def _hints(self, user: str, allowed: set[str] | None) -> dict[str, str]:
        loop = asyncio.get_running_loop()
        snap = self.snapshot.get("all")
        until = snap[2] if snap else self.now()
        since = until - self.window
        try:
            mine = await loop.run_in_executor(None, self.source.lifetimes, user, since, until)
        except Exception as e:  # store unreadable: no hints for this user until ttl passes
            log.warning("right-sizing hints for the picker unavailable: %s: %s", type(e).__name__, e)
            return {}
        if not mine:
            return {}  # nothing to size: Prometheus is not asked
        if snap is None:
            try:
                snap = (True, await loop.run_in_executor(None, self.source.used, since, until), until)
            except Exception as e:  # Prometheus down: no hints until ttl passes, not a read per render
                log.warning("right-sizing hints for the picker unavailable: %s: %s", type(e).__name__, e)
                snap = (False, e, until)
            self.snapshot["all"] = snap
        if not snap[0]:
            return {}
        try:
            return picker_hints(mine, snap[1], self.cfg(), user, since, until, allowed)
        except Exception as e:  # a profiles file changed under the snapshot: no hint, not a broken picker
            log.warning("right-sizing hints for %s failed: %s: %s", user, type(e).__name__, e)
            return {}
