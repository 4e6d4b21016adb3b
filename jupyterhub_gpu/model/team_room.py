"""What a team can still take of its Kueue quota on a pool, from the live ClusterQueues (pure).

The picker's pool counts say whether a node has room; a queued server (builders/kueue.py `server_queue`) also
needs its team's ClusterQueue to admit it, so "starts right away" is false for a team at its quota. Kueue admits
while the team's usage fits its own unused quota plus what its cohort has unused, capped by the borrowing limit:
`room` is that arithmetic for one (flavor, resource) of a flat cohort, as Kueue's scheduler does it (a member's
`lendingLimit` keeps the rest of its nominal quota as its own). Usage is what Kueue has reserved
(`flavorsReservation`, else `flavorsUsage`), the numbers its admission counts. Anything not read, not active or
not listed stays unknown (None): never a number we cannot vouch for. Kueue's `Cohort` objects (hierarchical
cohorts with quota of their own) are not read, so a cohort's room can only be underestimated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from jupyterhub_gpu.model.quantities import parse_or_none


@dataclass(frozen=True)
class Quota:
    """One ClusterQueue's numbers for one (flavor, resource): nominal quota, use, and its limits (None: none
    set: unlimited borrowing within the cohort, all unused quota lendable)."""

    nominal: int
    used: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @property
    def guaranteed(self) -> int:
        """What the queue never lends: its nominal quota above its lending limit."""
        return self.nominal - min(self.lending_limit, self.nominal) if self.lending_limit is not None else 0


@dataclass(frozen=True)
class QueueFacts:
    """What the picker needs of one live ClusterQueue: its cohort, its (flavor, resource) numbers when its
    status can be trusted (`known`), and how many workloads wait in it."""

    cohort: str | None
    quotas: dict[tuple[str, str], Quota]
    known: bool
    pending: int | None = None


@dataclass(frozen=True)
class Room:
    """A team's room on one (flavor, resource). `now`: what Kueue would admit now (None: the cohort's use is not
    known); `ceiling`: the most it may take at all (nominal + borrowing limit − used; None: borrowing
    unlimited); `lent`: its own unused quota is in use by other teams (Kueue takes it back first)."""

    nominal: int
    used: int
    borrowing_limit: int | None
    in_cohort: bool
    own_free: int
    ceiling: int | None
    now: int | None

    @property
    def may_borrow(self) -> int | None:
        """How many above its own free quota the team could borrow at most (None: no limit)."""
        if not self.in_cohort:
            return 0
        return None if self.ceiling is None else max(0, self.ceiling - self.own_free)

    @property
    def borrow_now(self) -> int | None:
        """How many of `now` are borrowed (None: unknown)."""
        return None if self.now is None else max(0, self.now - self.own_free)

    @property
    def lent(self) -> bool:
        return self.now is not None and self.now < self.own_free


def _int(value: Any, up: bool) -> int | None:
    q = parse_or_none(str(value)) if value is not None else None
    if q is None or not q.is_finite() or q < 0:
        return None
    return int(math.ceil(q) if up else math.floor(q))


def _active(status: dict[str, Any]) -> bool:
    return any(c.get("type") == "Active" and c.get("status") == "True" for c in _dicts(status.get("conditions")))


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a list from the API; anything else (missing, garbled) is none."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def queue_facts(cluster_queue: dict[str, Any]) -> QueueFacts:
    """A live ClusterQueue read once (quantities floored for quota, rounded up for use): unknown when Kueue has
    not written its status, says it is not active, or any number is missing or not a quantity (its use
    then cannot be counted in its cohort either). Never raises on a garbled object: it is unknown."""
    spec, status = _obj(cluster_queue.get("spec")), _obj(cluster_queue.get("status"))
    cohort = spec.get("cohortName") or spec.get("cohort") or None
    used: dict[tuple[Any, Any], Any] = {}
    for f in _dicts(status.get("flavorsReservation")) or _dicts(status.get("flavorsUsage")):
        for r in _dicts(f.get("resources")):
            used[f.get("name"), r.get("name")] = r.get("total", 0)
    quotas, known = {}, bool(status) and _active(status) and (cohort is None or isinstance(cohort, str))
    for group in _dicts(spec.get("resourceGroups")):
        for f in _dicts(group.get("flavors")):
            for r in _dicts(f.get("resources")):
                key = (f.get("name"), r.get("name"))
                nominal, use = _int(r.get("nominalQuota", 0), False), _int(used.get(key), True)
                limits = [_int(r[k], False) if k in r else -1 for k in ("borrowingLimit", "lendingLimit")]
                if nominal is None or use is None or None in limits or not all(isinstance(k, str) for k in key):
                    known = False  # not listed in the status, or not a quantity: no number from this queue
                    continue
                quotas[key] = Quota(nominal, use, *(None if v == -1 else v for v in limits))
    pending = status.get("pendingWorkloads")
    return QueueFacts(cohort if isinstance(cohort, str) else None, quotas, known,
                      pending if type(pending) is int and pending >= 0 else None)


def room(team: Quota, in_cohort: bool, members: list[Quota] | None) -> Room:
    """The team's room for one (flavor, resource), like Kueue's scheduler for a flat cohort: its own unused
    guaranteed quota plus the cohort's unused lendable quota (its `members`, the team included; None: not
    known), never above nominal + borrowing limit − used. Outside a cohort: its own unused quota."""
    own_free = max(0, team.nominal - team.used)
    if not in_cohort:
        return Room(team.nominal, team.used, 0, False, own_free, own_free, own_free)
    limit = team.borrowing_limit
    ceiling = None if limit is None else max(0, team.nominal + limit - team.used)
    now = None
    if members is not None:
        lendable = sum(m.nominal - m.guaranteed for m in members)
        lent_used = sum(max(0, m.used - m.guaranteed) for m in members)
        now = max(0, team.guaranteed - team.used) + max(0, lendable - lent_used)
        if ceiling is not None:
            now = min(now, ceiling)
    return Room(team.nominal, team.used, limit, True, own_free, ceiling, now)


def team_room(queues: dict[str, QueueFacts], name: str, flavor: str, resource: str) -> Room | None:
    """The room of ClusterQueue `name` on (flavor, resource) from every live queue read (None: unknown: not
    read, not active, or the flavor not there). The cohort's use is known only when each of its members is."""
    facts = queues.get(name)
    team = facts.quotas.get((flavor, resource)) if facts is not None and facts.known else None
    if team is None:
        return None
    members: list[Quota] | None = None
    if facts.cohort:
        others = [f for f in queues.values() if f.cohort == facts.cohort]
        if all(f.known for f in others):
            members = [q for f in others if (q := f.quotas.get((flavor, resource))) is not None]
    return room(team, bool(facts.cohort), members)
