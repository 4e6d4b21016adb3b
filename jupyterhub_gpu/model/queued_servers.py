"""Which profiles' servers wait in their team's Kueue queue, and the rule for `preemptible` ones (pure).

Only Kueue preempts a server (every PriorityClass of the install has `preemptionPolicy: Never`), and it only
preempts workloads it admitted: so `preemptible: true` means something only for a profile whose servers are
queued, on a pool some team has quota on. Anything else would promise the user a preemption that never comes,
and the admin a quota that is never freed, so validation refuses it.
"""
from __future__ import annotations

from typing import NamedTuple

from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig


class QueueProblem(NamedTuple):
    at: str
    message: str


def queues_servers(cfg: ProfilesConfig, profile: Profile) -> bool:
    """The admin's choice: the profile's `queue_servers`, else its pool's, else yes for GPU profiles."""
    pool = cfg.pool_of(profile)
    for choice in (profile.queue_servers, pool.queue_servers if pool else None):
        if choice is not None:
            return choice
    return profile.gpu is not None


def preemptible_problems(cfg: ProfilesConfig) -> list[QueueProblem]:
    """`preemptible: true` on a profile no Kueue queue holds: nothing could ever preempt its servers."""
    out = []
    for i, p in enumerate(cfg.profiles):
        if not p.preemptible:
            continue
        at = f"profiles[{i}].preemptible"
        if not p.pool or not queues_servers(cfg, p):
            out.append(QueueProblem(at, f"profile {p.slug!r}: its servers do not wait in a team's Kueue queue (a CPU "
                                        "profile, or `queue_servers: false`), and only Kueue preempts a server, for "
                                        "a job of its team; remove `preemptible`, or queue its servers"))
        elif not any(p.pool in team.quota for team in cfg.teams.values()):
            out.append(QueueProblem(at, f"profile {p.slug!r}: no team has quota on pool {p.pool!r}, so its servers "
                                        "never wait in a Kueue queue and nothing could preempt them; give a team "
                                        "quota there, or remove `preemptible`"))
    return out
