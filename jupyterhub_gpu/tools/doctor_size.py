"""`gpuhub doctor`'s node-size row per pool (pure): the profiles against the nodes' real allocatable CPU and
memory, and the size the file assumes (its `node:`, or the known VM size's allocatable from
`model/vm_sizes.py`) against what the nodes really offer.

A pool whose size the file does not know is checked here only: validation cannot, and must not guess.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from jupyterhub_gpu.model.profiles import Pool, Profile, ProfilesConfig
from jupyterhub_gpu.model.quantities import human_bytes, parse_or_none


def _alloc(node: dict[str, Any], resource: str) -> Decimal:
    return parse_or_none(((node.get("status") or {}).get("allocatable") or {}).get(resource, 0)) or Decimal(0)


def _fmt(cpu: Decimal, mem: Decimal) -> str:
    return f"{float(cpu):g} CPUs / {human_bytes(mem)}"


def per_node(pool: Pool, profile: Profile) -> int:
    """How many of this profile a node's GPU slots hold (1 for a CPU profile)."""
    if profile.gpu is None:
        return 1
    return max(pool.slots_per_node().get(pool.resource_name(profile.gpu.profile), 0) // profile.gpu.count, 1)


def size_problems(cfg: ProfilesConfig, pool_name: str, nodes: list[dict[str, Any]]) -> tuple[str, list[str], str]:
    """(what the nodes offer, problems, fix) for the pool's nodes (already selected by its node_selector)."""
    pool = cfg.pools[pool_name]
    cpu = min(_alloc(n, "cpu") for n in nodes)
    mem = min(_alloc(n, "memory") for n in nodes)
    offer = _fmt(cpu, mem)
    problems, fixes = [], []
    shape = pool.shape()
    if shape is not None and (cpu < shape.cpu or mem < shape.memory):
        source = f"pools.{pool_name}.node" if pool.node else f"the allocatable of {pool.instance_type}"
        problems.append(f"the file assumes {_fmt(shape.cpu, shape.memory)} ({source}); nodes offer {offer}")
        fixes.append(f"set pools.{pool_name}.node: {{cpu: {float(cpu):g}, memory: {int(mem / 2**20)}Mi}}")
    for profile in (p for p in cfg.profiles if p.pool == pool_name):
        n = per_node(pool, profile)
        need_cpu, need_mem = profile.cpu * n, Decimal(profile.memory_limit) * n
        if profile.cpu > cpu or profile.memory_limit > mem:
            problems.append(f"{profile.slug} needs {_fmt(profile.cpu, Decimal(profile.memory_limit))}: it never fits")
            fixes.append(f"shrink {profile.slug} or use a bigger VM size")
        elif need_cpu > cpu or need_mem > mem:
            fit = int(min(cpu // profile.cpu if profile.cpu else n, mem // Decimal(profile.memory_limit)))
            problems.append(f"{n} x {profile.slug} per node need {_fmt(need_cpu, need_mem)}: only {fit} fit, so "
                            f"{n - fit} GPU slot(s) per node stay idle and the quota promises more than the nodes hold")
            fixes.append(f"give {profile.slug} at most {_fmt(cpu / n, mem / n)}")
    return offer, problems, "; ".join(dict.fromkeys(fixes))
