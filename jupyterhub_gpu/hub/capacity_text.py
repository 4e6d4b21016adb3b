"""The picker's plain-language capacity lines (pure): how people call a slot, and what choosing a profile
now means, from the counts `capacity.ClusterState` keeps and, for a queued profile, the team's Kueue quota
(`model/team_room.py`)."""
from __future__ import annotations

import math
import statistics

from jupyterhub_gpu.model.profiles import MIGSharing, Pool, Profile
from jupyterhub_gpu.model.team_room import Room

#: The outlook of a profile with room now; a queued profile's keeps it only when the team's quota has room too.
STARTS_NOW = "starts right away"
#: Samples of a pool's recorded time to add a node that `node_add_seconds` reads (the most recent ones).
NODE_ADD_SAMPLES = 20


def slot_noun(profile: Profile, pool: Pool | None, plural: bool = True) -> str:
    """How people call one unit of this profile's GPU: 'MIG 1g.10gb slices', 'T4 MPS shares', 'H100 NVL GPUs'."""
    s = "s" if plural else ""
    if profile.gpu is None or pool is None:
        return f"server{s}"
    label = pool.display_name or pool.gpu.model
    label = label.removeprefix("NVIDIA ")
    if profile.gpu.kind == "mig":  # a pool already called "A100 MIG" is not said twice
        mig = "" if "MIG" in label.split() else " MIG"
        return f"{label}{mig} {profile.gpu.profile or next(iter(pool.mig_layout))} slice{s}"
    if profile.gpu.kind == "time-sliced":
        return f"{label} time-slice{s}"
    if profile.gpu.kind == "mps":
        return f"{label} MPS share{s}"
    return f"{label} GPU{s}"


def node_add_seconds(samples: list[float]) -> float | None:
    """The pool's time to add a node, from its recorded scale-ups (seconds from the pod that asked to the node
    Ready; most recent last): the median of the last `NODE_ADD_SAMPLES`, None with none recorded."""
    recent = [s for s in samples[-NODE_ADD_SAMPLES:] if s >= 0 and math.isfinite(s)]
    return statistics.median(recent) if recent else None


def scale_up_text(node_add_s: float | None) -> str:
    """'starts in ~6 min (a node is added)' from the recorded time; without one, no number is made up."""
    if node_add_s is None:
        return "the pool scales up from zero: a node takes a few minutes"
    return f"starts in ~{max(1, math.ceil(node_add_s / 60))} min (a node is added)"


def node_add_countdown(node_add_s: float, waited_s: float) -> str:
    """What is left of the pool's recorded time to add a node after `waited_s`: 'a node is being added: about
    4 min left'; never a negative time: past it, 'taking longer than usual'."""
    left = node_add_s - max(0.0, waited_s) if math.isfinite(waited_s) else -1.0
    if left > 0:
        return f"a node is being added: about {max(1, math.ceil(left / 60))} min left"
    usual = max(1, math.ceil(node_add_s / 60))
    return f"a node is being added and is taking longer than usual (it usually takes about {usual} min)"


def cannot_scale_from_zero(pool: Pool | None) -> bool:
    """A mixed-strategy MIG pool at min_nodes 0: AKS's autoscaler never adds its first node for a slice
    (model/fit.py warns when validating)."""
    return pool is not None and isinstance(pool.sharing, MIGSharing) and pool.sharing.mig_strategy == "mixed" \
        and pool.min_nodes == 0


def describe(profile: Profile, pool: Pool | None, resource: str | None, total: int, free: int, fits: int,
             waiting: int, nodes: int, can_grow: bool, node_add_s: float | None = None) -> tuple[str, str]:
    """The picker's plain-language capacity line and what happens if you choose it now; `node_add_s`: the pool's
    recorded time to add a node (`node_add_seconds`)."""
    if profile.gpu is None:
        if fits > 0:
            return f"room for {fits} more server{'s' if fits != 1 else ''}", STARTS_NOW
        return "CPU nodes are full", "waits for room on a CPU node"
    noun = slot_noun(profile, pool)
    if nodes == 0:
        if can_grow and cannot_scale_from_zero(pool):
            return (f"no {noun} running now", "cannot start now: MIG pools do not scale up from zero on AKS; an "
                                              "admin must keep a node (min_nodes or a warm schedule)")
        if can_grow:
            return f"no {noun} running now", scale_up_text(node_add_s)
        return f"no {noun} in this cluster", "cannot start until an admin adds nodes to this pool"
    if fits > 0:
        return f"{free} of {total} {noun} free", STARTS_NOW
    queue = f" — {waiting} waiting" if waiting else ""
    if can_grow:
        return f"pool full{queue}", "you will queue while the pool adds a node (a few minutes)"
    return f"pool full{queue}", "you will wait until someone else's server stops"


