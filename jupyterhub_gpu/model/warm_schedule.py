"""Warm capacity by schedule (pure): a pool keeps `nodes` ready in working hours so the first server of the day
does not wait for a node, and scales to zero (or `min_nodes`) the rest of the week.

    warm: [{days: Mon-Fri, from: "08:30", to: "18:00", nodes: 1}]    # in the pool's `time_zone`

The schedule is a step function over the week: the autoscaler's minimum is `max(min_nodes, warm nodes)`.
On AKS it is applied by changing the node pool's `--min-count` at each step (builders/warm_capacity.py renders
the CronJobs and the exact commands); AKS's cluster autoscaler enforces a raised minimum by adding nodes (AKS
release 2021-07-22), and removes nodes above a lowered one once they are unneeded. The day replay's autoscaler
model (devcluster/jupyterhub_gpu_dev/replay/autoscaler.py) follows the same step function.
"""
from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from functools import lru_cache
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
WEEK_MIN = 7 * 24 * 60
_HHMM = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])|24:00")
#: Most windows per pool, most nodes per window: a schedule is a few lines, not a data file.
MAX_WINDOWS = 28
MAX_ZONE_LEN = 64


def parse_days(value: Any) -> str:
    """`Mon-Fri`, `Sat,Sun`, `Mon,Wed-Fri` (a range may wrap: `Fri-Mon`), or a list of those; normalised to
    the days' names joined by commas, in week order."""
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        value = ",".join(value)
    if not isinstance(value, str) or not value.strip() or len(value) > 64:
        raise ValueError(f"{value!r} is not a list of days; write e.g. Mon-Fri, Sat,Sun or Mon,Wed-Fri")
    out: set[int] = set()
    for part in value.split(","):
        ends = [p.strip().capitalize() for p in part.split("-")]
        bad = next((e for e in ends if e not in DAYS), None)
        if len(ends) > 2 or bad is not None:
            what = f"{bad!r} is not a day" if bad is not None else "is not a day or a range of two days"
            raise ValueError(f"{part.strip()!r}: {what}; days: {', '.join(DAYS)} (e.g. Mon-Fri)")
        a, b = DAYS.index(ends[0]), DAYS.index(ends[-1])
        out.update((a + i) % 7 for i in range((b - a) % 7 + 1))
    return ",".join(DAYS[d] for d in sorted(out))


def parse_hhmm(value: Any) -> str:
    """A time of day as quoted `HH:MM` (00:00–23:59, and 24:00 for the end of a day)."""
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError(f"{value!r}: write times as quoted \"HH:MM\" (YAML reads an unquoted 18:00 as the "
                         "number 1080 and 8:30 as 510)")
    if not isinstance(value, str) or not _HHMM.fullmatch(value):
        raise ValueError(f"{value!r} is not a time of day; write \"HH:MM\", 00:00 to 24:00 (e.g. \"08:30\")")
    return value


def zone_name(value: Any) -> str:
    """An IANA time zone (`Europe/Berlin`, `UTC`), as zoneinfo (and a CronJob's `timeZone`) knows it."""
    if not isinstance(value, str) or not value or len(value) > MAX_ZONE_LEN:
        raise ValueError(f"{value!r} is not a time zone; write an IANA name such as Europe/Berlin or UTC")
    if value.startswith(("posix/", "right/")) or value in _NOT_ZONES:
        raise ValueError(f"{value!r} is a file of this machine's time zone database, not an IANA zone a CronJob's "
                         "timeZone takes; write the zone's own name, e.g. Europe/Berlin or UTC")
    if value not in _zones():  # exact: a case-insensitive file system would open europe/berlin too
        near = next((z for z in sorted(_zones()) if z.lower() == value.lower()), None)
        hint = f"did you mean {near}?" if near else "write e.g. Europe/Berlin, America/New_York or UTC"
        raise ValueError(f"{value!r} is not a known IANA time zone; {hint}")
    return value


#: Names the zoneinfo directory holds that are not zones the apiserver's CronJob `timeZone` should get.
_NOT_ZONES = frozenset({"localtime", "Factory", "posixrules", "leapseconds", "tzdata.zi"})


@lru_cache(maxsize=1)
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


Days = Annotated[str, BeforeValidator(parse_days)]
TimeOfDay = Annotated[str, BeforeValidator(parse_hhmm)]
ZoneName = Annotated[str, BeforeValidator(zone_name)]


def minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


