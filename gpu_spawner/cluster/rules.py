"""Per-profile rules for a server (pure): its idle timeout and age limit, the GPUs it holds and its $/hour.
The culler applies them (services/culler/decide.py); showback multiplies its GPUs and price
(services/usage/accounting.py)."""
from __future__ import annotations

from dataclasses import dataclass

from gpu_spawner.cluster.prices import hourly_cost
from gpu_spawner.model.profiles import ProfilesConfig


@dataclass(frozen=True)
class Rule:
    """What the culler applies to servers of one profile (or the default for unknown profiles)."""

    profile: str  # slug, or "unknown" for the default rule
    idle_timeout: int | None  # seconds; None: never culled for inactivity
    max_age: int | None  # seconds; None: no age limit
    is_gpu: bool = False
    gpus: int = 0  # GPUs (or MIG slices / time-sliced shares) the server holds
    hourly_cost: float = 0.0  # $/h of the server's share of its node (prices.hourly_cost)


def rules_from_profiles(cfg: ProfilesConfig, default_idle_timeout: int | None = None,
                        default_max_age: int | None = None) -> dict[str, Rule]:
    """One rule per profile slug; a profile without idle_timeout / max_age takes the default."""
    rules = {}
    for p in cfg.profiles:
        rules[p.slug] = Rule(
            profile=p.slug,
            idle_timeout=p.idle_timeout or default_idle_timeout or None,
            max_age=p.max_age or default_max_age or None,
            is_gpu=p.is_gpu,
            gpus=p.gpu.count if p.gpu else 0,
            hourly_cost=hourly_cost(cfg, p),
        )
    return rules


def default_rule(idle_timeout: int | None, max_age: int | None) -> Rule:
    return Rule(profile="unknown", idle_timeout=idle_timeout or None, max_age=max_age or None)