def or_alternative(own_summary: str, choice: Profile, pool: Pool | None, cap) -> tuple[str, str]:
    """The line of a profile whose own GPUs are taken but whose alternative `choice` (counted as `cap`) has room:
    '0 of 4 A100 GPUs free; 1 of 2 A100 MIG 3g.40gb slices free instead', and that a server gets that now."""
    one = slot_noun(choice, pool, plural=choice.gpu.count != 1)
    return (f"{own_summary}; {cap.free_slots} of {cap.total_slots} {slot_noun(choice, pool)} free instead",
            f"{STARTS_NOW} with {choice.gpu.count} {one} (its first alternative with room)")


def _in_use(room: Room) -> str:
    """'8 of 8 in use', or '8 of 8 in use + 4 borrowed' for a team above its own quota."""
    if room.used <= room.nominal:
        return f"{room.used} of {room.nominal} in use"
    return f"{room.nominal} of {room.nominal} in use + {room.used - room.nominal} borrowed"


def team_line(team: str, room: Room | None, noun: str) -> str:
    """The card's line for a queued profile: what the user's team can use now of its Kueue quota on the pool,
    'your team (data-science): 3 of 8 T4 time-slices free in quota, +4 by borrowing'; 'team quota unknown'
    when the ClusterQueue is not read (never a made-up number)."""
    who = f"your team ({team})"
    if room is None:
        return f"{who}: team quota unknown"
    said = f"{who}: {room.own_free} of {room.nominal} {noun} free in quota"
    if room.used > room.nominal:
        said = f"{who}: {room.used} {noun} in use, {room.nominal} of quota + {room.used - room.nominal} borrowed"
    elif room.nominal == 0:
        said = f"{who}: no {noun} in quota of its own"
    if not room.in_cohort:
        return said
    if room.borrow_now is None:  # the cohort's use is not known: only what the limit allows
        cap = room.may_borrow
        return said + (f", up to {cap} more by borrowing if the cohort has room" if cap
                       else ", more by borrowing if the cohort has room" if cap is None else "")
    if room.borrow_now:
        return said + f", +{room.borrow_now} by borrowing"
    if room.lent:
        return said + ", lent to other teams right now"
    if room.own_free:
        return said
    return said + (", borrowing limit reached" if room.may_borrow == 0 else ", none to borrow in the cohort now")


def team_outlook(room: Room | None, units: int, outlook: str, pending: int | None = None) -> tuple[str, bool]:
    """What choosing a queued profile means once the team's quota is counted: (outlook, the team is the limit).
    The pool's `outlook` stands when the team has room for `units`; at its quota the team, not the pool, is the
    limit, whatever the pool has free; unknown quota never promises a start."""
    if room is None:
        return (f"{outlook} if your team's quota has room" if outlook == STARTS_NOW else outlook), False
    if room.now is not None and room.now >= units:
        if outlook == STARTS_NOW and room.own_free < units:
            return "starts right away on quota borrowed from another team (it may take it back)", False
        return outlook, False
    if room.now is None and room.own_free >= units:
        return outlook, False
    if room.own_free >= units:  # its own quota, lent to other teams: Kueue takes it back for this server
        return "waits a moment while Kueue takes back your team's quota lent to other teams", True
    queue = f" — {pending} waiting in your team's queue" if pending else ""
    if room.now is None and room.may_borrow != 0:
        return (f"waits for your team's quota ({_in_use(room)}) unless the cohort has room to lend; starts when "
                f"one of your team's servers or jobs on this pool stops{queue}"), True
    return (f"waits for your team's quota ({_in_use(room)}): starts when one of your team's servers or jobs "
            f"on this pool stops{queue}"), True
