"""What the profile picker shows for each profile (pure): GPU, size, $/hour and live capacity.

The entries are KubeSpawner `profile_list` dicts with an extra `gpuhub` key that our form
template (form.html) reads; KubeSpawner itself ignores it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jupyterhub_gpu.builders import pods as podspec
from jupyterhub_gpu.builders.kueue import server_queue
from jupyterhub_gpu.cluster.prices import hourly_cost
from jupyterhub_gpu.hub.capacity import ProfileCapacity
from jupyterhub_gpu.hub.capacity_text import slot_noun, team_line, team_outlook
from jupyterhub_gpu.model.choices import default_choice_for
from jupyterhub_gpu.model.dra import alternative_profiles
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig, slice_memory_gb
from jupyterhub_gpu.model.quantities import human_bytes
from jupyterhub_gpu.model.wait_estimate import ETA, frees_text

if TYPE_CHECKING:
    from jupyterhub_gpu.hub.team_quota import TeamView


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
    if profile.gpu.kind == "mps":
        return (f"{name} · MPS, up to {pool.sharing.replicas} users per GPU · "
                f"{model.memory_gib / pool.sharing.replicas:.3g} GB GPU memory of its own, compute shared")
    many = f"{n} x " if n > 1 else ""
    return f"{many}{name} · whole GPU · {model.memory_gib * n} GB GPU memory"


PREEMPTIBLE_LINE = ("Preemptible: a training job of your team that needs the GPU may stop this server. You are "
                   "warned first and JupyterLab saves your open notebooks; variables in running kernels are lost.")


def preemptible_line(cfg: ProfilesConfig, profile: Profile, groups: list[str]) -> str:
    """The picker's warning for a preemptible profile, only where it is true for this user: their server waits in
    their team's queue (a server outside Kueue is never preempted)."""
    return PREEMPTIBLE_LINE if profile.preemptible and server_queue(cfg, profile, groups) else ""


def size_line(profile: Profile, traits: dict[str, Any] | None = None) -> str:
    """'2 CPU · 8 GiB RAM · 512 MiB /dev/shm'; CPU and RAM as the server gets them (`traits`: the admin's
    settings with the profile's on top), left out when neither sets them."""
    traits = traits if traits is not None else podspec.resource_overrides(profile)
    parts = []
    if traits.get("cpu_guarantee"):
        parts.append(f"{float(traits['cpu_guarantee']):g} CPU")
    if traits.get("mem_guarantee") or traits.get("mem_limit"):
        mem = traits.get("mem_guarantee") or traits["mem_limit"]
        own = int(profile.shm) if profile.own_shm else 0
        parts.append(f"{human_bytes(int(mem) - own if 'memory' in profile.model_fields_set else mem)} RAM")
    shm = f"{human_bytes(profile.shm)} /dev/shm" if profile.own_shm else "/dev/shm shared (MPS)"
    return " · ".join(parts + [shm])


def option_entries(profile: Profile, groups: list[str]) -> dict[str, Any]:
    """KubeSpawner `profile_options` for this user: the choices their groups allow, one default, and the
    typed value only for the groups named in `unlisted_choice`."""
    out = {}
    for name, option in profile.options.items():
        allowed = option.choices_for(groups)
        default = default_choice_for(option, groups)
        entry: dict[str, Any] = {"display_name": option.display_name, "choices": {
            key: {"display_name": c.display_name, "default": key == default,
                  "kubespawner_override": c.kubespawner_override.traits()} for key, c in allowed.items()}}
        unlisted = option.unlisted_for(groups)
        entry["unlisted_choice"] = {"enabled": False}
        if unlisted is not None:
            entry["unlisted_choice"] = {
                "enabled": True, "display_name": unlisted.display_name,
                "display_name_in_choices": unlisted.display_name_in_choices,
                "validation_regex": unlisted.validation_regex,  # the hub checks it with fullmatch first
                "validation_message": unlisted.validation_message or f"must match {unlisted.validation_regex}",
                "kubespawner_override": unlisted.kubespawner_override.traits()}
        out[name] = entry
    return out


def price_line(cfg: ProfilesConfig, profile: Profile, cost: float) -> str:
    """'$8.00/hour', and for a profile with alternatives what each other choice costs if that is what a server
    gets: '$8.00/hour; $4.00/hour with an A100 80GB MIG (DRA) 3g.40gb slice instead'."""
    said = [f"${cost:.2f}/hour"] if cost else []
    for choice in alternative_profiles(profile):
        if (other := hourly_cost(cfg, choice)) and other != cost:
            one = slot_noun(choice, cfg.pool_of(choice), plural=choice.gpu.count != 1)
            said.append(f"${other:.2f}/hour with {choice.gpu.count} {one} instead")
    return "; ".join(said)


def profile_entry(cfg: ProfilesConfig, profile: Profile, default: bool, capacity: ProfileCapacity | None,
                  groups: list[str] = (), admin: dict[str, Any] | None = None, eta: ETA | None = None,
                  degraded: str | None = None, hint: str | None = None,
                  team: "TeamView | None" = None) -> dict[str, Any]:
    """One KubeSpawner `profile_list` entry for a user in `groups`; `admin`: the admin's CPU/memory settings;
    `eta`: the pool's wait estimate (`PoolHistory`), shown when the pool is full; `degraded`: the line for
    a pool with a node whose GPU check failed (`GPUFaults`); `hint`: this user's right-sizing line
    (`PickerHints`); `team`: the user's team's Kueue quota when the profile's servers are queued (`TeamQuotas`)."""
    cost = hourly_cost(cfg, profile)
    overrides = podspec.spawner_overrides(cfg, profile, admin, list(groups))
    info: dict[str, Any] = {
        "gpu": gpu_line(cfg, profile),
        "kind": profile.gpu.kind if profile.gpu else "cpu",
        "size": size_line(profile, {**(admin or {}), **overrides}),
        "cost": price_line(cfg, profile, cost),
        "idle": f"stops after {_duration(profile.idle_timeout)} idle" if profile.idle_timeout else "",
        "degraded": degraded or "",
        "hint": hint or "",
        "preemptible": preemptible_line(cfg, profile, list(groups)),
    }
    if capacity is not None and not capacity.known:  # stale informers: no numbers rather than wrong ones
        info.update(capacity="unknown — capacity not available right now", unknown=True,
                    outlook="the cluster is not answering; you can still choose, your server starts when it can")
    elif capacity is not None:
        info.update(capacity=capacity.summary, outlook=capacity.outlook, full=capacity.full,
                    free=capacity.free_slots, total=capacity.total_slots, waiting=capacity.waiting)
        if capacity.full and capacity.resource:  # "usually frees in ~12 min (p90 ~40 min)" / "no estimate yet"
            info.update(eta=frees_text(eta), eta_p50_s=round(eta.p50_s) if eta and eta.known else "",
                        eta_p90_s=round(eta.p90_s) if eta and eta.known else "")
    if team is not None:  # a queued profile: the team's quota may be the limit, whatever the pool has free
        info["team"] = team_line(team.team, team.room, slot_noun(profile, cfg.pool_of(profile)))
        info["team_unknown"] = team.room is None
        if capacity is not None and capacity.known:
            info["outlook"], info["team_limit"] = team_outlook(team.room, profile.gpu.count, capacity.outlook,
                                                               team.pending)
    return {
        "slug": profile.slug,
        "display_name": profile.display_name,
        "description": profile.description,
        "default": default,
        "kubespawner_override": overrides,
        **({"profile_options": option_entries(profile, list(groups))} if profile.options else {}),
        "gpuhub": info,
    }
