"""What a server costs by the hour (pure): its profile's share of its node's price in the profiles file
(`cost_per_node_hour`). The picker shows it, the culler's rules and showback multiply it."""
from __future__ import annotations

from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig


def hourly_cost(cfg: ProfilesConfig, profile: Profile) -> float:
    """This profile's share of its node's price: its GPUs' share on GPU pools, CPU or memory share otherwise."""
    pool = cfg.pool_of(profile)
    if pool is None or not pool.cost_per_node_hour:
        return 0.0
    if profile.gpu is not None:
        slots = sum(pool.slots_per_node().values()) or 1
        share = profile.gpu.count / slots
    else:
        shape = pool.shape()
        if shape is None:  # node size unknown to the file: no share, no made-up price
            return 0.0
        share = max(float(profile.cpu / shape.cpu), float(profile.memory_limit / shape.memory))
    return round(pool.cost_per_node_hour * share, 3)