class WarmWindow(BaseModel):
    """Nodes a pool keeps ready on some days between two times (the pool's `time_zone`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    days: Days = Field(description="Days it applies: `Mon-Fri`, `Sat,Sun`, `Mon,Wed-Fri` (a range may wrap, "
                                   "`Fri-Mon`).")
    start: TimeOfDay = Field(alias="from", description="From `\"HH:MM\"` (quoted: YAML reads an unquoted 18:00 as "
                                                       "a number), in the pool's `time_zone`.")
    end: TimeOfDay = Field(alias="to", description="Until `\"HH:MM\"`, after `from` (`\"24:00\"`: midnight); a "
                                                   "window across midnight is two windows.")
    nodes: int = Field(ge=1, le=1000, description="Nodes kept ready meanwhile (the autoscaler's minimum: "
                                                  "at most `max_nodes`, more than `min_nodes`).")

    @model_validator(mode="after")
    def _order(self) -> "WarmWindow":
        if minutes(self.end) <= minutes(self.start):
            raise ValueError(f"to {self.end!r} is not after from {self.start!r}; a window across midnight is two "
                             f"windows (from {self.start!r} to \"24:00\", and from \"00:00\" the next day)")
        return self

    @property
    def weekdays(self) -> list[int]:
        return [DAYS.index(d) for d in self.days.split(",")]

    def spans(self) -> list[tuple[int, int]]:
        """[from, to) in minutes of the week (Monday 00:00 = 0), one per day."""
        return [(d * 1440 + minutes(self.start), d * 1440 + minutes(self.end)) for d in self.weekdays]


# ---------------------------------------------------------------------------------------------- rules
class Pool(Protocol):
    """What these rules read of a `profiles.Pool` (which imports this module, so it cannot be imported here)."""

    min_nodes: int
    max_nodes: int | None
    time_zone: str
    warm: list[WarmWindow]


@dataclass(frozen=True)
class WarmProblem:
    at: str
    message: str


def pool_problems(name: str, pool: Pool) -> list[WarmProblem]:
    """Warm nodes need an autoscaled pool, at most `max_nodes`, more than `min_nodes`; windows must not overlap."""
    at = f"pools.{name}.warm"
    out: list[WarmProblem] = []
    if not pool.warm:
        return out
    if len(pool.warm) > MAX_WINDOWS:  # the field's max_length refuses it first; the pairwise checks below are O(n²)
        return [WarmProblem(at, f"{len(pool.warm)} windows: at most {MAX_WINDOWS}")]
    if not pool.max_nodes:
        out.append(WarmProblem(at, "a warm schedule changes the autoscaler's minimum, so the pool needs max_nodes "
                                   "(an autoscaled pool); set max_nodes or remove warm"))
    for i, w in enumerate(pool.warm):
        if pool.max_nodes and w.nodes > pool.max_nodes:
            out.append(WarmProblem(f"{at}[{i}].nodes", f"{w.nodes} is above max_nodes {pool.max_nodes}; valid: "
                                                       f"{pool.min_nodes + 1}..{pool.max_nodes}"))
        elif w.nodes <= pool.min_nodes:
            out.append(WarmProblem(f"{at}[{i}].nodes", f"{w.nodes} is not above min_nodes {pool.min_nodes}: the pool "
                                                       "keeps that many all week anyway; raise nodes or remove the "
                                                       "window"))
    for i, a in enumerate(pool.warm):
        for j in range(i + 1, len(pool.warm)):
            b = pool.warm[j]
            both = [DAYS[d] for d in a.weekdays if d in b.weekdays]
            if both and minutes(a.start) < minutes(b.end) and minutes(b.start) < minutes(a.end):
                out.append(WarmProblem(f"{at}[{j}]", f"{b.start}–{b.end} overlaps warm[{i}] ({a.start}–{a.end}) on "
                                                     f"{', '.join(both)}; one window per time: split them or give "
                                                     "the busier one's nodes"))
    if out:
        return out
    st = steps(pool)
    if len(st) == 1 and st[0][1] > pool.min_nodes:  # nothing ever changes: no CronJob would raise the minimum
        out.append(WarmProblem(at, f"the windows cover the whole week at {st[0][1]} nodes, so the minimum never "
                                   f"changes; set min_nodes: {st[0][1]} instead of warm"))
    for c in changes(pool):
        skipped = next((g for g in gaps(pool.time_zone) if g[0].weekday() in c.days and g[1] <= minutes(c.at) < g[2]),
                       None)
        if skipped:
            day, a, b = skipped
            i = next((f"[{i}]" for i, w in enumerate(pool.warm) if c.at in (w.start, w.end) or (
                c.at == "00:00" and w.end == "24:00")), "")
            out.append(WarmProblem(f"{at}{i}", f"{c.at} does not exist in {pool.time_zone} on {DAYS[day.weekday()]} "
                                                 f"{day.isoformat()} (the clocks skip {a // 60:02d}:{a % 60:02d}–"
                                                 f"{b // 60:02d}:{b % 60:02d}), so the CronJob that sets min-count "
                                                 f"{c.min_count} at {c.at} does not run that day; move the time out "
                                                 "of the skipped hour"))
    return out


@lru_cache(maxsize=64)
def gaps(zone: str, first_year: int | None = None) -> tuple[tuple[date, int, int], ...]:
    """The local times that do not exist in `zone` (clocks moved forward), this year and next (or from
    `first_year`): (date, first minute skipped, first minute after), found by the round trip local → UTC → local."""
    tz = zoneinfo.ZoneInfo(zone)
    day = date(first_year or datetime.now(timezone.utc).year, 1, 1)
    out: list[tuple[date, int, int]] = []

    def offset(d: date) -> Any:
        return datetime.combine(d, time(0), tz).utcoffset()

    for _ in range(2 * 366):
        nxt = day + timedelta(days=1)
        if offset(day) != offset(nxt):
            skipped = [m for m in range(1440) if not _exists(datetime.combine(day, time(m // 60, m % 60), tz))]
            if skipped:
                out.append((day, skipped[0], skipped[-1] + 1))
        day = nxt
    return tuple(out)


def _exists(local: datetime) -> bool:
    return local.astimezone(timezone.utc).astimezone(local.tzinfo).replace(tzinfo=None) == local.replace(tzinfo=None)


# ---------------------------------------------------------------------------------------------- the step function
def steps(pool: Pool) -> list[tuple[int, int]]:
    """The autoscaler's minimum over the week: (minute of the week it starts, minimum), sorted, from minute 0,
    each value different from the one before it (wrapping Sunday → Monday)."""
    edges = {0}
    for w in pool.warm:
        for a, b in w.spans():
            edges.update((a, b % WEEK_MIN))
    out: list[tuple[int, int]] = []
    for t in sorted(edges):
        value = minimum_at_minute(pool, t)
        if not out or out[-1][1] != value:
            out.append((t, value))
    return out


def minimum_at_minute(pool: Pool, minute_of_week: float) -> int:
    """`max(min_nodes, the warm nodes of the window holding this minute of the week)`."""
    t = minute_of_week % WEEK_MIN
    warm = max((w.nodes for w in pool.warm for a, b in w.spans() if a <= t < b), default=0)
    return max(pool.min_nodes, warm)


def minimum_at(pool: Pool, when: datetime) -> int:
    """The pool's minimum at an aware datetime, read in the pool's time zone (daylight saving included)."""
    local = when.astimezone(zoneinfo.ZoneInfo(pool.time_zone))
    return minimum_at_minute(pool, local.weekday() * 1440 + local.hour * 60 + local.minute)


@dataclass(frozen=True)
class Change:
    """At `at` (HH:MM, the pool's time zone) on `days`, set the autoscaler's minimum to `min_count`."""

    days: tuple[int, ...]
    at: str
    min_count: int

    @property
    def cron(self) -> str:
        """The cron schedule (minute hour * * day-of-week; cron's Sunday is 0)."""
        h, m = self.at.split(":")
        return f"{int(m)} {int(h)} * * " + ",".join(str((d + 1) % 7) for d in self.days)

    @property
    def day_names(self) -> str:
        return ",".join(DAYS[d] for d in self.days)


def changes(pool: Pool) -> list[Change]:
    """The steps as daily changes: one per (time of day, minimum), with the days it happens on."""
    st = steps(pool)
    if len(st) <= 1:
        return []
    real = st[1:] if st[0][1] == st[-1][1] else st  # Monday 00:00 is a change only if Sunday night differs
    grouped: dict[tuple[int, int], list[int]] = {}
    for t, value in real:
        grouped.setdefault((t % 1440, value), []).append(t // 1440)
    return [Change(tuple(sorted(days)), f"{t // 60:02d}:{t % 60:02d}", value)
            for (t, value), days in sorted(grouped.items(), key=lambda kv: (kv[0][0], kv[0][1]))]
