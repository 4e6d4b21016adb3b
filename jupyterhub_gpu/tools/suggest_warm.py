"""A suggested warm schedule per pool from the usage history: what `gpuhub report PROFILES --store DIR
--suggest-warm` prints (docs/admin-guide.md).

From the servers' starts per pool, weekday and hour (the pool's `time_zone`), averaged over the weeks the history
covers: the hours whose mean starts reach `--min-starts` become one window per weekday (from `--lead` minutes
before the first such hour to the end of the last), weekdays with the same window joined. For each pool it says
what the schedule costs (node-hours a week kept warm, an upper bound: some would run anyway) and what it saves
(the share of starts that fall in a window, which find a node ready instead of waiting for one when the pool
is at zero), so an admin adopts it knowingly. Pure: `gpuhub report` reads the store.
"""
from __future__ import annotations

import zoneinfo
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.model.warm_schedule import DAYS, gaps

#: Most weeks of history read (older habits are not this term's).
MAX_WEEKS = 26


@dataclass(frozen=True)
class Suggestion:
    pool: str
    windows: list[dict[str, object]]  # as the profiles file's `warm`
    starts: int  # server starts of the pool in the history
    covered: int  # of them, inside a window
    node_hours_per_week: float
    weeks: float
    every_hour: bool = False  # busy all week: min_nodes, not a schedule (validate refuses a constant warm week)

    def yaml(self) -> str:
        items = ", ".join("{days: %s, from: \"%s\", to: \"%s\", nodes: 1}" % (w["days"], w["from"], w["to"])
                          for w in self.windows)
        return f"warm: [{items}]"


def _clear_of_gaps(zone: str, a: int, b: int, day: int) -> tuple[int, int]:
    """A window's edges moved out of the local times the zone skips on that weekday (validate refuses them: the
    CronJob would not run that day): to the first time after the skipped hour (24:00 before a skipped midnight:
    23:45)."""
    def skipped(t: int, weekday: int) -> tuple | None:
        return next((g for g in gaps(zone) if g[0].weekday() == weekday and g[1] <= t < g[2]), None)

    if g := skipped(a, day):
        a = g[2]
    if b == 1440:
        b = 1425 if skipped(0, (day + 1) % 7) else b
    elif g := skipped(b, day):
        b = g[2]
    return a, max(b, min(1440, a + 60))


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def suggest(cfg: ProfilesConfig, starts: list[tuple[str, datetime]], weeks: float, min_starts: float = 0.5,
            lead_min: int = 15) -> list[Suggestion]:
    """`starts`: (profile slug, aware start time) of servers; `weeks` the history covers (> 0). One suggestion per
    autoscaled GPU pool at min_nodes 0 with starts; pools without an hour reaching `min_starts` get no window."""
    weeks = max(weeks, 1e-9)
    by_pool: dict[str, list[tuple[int, int]]] = {}
    for slug, when in starts:
        prof = cfg.by_slug.get(slug)
        pool = cfg.pools.get(prof.pool) if prof and prof.pool else None
        if pool is None or not pool.is_gpu or not pool.max_nodes or pool.min_nodes:
            continue
        local = when.astimezone(zoneinfo.ZoneInfo(pool.time_zone))
        by_pool.setdefault(prof.pool, []).append((local.weekday(), local.hour))
    out = []
    for name, seen in by_pool.items():
        count = Counter(seen)
        per_day: dict[tuple[int, int], list[int]] = {}
        for day in range(7):
            hot = [h for h in range(24) if count[(day, h)] / weeks >= min_starts]
            if hot:
                edges = _clear_of_gaps(cfg.pools[name].time_zone, max(0, hot[0] * 60 - lead_min),
                                       (hot[-1] + 1) * 60, day)
                per_day.setdefault(edges, []).append(day)
        if list(per_day) == [(0, 1440)] and len(per_day[(0, 1440)]) == 7:
            out.append(Suggestion(name, [], len(seen), len(seen), 7 * 24.0, round(weeks, 1), every_hour=True))
            continue
        windows, covered, minutes = [], 0, 0
        for (a, b), days in sorted(per_day.items(), key=lambda kv: kv[1][0]):
            windows.append({"days": ",".join(DAYS[d] for d in days), "from": _hhmm(a), "to": _hhmm(b), "nodes": 1})
            minutes += (b - a) * len(days)
            covered += sum(n for (d, h), n in count.items() if d in days and a <= h * 60 < b)
        out.append(Suggestion(name, windows, len(seen), covered, round(minutes / 60, 2), round(weeks, 1)))
    return sorted(out, key=lambda s: s.pool)


def text(suggestions: list[Suggestion], node_add_s: float | None = None) -> str:
    """What the admin reads: per pool the schedule to paste, its cost and what it saves."""
    if not suggestions:
        return "No autoscaled GPU pool at min_nodes 0 has server starts in the history: nothing to suggest.\n"
    wait = f"~{round(node_add_s / 60)} min" if node_add_s else "the time to add a node"
    lines = []
    for s in suggestions:
        if s.every_hour:
            lines.append(f"{s.pool}: {s.starts} starts in {s.weeks} weeks, every hour of the week busy enough: set "
                         "min_nodes: 1 instead of a warm schedule.")
            continue
        if not s.windows:
            lines.append(f"{s.pool}: {s.starts} starts in {s.weeks} weeks, no hour busy enough: stay at zero.")
            continue
        share = s.covered / s.starts if s.starts else 0
        lines += [f"{s.pool}:", f"  {s.yaml()}",
                  f"  costs up to {s.node_hours_per_week} node-hours a week (a node kept ready; less where it would "
                  f"run anyway); {s.covered} of {s.starts} starts ({share:.0%}) fall in a window and find a node "
                  f"ready, the other {s.starts - s.covered} wait {wait} when the pool is at zero."]
    return "\n".join(lines) + "\n"
