"""Kueue's reasons for a waiting job, in plain words (pure).

Kueue writes its scheduler's view into a Workload's conditions ("couldn't assign flavors to pod set main:
insufficient unused quota for nvidia.com/gpu in flavor gput4, 1 more needed"); users chose a profile, not
a flavor, and should read what it means for them and what happens next. The raw text stays available
(the widget folds it under "details"): `plain_reason` only explains, it never hides the original.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from jupyterhub_gpu.model.profiles import MIGSharing, MPSSharing, Pool, ProfilesConfig, TimeSlicing
from jupyterhub_gpu.model.quantities import human_bytes, parse_or_none

_FLAVOR_PART = re.compile(r"in flavor ([\w.-]+)|flavor ([\w.-]+) doesn't match")
_UNUSED = re.compile(r"insufficient unused quota for ([\w./-]+) in flavor ([\w.-]+)(?:, (\S+) more needed)?")
#: The resources besides GPUs a team's quota holds, as people say them.
_NOT_GPU = {"cpu": "CPU", "memory": "memory", "ephemeral-storage": "scratch disk"}
_MAXIMUM = re.compile(r"insufficient quota for ([\w./-]+) in flavor ([\w.-]+)"
                      r"(?:.*?request > maximum capacity \((\S+) > (\S+)\))?")
_UNAVAILABLE = re.compile(r"resource ([\w./-]+) unavailable in ClusterQueue")
_PENDING_PREEMPTION = re.compile(r"Pending the preemption of (\d+) workload")


@dataclass(frozen=True)
class QueueContext:
    """What the sentence may say about the job's own queue: its team, its pool (a Kueue flavor is named
    after its pool) and the pool's name for people, the team's quota there, what one unit is called and its
    resource, its place in the queue, and, when the live ClusterQueue was read, the flavor's use of each
    resource (`flavor_usage`)."""

    team: str | None = None
    pool: str | None = None
    quota: int | None = None
    noun: str = "GPU slots"
    position: int | None = None
    of: int | None = None
    pool_label: str | None = None
    resource: str | None = None
    usage: dict[str, tuple[Decimal, Decimal]] = field(default_factory=dict)


def slot_noun(pool: Pool | None) -> str:
    """What one unit of a pool's quota is called: 'T4 slots', 'L4 MPS slots', 'A100 80GB MIG slices', 'H100 GPUs'."""
    if pool is None or pool.gpu is None:
        return "GPU slots"
    label = pool.label.removeprefix("NVIDIA ")
    if isinstance(pool.sharing, MIGSharing):
        return f"{label} MIG slices"
    if isinstance(pool.sharing, MPSSharing):
        return f"{label} MPS slots"
    if isinstance(pool.sharing, TimeSlicing):
        return f"{label} slots"
    return f"{label} GPUs"


def context_for(cfg: ProfilesConfig, namespace: str | None, profile_slug: str | None,
                position: int | None = None, of: int | None = None) -> QueueContext:
    """The QueueContext of a job in `namespace` on profile `profile_slug` (unknown parts stay None)."""
    team = next(((n, t) for n, t in cfg.teams.items() if t.namespace == namespace), None)
    profile = next((p for p in cfg.profiles if p.slug == profile_slug), None)
    pool_name = profile.pool if profile else None
    pool = cfg.pools.get(pool_name) if pool_name else None
    quota = team[1].quota.get(pool_name) if team and pool_name else None
    return QueueContext(team=team[0] if team else None, pool=pool_name, quota=quota, noun=slot_noun(pool),
                        position=position, of=of, pool_label=pool.label.removeprefix("NVIDIA ") if pool else None,
                        resource=cfg.resource_name(profile) if profile else None)


def flavor_usage(cluster_queue: dict[str, Any] | None, flavor: str | None) -> dict[str, tuple[Decimal, Decimal]]:
    """Resource → (in use, nominal quota) of one flavor of a live ClusterQueue: what Kueue has reserved
    (`flavorsReservation`, else `flavorsUsage`) against its `spec`. {} when not known."""
    if not cluster_queue or not flavor:
        return {}
    status = cluster_queue.get("status") or {}
    used = {r.get("name"): parse_or_none(str(r.get("total", 0))) for f in status.get("flavorsReservation")
            or status.get("flavorsUsage") or [] if f.get("name") == flavor for r in f.get("resources") or []}
    out = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for f in group.get("flavors") or []:
            if f.get("name") == flavor:
                for r in f.get("resources") or []:
                    nominal = parse_or_none(str(r.get("nominalQuota", 0)))
                    if nominal is not None:
                        out[r["name"]] = (used.get(r["name"]) or Decimal(0), nominal)
    return out


def _amount(resource: str, value: Decimal, unit: bool = True) -> str:
    """'3.43 CPUs' (or '3.43' without the unit), '48 GiB'."""
    if resource == "cpu":
        return f"{float(value):.3g}" + (" CPUs" if unit else "")
    return human_bytes(value)


