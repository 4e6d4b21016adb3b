"""The picker's plain-language capacity lines (pure): how people call a slot, and what choosing a profile
now means, from the counts `capacity.ClusterState` keeps."""
from __future__ import annotations

import math
import statistics

from gpu_spawner.model.profiles import MIGSharing, Pool, Profile

#: Samples of a pool's recorded time to add a node that `node_add_seconds` reads (the most recent ones).
NODE_ADD_SAMPLES = 20


def slot_noun(profile: Profile, pool: Pool | None, plural: bool = True) -> str:
    """How people call one unit of this profile's GPU: 'MIG 1g.10gb slices', 'T4 MPS shares', 'H100 NVL GPUs'."""
    s = "s" if plural else ""
    if profile.gpu is None or pool is None:
        return f"server{s}"
    label = pool.display_name or pool.gpu.model
    label = label.removeprefix("NVIDIA ")
    if profile.gpu.kind == "mig":
        return f"{label} MIG {profile.gpu.profile or next(iter(pool.mig_layout))} slice{s}"
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
            return f"room for {fits} more server{'s' if fits != 1 else ''}", "starts right away"
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
        return f"{free} of {total} {noun} free", "starts right away"
    queue = f" — {waiting} waiting" if waiting else ""
    if can_grow:
        return f"pool full{queue}", "you will queue while the pool adds a node (a few minutes)"
    return f"pool full{queue}", "you will wait until someone else's server stops"
