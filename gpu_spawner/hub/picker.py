"""What the profile picker shows for each profile (pure): GPU, size, $/hour and live capacity.

The entries are KubeSpawner `profile_list` dicts with an extra `gpuhub` key that our form
template (templates/form.html) reads; KubeSpawner itself ignores it.
"""
from __future__ import annotations

from typing import Any

from gpu_spawner.builders import pods as podspec
from gpu_spawner.hub.capacity import ProfileCapacity
from gpu_spawner.model.profiles import Profile, ProfilesConfig, slice_memory_gb


def _gib(num_bytes) -> str:
    value = float(num_bytes) / 2**30
    return f"{value:g} GiB" if value >= 1 else f"{float(num_bytes) / 2**20:g} MiB"


def _duration(seconds: int) -> str:
    if seconds < 2 * 3600:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:g} h"


def gpu_line(cfg: ProfilesConfig, profile: Profile) -> str:
    """'NVIDIA A100 80GB · MIG slice 1g.10gb · 10 GB GPU memory'."""
    pool = cfg.pool_of(profile)
    if profile.gpu is None or pool is None:
        return "No GPU"
    model = pool.gpu.spec
    name = pool.display_name or model.name
    n = profile.gpu.count
    if profile.gpu.kind == "mig":
        sl = profile.gpu.profile or next(iter(pool.mig_layout))
        many = f"{n} x " if n > 1 else ""
        return f"{name} · {many}MIG slice {sl} · {slice_memory_gb(sl) * n} GB GPU memory, its own compute"
    if profile.gpu.kind == "time-sliced":
        return (f"{name} · time-sliced, up to {pool.sharing.replicas} users per GPU · "
                f"{model.memory_gib} GB GPU memory, shared")
    many = f"{n} x " if n > 1 else ""
    return f"{many}{name} · whole GPU · {model.memory_gib * n} GB GPU memory"


def size_line(profile: Profile) -> str:
    return f"{profile.cpu:g} CPU · {_gib(profile.memory)} RAM · {_gib(profile.shm)} /dev/shm"


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


def profile_entry(cfg: ProfilesConfig, profile: Profile, default: bool,
                  capacity: ProfileCapacity | None) -> dict[str, Any]:
    cost = hourly_cost(cfg, profile)
    info: dict[str, Any] = {
        "gpu": gpu_line(cfg, profile),
        "kind": profile.gpu.kind if profile.gpu else "cpu",
        "size": size_line(profile),
        "cost": f"${cost:.2f}/hour" if cost else "",
        "idle": f"stops after {_duration(profile.idle_timeout)} idle" if profile.idle_timeout else "",
    }
    if capacity is not None:
        info.update(capacity=capacity.summary, outlook=capacity.outlook, full=capacity.full,
                    free=capacity.free_slots, total=capacity.total_slots, waiting=capacity.waiting)
    return {
        "slug": profile.slug,
        "display_name": profile.display_name,
        "description": profile.description,
        "default": default,
        "kubespawner_override": podspec.spawner_overrides(cfg, profile),
        "gpuhub": info,
    }