def _not_gpu_limit(resource: str, more: str | None, ctx: QueueContext) -> str:
    """The team's CPU, memory or scratch-disk quota on the pool, not its GPUs, is what the job waits for:
    the numbers from the live queue when known, and how many GPU units are free meanwhile."""
    what = _NOT_GPU[resource]
    where = f" on the {ctx.pool_label} pool" if ctx.pool_label else ""
    said = f"your team's {what} quota{where} is used up"
    if resource in ctx.usage:
        used, nominal = ctx.usage[resource]
        said += f": {_amount(resource, used, unit=False)} of {_amount(resource, nominal)} in use"
    needed = parse_or_none(more) if more else None
    if needed:
        said += f"{',' if resource in ctx.usage else ':'} {_amount(resource, needed)} more needed"
    if ctx.resource in ctx.usage:
        used, nominal = ctx.usage[ctx.resource]
        free = max(nominal - used, Decimal(0))
        said += f"; {free:f} of {nominal:f} {ctx.noun} {'is' if free == 1 else 'are'} free"
    return said


def _place(ctx: QueueContext) -> str:
    if ctx.position and ctx.of:
        return f" — {ctx.position} of {ctx.of} waiting"
    return ""


def _own_parts(message: str, pool: str | None) -> list[str]:
    """The comma-separated reasons of the message that name the job's own flavor (or no flavor): Kueue
    also lists every other flavor of the ClusterQueue it tried, pools the user never chose."""
    body = message.split(": ", 1)[1] if message.startswith(("couldn't assign flavors", "failed to assign")) \
        else message
    parts = [p.strip() for p in re.split(r"[;,] (?=[a-z])", body) if p.strip()]
    if pool is None:
        return parts
    own = []
    for part in parts:
        named = {a or b for a, b in _FLAVOR_PART.findall(part)}
        if not named or pool in named:
            own.append(part)
    return own or parts


def plain_reason(message: str | None, ctx: QueueContext = QueueContext(), reason: str | None = None) -> str:
    """A sentence for a waiting job from Kueue's condition `message` (and `reason`), for the job's `ctx`."""
    message = (message or "").strip()
    noun = ctx.noun
    team = "your team's"
    if not message:
        return f"waiting in {team} queue{_place(ctx)}"
    if m := _PENDING_PREEMPTION.search(message):
        n = int(m.group(1))
        return (f"making room: {n} lower-priority job{'s are' if n != 1 else ' is'} being stopped for this one; "
                "it starts in a moment")
    if "Preempted" in message or reason in ("Preempted", "InClusterQueue", "InCohortReclamation",
                                            "InCohortFairSharing", "InCohortReclaimWhileBorrowing"):
        if "reclamation" in message or "Reclaim" in (reason or ""):
            why = "another team took back GPUs it had lent to yours"
        elif "Fair Sharing" in message or reason == "InCohortFairSharing":
            why = "GPUs were shared out fairly between the teams again"
        else:
            why = "a higher-priority job needed the GPU"
        return f"{why}; this job was stopped and will resume from its last checkpoint when a slot is free"
    if "namespace doesn't match ClusterQueue selector" in message:
        return (f"{team} queue does not take jobs from this namespace, so the job cannot start (a setup "
                "problem); ask an admin to run `gpuhub doctor`")
    if re.search(r"(ClusterQueue|LocalQueue) \S+ (is inactive|doesn't exist|is stopped|is held)", message):
        return (f"{team} queue is not ready, so the job waits without moving (a setup problem); ask an admin "
                "to run `gpuhub doctor`")
    parts = _own_parts(message, ctx.pool)
    text = ", ".join(parts)
    if m := _MAXIMUM.search(text):
        asked, most = m.group(3), m.group(4)
        what = noun
        if m.group(1) in _NOT_GPU:
            what = _NOT_GPU[m.group(1)]
            asked, most = (_amount(m.group(1), q) if (q := parse_or_none(v)) is not None else v
                           for v in (asked, most))
        sizes = f" ({asked} asked, at most {most} possible)" if asked and most else ""
        return (f"this job asks for more {what} than {team} quota can ever give{sizes}, so it cannot start; "
                "choose a smaller profile, or ask an admin to raise the team's quota")
    if m := _UNUSED.search(text):
        then = "when one of the team's servers or jobs on this pool stops" if m.group(1) in _NOT_GPU else \
            "when one finishes"
        return f"{quota_limit(message, ctx)}; starts {then}{_place(ctx)}"
    if _UNAVAILABLE.search(text) or (ctx.quota == 0 and "flavor" in text):
        return (f"{team} quota has no {noun}, so the job cannot start; choose another profile, or ask an "
                "admin to give the team quota on this pool")
    if "untolerated taint" in text or "doesn't match node affinity" in text:
        return ("the profile and the team's queue disagree about where this job may run (a setup problem); "
                "ask an admin to run `gpuhub doctor`")
    return f"waiting in {team} queue{_place(ctx)}"


def quota_limit(message: str | None, ctx: QueueContext = QueueContext()) -> str | None:
    """The clause naming the quota a waiting workload needs more of, from the resource Kueue names ("your
    team's CPU quota on the A100 pool is used up: ..."), or None when Kueue names no used-up quota."""
    m = _UNUSED.search(", ".join(_own_parts((message or "").strip(), ctx.pool)))
    if m is None:
        return None
    if m.group(1) in _NOT_GPU:
        return _not_gpu_limit(m.group(1), m.group(3), ctx)
    return f"your team's {f'{ctx.quota} {ctx.noun}' if ctx.quota else ctx.noun} are in use"
