"""Right-sizing hints (pure): "your last 4 sessions on h100-full peaked at 7 GB and 12 % → a100-mig-1g10gb
would do, $3.20/h cheaper". Never without enough evidence: at least `min_sessions` sessions of that profile
with DCGM memory and activity samples.

A candidate must hold the sessions' peak GPU memory with `headroom` to spare and their busiest session's
compute (its share of time at work × the GPUs held) with the same headroom, and cost less per hour. Candidates are whole
GPUs and MIG slices (a time-sliced share's compute depends on its neighbours, so it is never promised). An MPS
share is never a candidate either: its memory is its own (the MPS daemon pins GPU memory / replicas to each
client) but its compute is only capped at 1/replicas of the GPU's threads, with the memory bandwidth and
the one CUDA context shared, so its neighbours decide what it gets, as on a time-sliced GPU. Sessions on
those shared profiles give no hint either: their DCGM series are the device's (its neighbours' use too),
not theirs (cluster/dcgm.py `attribution`).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

from jupyterhub_gpu.cluster.rules import rules_from_profiles
from jupyterhub_gpu.model.gpus import MIG_PROFILE_RE
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig, slice_memory_gb
from jupyterhub_gpu.services.usage.accounting import Lifetime, PodUse, shared_profiles

MIN_SESSIONS = 3
HEADROOM = 1.25
#: MIG compute slices per GPU (A100, H100, H200 all have 7).
MIG_COMPUTE_SLICES = 7


@dataclass(frozen=True)
class Hint:
    user: str
    profile: str
    sessions: int
    peak_memory_gb: float
    peak_activity_pct: float
    suggestion: str
    saving_per_hour: float
    groups: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        who = f" (for groups {', '.join(self.groups)})" if self.groups else ""
        return (f"{self.user}: the last {self.sessions} sessions on {self.profile} peaked at "
                f"{self.peak_memory_gb:.0f} GB GPU memory and were at most {self.peak_activity_pct:.0f} % busy → "
                f"{self.suggestion}{who} would do, ${self.saving_per_hour:.2f}/h cheaper")


def capacity(cfg: ProfilesConfig, p: Profile) -> tuple[float, float] | None:
    """(GPU memory in GB, compute in GPUs) a profile guarantees; None for time-sliced, MPS or CPU profiles."""
    pool = cfg.pool_of(p)
    if p.gpu is None or pool is None or pool.gpu is None or p.gpu.kind in ("time-sliced", "mps"):
        return None
    n = p.gpu.count
    if p.gpu.kind == "mig":
        sl = p.gpu.profile or next(iter(pool.mig_layout))
        return slice_memory_gb(sl) * n, int(MIG_PROFILE_RE.match(sl)["g"]) / MIG_COMPUTE_SLICES * n
    return float(pool.gpu.spec.memory_gib * n), float(n)


def hints(lifetimes: Iterable[Lifetime], used: dict[tuple[str, str], PodUse], cfg: ProfilesConfig,
          costs: dict[str, float], since: datetime, until: datetime, min_sessions: int = MIN_SESSIONS,
          headroom: float = HEADROOM) -> list[Hint]:
    """One hint per (user, profile) that a cheaper profile would have served; `costs`: $/h per slug; `used`:
    per pod over [since, until] (`accounting.parse_used`), so a session is a pod name (restarts merge)."""
    held: dict[tuple[str, str], dict[tuple[str, str], list[float]]] = {}
    for lt in lifetimes:
        h = lt.held_hours(since, until)
        if h > 0:
            held.setdefault((lt.user, lt.profile), {}).setdefault((lt.namespace, lt.pod), [0.0, lt.gpus])[0] += h
    out, shared = [], shared_profiles(rules_from_profiles(cfg))
    for (user, slug), pods in sorted(held.items()):
        if slug in shared:  # the device's series, not the session's: no evidence of what it needed
            continue
        seen = [(used[k], h, gpus) for k, (h, gpus) in pods.items()
                if k in used and used[k].peak_memory_mib is not None]
        if len(seen) < min_sessions or slug not in costs:
            continue
        peak_gb = max(u.peak_memory_mib for u, _, _ in seen) / 1024
        busiest = max(u.used_hours / h for u, h, _ in seen)  # share of its devices' time at work
        compute = busiest * seen[0][2]
        current = costs[slug]
        fits = [(costs.get(p.slug, 0.0), p) for p in cfg.profiles
                if p.slug != slug and (c := capacity(cfg, p)) and c[0] >= peak_gb * headroom
                and c[1] >= compute * headroom and 0 < costs.get(p.slug, 0.0) < current]
        if fits:
            cost, best = min(fits, key=lambda x: (x[0], x[1].slug))
            out.append(Hint(user, slug, len(seen), round(peak_gb, 1), round(100 * busiest, 1), best.slug,
                            round(current - cost, 3), tuple(best.groups or ())))
    return out
