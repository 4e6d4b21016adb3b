"""What a team's GPU quota on a pool needs besides GPUs, and whether the pool's nodes can hold it (pure).

Kueue admits a workload only when every resource it asks for fits the team's ClusterQueue, so a CPU quota
of each slot's share of a node (1.71 CPUs per slice of a 7-slice A100 node) admits one server of 2 CPUs
where the team was promised two slices. The CPU and memory a quota of N needs is the most the profiles the
team may choose on the pool can ask for with N units, in whole servers (a 2-GPU profile on a quota of 3
runs once): `builders/kueue.py` renders it, `gpuhub validate` refuses a file whose nodes cannot hold it,
`gpuhub doctor` compares it with the live ClusterQueues.
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from math import ceil
from typing import Callable

from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig
from jupyterhub_gpu.model.quantities import human_bytes


@dataclass(frozen=True)
class Need:
    """CPU (cores) and memory (bytes, memory + shm) that a quota's servers and jobs ask for at most, and the
    most pods it admits at once (each asks for at least one unit)."""

    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)
    pods: int = 0


def may_choose(cfg: ProfilesConfig, team_name: str, profile: Profile) -> bool:
    """Can a member of the team pick `profile`? A user's team is the first team (file order) named like one
    of their groups, so a member may be in any other group but an earlier team's: a profile only for
    earlier teams' groups is the one they cannot pick."""
    if profile.groups is None:
        return True
    earlier = set(list(cfg.teams)[:list(cfg.teams).index(team_name)])
    return any(g not in earlier for g in profile.groups)


def team_profiles(cfg: ProfilesConfig, team_name: str, pool_name: str) -> list[Profile]:
    """The GPU profiles on the pool that the team's servers and jobs may use."""
    return [p for p in cfg.profiles if p.pool == pool_name and p.gpu is not None
            and may_choose(cfg, team_name, p)]


def _most(items: list[tuple[int, Decimal]], units: int) -> Decimal:
    """The largest sum of values of whole items (any number of each) whose sizes add up to at most `units`."""
    best = [Decimal(0)] * (units + 1)
    for n in range(1, units + 1):
        best[n] = max([best[n - 1]] + [best[n - k] + v for k, v in items if k <= n])
    return best[units]


def need(cfg: ProfilesConfig, team_name: str, pool_name: str, units: int) -> Need:
    """What `units` of the team's quota on the pool can ask for. The quota counts `units` of each GPU resource
    of the pool (a mixed MIG layout has several), and all of them share the CPU and memory quota."""
    pool = cfg.pools[pool_name]
    total = Need()
    for resource in pool.slots_per_node():
        mine = [p for p in team_profiles(cfg, team_name, pool_name) if pool.resource_name(p.gpu.profile) == resource]

        def most(size: Callable[[Profile], Decimal]) -> Decimal:
            return _most([(p.gpu.count, size(p)) for p in mine], units)

        total = Need(total.cpu + most(lambda p: p.cpu), total.memory + most(lambda p: Decimal(p.memory_limit)),
                     total.pods + int(most(lambda p: Decimal(1))))
    return total


@dataclass(frozen=True)
class Shortfall:
    """A team's quota on a pool whose servers of `profile` the pool's nodes cannot all run: their CPU or
    memory, not their GPUs, runs out first."""

    team: str
    pool: str
    quota: int
    profile: Profile
    wanted: int        # servers of the profile the quota promises (as many as the nodes' GPUs take)
    holds: int         # servers of it the nodes can run at once
    nodes: int         # the pool's max_nodes
    per_node: int      # servers of it one node runs
    fits_cpu: Decimal  # the largest request per server that lets `wanted` run on `nodes`
    fits_memory: Decimal
    fits_quota: int    # the largest quota whose servers of it the nodes hold

    def message(self) -> str:
        p, n = self.profile, self.wanted
        return (f"a quota of {self.quota} promises {n} servers or jobs of {p.slug!r} ({float(p.cpu):g} CPUs / "
                f"{human_bytes(p.memory_limit)} each, memory + shm): {float(p.cpu * n):g} CPUs / "
                f"{human_bytes(p.memory_limit * n)}, but pool {self.pool!r} has at most {self.nodes} "
                f"node{'s' if self.nodes != 1 else ''} (max_nodes), which can run only {self.holds} of them "
                f"({self.per_node} per node), so the team could never use its quota in full. Either give "
                f"{p.slug!r} at most {float(self.fits_cpu):.2f} CPUs / {human_bytes(self.fits_memory)} (memory + shm), "
                f"or lower teams.{self.team}.quota.{self.pool} to {self.fits_quota}.")


def _holds(cfg: ProfilesConfig, pool_name: str, p: Profile, units: int) -> tuple[int, int, int, int]:
    """For a quota of `units`: (servers of `p` it promises and the nodes' GPUs take, servers the nodes run,
    servers one node runs, nodes)."""
    pool = cfg.pools[pool_name]
    shape, resource = pool.shape(), pool.resource_name(p.gpu.profile)
    by_gpu = pool.slots_per_node()[resource] // p.gpu.count
    per_node = min(by_gpu, int(shape.cpu // p.cpu) if p.cpu else by_gpu,
                   int(shape.memory // p.memory_limit) if p.memory_limit else by_gpu)
    nodes = pool.max_nodes or 0
    return min(units // p.gpu.count, by_gpu * nodes), per_node * nodes, per_node, nodes


def shortfalls(cfg: ProfilesConfig) -> list[Shortfall]:
    """Every team quota on a pool of known node size and count (`max_nodes`) that its profiles cannot use in
    full on the pool's nodes, because of CPU or memory (the profile that falls shortest, per team and pool).
    Without `max_nodes` the count is unknown, not small (more nodes may come): `model/fit.py` warns when one
    node cannot run all its slots."""
    out = []
    for team_name, team in cfg.teams.items():
        for pool_name, units in team.quota.items():
            pool = cfg.pools.get(pool_name)
            if not units or pool is None or not pool.is_gpu or pool.shape() is None or not pool.max_nodes:
                continue
            short = [(holds / wanted, p) for p in team_profiles(cfg, team_name, pool_name)
                     for wanted, holds, per_node, _ in [_holds(cfg, pool_name, p, units)]
                     if per_node and holds < wanted]
            if not short:
                continue
            p = min(short, key=lambda s: s[0])[1]
            wanted, holds, per_node, nodes = _holds(cfg, pool_name, p, units)
            shape, needed = pool.shape(), ceil(wanted / nodes)
            fits = next(q for q in range(units, -1, -1) if (h := _holds(cfg, pool_name, p, q))[1] >= h[0])
            out.append(Shortfall(team_name, pool_name, units, p, wanted, holds, nodes, per_node,
                                 shape.cpu / needed, shape.memory / needed, fits))
    return out
