"""Multi-node jobs (`%gpu_submit --nodes N`): which profiles allow them and whether N nodes can ever run.

A multi-node job is N pods, one per node, each with the profile's GPUs, admitted by Kueue all at once.
So only whole-GPU profiles may allow it (a time-sliced share or a MIG slice is not a node's worth of
training, and NCCL across shares is not supported), and N x the profile's GPUs must fit both the pool
(its `max_nodes`, when the file says) and the team's quota (plus what it may borrow): a job that can
never be admitted is refused with the numbers, not left queued forever.
"""
from __future__ import annotations

from dataclasses import dataclass

from jupyterhub_gpu.model.profiles import Pool, Profile, ProfilesConfig, Team


@dataclass(frozen=True)
class NodesProblem:
    at: str
    message: str


def profile_problems(at: str, p: Profile, pool: Pool | None) -> list[NodesProblem]:
    """The profiles file's checks of one profile's `max_nodes` (none when it has none)."""
    if p.max_nodes is None:
        return []
    if p.gpu is None or p.gpu.kind != "full":
        kind = "no GPU" if p.gpu is None else f"{p.gpu.kind} GPUs"
        return [NodesProblem(f"{at}.max_nodes", f"{p.max_nodes}: multi-node jobs need whole GPUs; this profile has "
                                                f"{kind}. Remove max_nodes, or set it on a profile with "
                                                "gpu.kind: full")]
    if pool is not None and pool.max_nodes is not None and p.max_nodes > pool.max_nodes:
        return [NodesProblem(f"{at}.max_nodes", f"{p.max_nodes} nodes never fit: pool {p.pool!r} has at most "
                                                f"{pool.max_nodes} (pools.{p.pool}.max_nodes); valid: "
                                                f"1..{pool.max_nodes}")]
    return []


def team_gpu_ceiling(cfg: ProfilesConfig, team: Team, pool: str) -> int | None:
    """The most GPUs of `pool` the team's ClusterQueue can ever be admitted for: its quota plus its
    borrowing limit; None when it may borrow without limit from a cohort (then only Kueue knows)."""
    own = team.quota.get(pool, 0)
    if team.cohort is None:
        return own
    if team.borrowing_limit is None:
        return None
    lendable = sum(t.quota.get(pool, 0) for t in cfg.teams.values() if t.cohort == team.cohort and t is not team)
    return own + min(team.borrowing_limit, lendable)


def check_nodes(cfg: ProfilesConfig, profile: Profile, team: tuple[str, Team] | None, nodes: object) -> int:
    """`nodes` as asked for in a submission → a whole number the profile and the team allow, or ValueError
    saying why not (the caller turns it into a 4xx). 1 is a single-node job on any GPU profile."""
    if nodes is None:
        return 1
    if isinstance(nodes, bool) or not isinstance(nodes, int):
        raise ValueError(f"nodes must be a whole number; got {str(nodes)[:40]!r}")
    if nodes == 1:
        return 1
    if profile.max_nodes is None:
        raise ValueError(f"profile {profile.slug!r} runs on one node; {nodes} nodes were asked for. Pick a profile "
                         "that allows multi-node jobs (`max_nodes` in the profiles file)")
    if not 1 <= nodes <= profile.max_nodes:
        raise ValueError(f"nodes must be from 1 to {profile.max_nodes} on {profile.slug!r}; got {nodes}")
    gpus = nodes * profile.gpu.count
    if team is not None and profile.pool is not None:
        ceiling = team_gpu_ceiling(cfg, team[1], profile.pool)
        if ceiling is not None and gpus > ceiling:
            raise ValueError(f"{nodes} nodes x {profile.gpu.count} GPU(s) = {gpus} GPUs, but team {team[0]!r} can "
                             f"get at most {ceiling} GPUs of pool {profile.pool!r} (its quota"
                             f"{' plus borrowing limit' if team[1].cohort else ''}), so Kueue would never admit "
                             f"the job; ask for at most {ceiling // profile.gpu.count} node(s)")
    pool = cfg.pools.get(profile.pool or "")
    if pool is not None and pool.max_nodes is not None and nodes > pool.max_nodes:
        raise ValueError(f"{nodes} nodes never fit: pool {profile.pool!r} has at most {pool.max_nodes}")
    return nodes
