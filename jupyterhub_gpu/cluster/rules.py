"""Per-profile rules for a server (pure): its idle timeout and age limit, the GPUs it holds and its $/hour.
The culler applies them (services/culler/decide.py); showback multiplies its GPUs and price
(services/usage/accounting.py); both ask it whether its pods' DCGM series are their own (`attribution`)."""
from __future__ import annotations

from dataclasses import dataclass

from jupyterhub_gpu.cluster.dcgm import Attribution, attribution
from jupyterhub_gpu.cluster.prices import hourly_cost
from jupyterhub_gpu.model.dra import alternative_profiles
from jupyterhub_gpu.model.profiles import ProfilesConfig


@dataclass(frozen=True)
class Rule:
    """What the culler applies to servers of one profile (or the default for unknown profiles)."""

    profile: str  # slug, or "unknown" for the default rule
    idle_timeout: int | None  # seconds; None: never culled for inactivity
    max_age: int | None  # seconds; None: no age limit
    is_gpu: bool = False
    gpus: int = 0  # GPUs (or MIG slices / time-sliced shares) the server holds
    hourly_cost: float = 0.0  # $/h of the server's share of its node (prices.hourly_cost)
    sharing: str | None = None  # its pool's sharing strategy: none | time-slicing | mps | mig (None: no GPU)
    gpu_model: str = ""  # its pool's GPU model, e.g. T4
    sharers: int = 1  # pods one GPU of its pool takes (time-slicing / MPS replicas)
    #: A profile with alternatives (dra pools): (GPUs, $/h) of each choice in order, its own first; showback
    #: prices a pod by the one its claim was allocated.
    choices: tuple[tuple[int, float], ...] = ()

    def attribution(self, devices: tuple[str, ...] = ()) -> Attribution:
        """Whether its pods' DCGM series are their own use (dcgm.attribution)."""
        return attribution(self.sharing, self.gpu_model, self.sharers, devices)


def rules_from_profiles(cfg: ProfilesConfig, default_idle_timeout: int | None = None,
                        default_max_age: int | None = None) -> dict[str, Rule]:
    """One rule per profile slug; a profile without idle_timeout / max_age takes the default."""
    rules = {}
    for p in cfg.profiles:
        pool = cfg.pool_of(p)
        gpu_pool = pool if p.gpu and pool is not None and pool.gpu is not None else None
        rules[p.slug] = Rule(
            profile=p.slug,
            idle_timeout=p.idle_timeout or default_idle_timeout or None,
            max_age=p.max_age or default_max_age or None,
            is_gpu=p.is_gpu,
            gpus=p.gpu.count if p.gpu else 0,
            hourly_cost=hourly_cost(cfg, p),
            sharing=gpu_pool.sharing.strategy if gpu_pool else ("none" if p.gpu else None),
            gpu_model=gpu_pool.gpu.model if gpu_pool else "",
            sharers=getattr(gpu_pool.sharing, "replicas", 1) if gpu_pool else 1,
            choices=tuple((q.gpu.count, hourly_cost(cfg, q)) for q in [p, *alts]) if (
                alts := alternative_profiles(p)) else (),
        )
    return rules


def default_rule(idle_timeout: int | None, max_age: int | None) -> Rule:
    return Rule(profile="unknown", idle_timeout=idle_timeout or None, max_age=max_age or None)
