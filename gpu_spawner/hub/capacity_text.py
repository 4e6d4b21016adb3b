"""The picker's plain-language capacity lines (pure): how people call a slot, and what choosing a profile
now means, from the counts `capacity.ClusterState` keeps."""
from __future__ import annotations

from gpu_spawner.model.profiles import Pool, Profile


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


def describe(profile: Profile, pool: Pool | None, resource: str | None, total: int, free: int, fits: int,
             waiting: int, nodes: int, can_grow: bool) -> tuple[str, str]:
    """The picker's plain-language capacity line and what happens if you choose it now."""
    if profile.gpu is None:
        if fits > 0:
            return f"room for {fits} more server{'s' if fits != 1 else ''}", "starts right away"
        return "CPU nodes are full", "waits for room on a CPU node"
    noun = slot_noun(profile, pool)
    if nodes == 0:
        if can_grow:
            return f"no {noun} running now", "the pool scales up from zero: a node takes a few minutes"
        return f"no {noun} in this cluster", "cannot start until an admin adds nodes to this pool"
    if fits > 0:
        return f"{free} of {total} {noun} free", "starts right away"
    queue = f" — {waiting} waiting" if waiting else ""
    if can_grow:
        return f"pool full{queue}", "you will queue while the pool adds a node (a few minutes)"
    return f"pool full{queue}", "you will wait until someone else's server stops"
