"""`gpuhub doctor`: can each team use its live quota in full? (pure: the live ClusterQueues in, rows out)

A ClusterQueue applied from an older file, or edited by hand, may give a team GPUs without the CPU and
memory its servers ask for: Kueue then holds the second server on CPU while a slice is free. Per team and
pool, the live ClusterQueue's CPU, memory and scratch-disk quota is compared with what the profiles the team
may choose there ask for with its live GPU quota (`model/quota.py`, what `render kueue` renders).
"""
from __future__ import annotations

from decimal import Decimal

from jupyterhub_gpu.builders.hardening import MAX_EPHEMERAL_STORAGE
from jupyterhub_gpu.builders.kueue import EPHEMERAL, cluster_queue_name
from jupyterhub_gpu.model import quota
from jupyterhub_gpu.model.kueue_words import flavor_usage
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig
from jupyterhub_gpu.model.quantities import human_bytes, parse
from jupyterhub_gpu.tools.doctor_checks import APPLY_KUEUE, FAIL, OK, Check, Snapshot


def _cpu(value: Decimal) -> str:
    return f"{float(value):.3g} CPUs"


def _servers(p: Profile, units: int, live: dict[str, Decimal]) -> int:
    """Servers of `p` the live quota admits at once: its GPUs, CPU and memory, whichever runs out first."""
    fits = [units // p.gpu.count]
    if p.cpu:
        fits.append(int(live.get("cpu", Decimal(0)) // p.cpu))
    if p.memory_limit:
        fits.append(int(live.get("memory", Decimal(0)) // p.memory_limit))
    return min(fits)


def check_team_pool(cfg: ProfilesConfig, team_name: str, pool_name: str, cq: dict, file: str) -> Check:
    """One row: the team's live quota on the pool, usable in full or what falls short and by how much."""
    name = f"quota {team_name} on {pool_name}"
    live = {r: nominal for r, (_, nominal) in flavor_usage(cq, pool_name).items()}
    resources = [r for r in cfg.pools[pool_name].slots_per_node() if r in live]
    if not resources:
        return Check("kueue", name, FAIL, f"ClusterQueue {cluster_queue_name(team_name)} has no quota on flavor "
                                          f"{pool_name}", APPLY_KUEUE.format(file=file))
    units = int(max(live[r] for r in resources))
    need = quota.need(cfg, team_name, pool_name, units)
    scratch = parse(MAX_EPHEMERAL_STORAGE) * need.pods
    short = []
    if live.get("cpu", Decimal(0)) < need.cpu:
        short.append(f"CPU {_cpu(live.get('cpu', Decimal(0)))} of the {_cpu(need.cpu)} needed")
    if live.get("memory", Decimal(0)) < need.memory:
        short.append(f"memory {human_bytes(live.get('memory', 0))} of the {human_bytes(need.memory)} needed")
    if live.get(EPHEMERAL, Decimal(0)) < scratch:
        short.append(f"scratch disk {human_bytes(live.get(EPHEMERAL, 0))} of the {human_bytes(scratch)} that "
                     f"{need.pods} jobs may ask ({MAX_EPHEMERAL_STORAGE} each at most)")
    profiles = quota.team_profiles(cfg, team_name, pool_name)
    if not short:
        return Check("kueue", name, OK, f"usable in full: {units} GPU units with {_cpu(need.cpu)} / "
                                        f"{human_bytes(need.memory)} for what its {len(profiles)} profile(s) ask")
    worst = min(profiles, key=lambda p: _servers(p, units, live) / max(units // p.gpu.count, 1))
    ran, of = _servers(worst, units, live), units // worst.gpu.count
    return Check("kueue", name, FAIL,
                 f"a GPU quota of {units} that cannot be used in full: {'; '.join(short)}, so only {ran} of {of} "
                 f"servers or jobs of {worst.slug!r} ({float(worst.cpu):g} CPUs / {human_bytes(worst.memory_limit)} "
                 "each) run at once and Kueue holds the rest while GPUs are free",
                 f"{APPLY_KUEUE.format(file=file)} (the file renders what its profiles ask)")


def check_quota_usable(cfg: ProfilesConfig, snap: Snapshot, file: str) -> list[Check]:
    """One row per team and pool it has quota on, for each team whose ClusterQueue is live."""
    if not snap.kueue:
        return []  # check_kueue_crds / check_kueue_objects said why
    live = {q["metadata"]["name"]: q for q in snap.kueue.get("ClusterQueue") or []}
    return [check_team_pool(cfg, team_name, pool_name, live[cluster_queue_name(team_name)], file)
            for team_name, team in cfg.teams.items() if cluster_queue_name(team_name) in live
            for pool_name, units in team.quota.items() if units and pool_name in cfg.pools]
