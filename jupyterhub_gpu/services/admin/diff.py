"""What the admin console shows of a profiles file, and a new file's dry run against the loaded one (pure).

`offered(cfg)`: per group, the profiles its members see (as the picker offers them) with each one's pool, GPU,
price, idle timeout, priority ceiling and options. `diff(old, new)`: the profiles added, removed and changed per
group, and the Kueue objects (builders/kueue.py's rendering of each file) that would be created, deleted or
changed. `servers_losing_profile(users, new)`: the running servers whose profile the new file no longer has.
`check_text(text)`: every problem as `gpuhub validate` lists them, or the parsed file.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from jupyterhub_gpu.builders.kueue import render_kueue
from jupyterhub_gpu.cluster.prices import hourly_cost
from jupyterhub_gpu.model.activity import DEFAULT_ACTIVITY_INTERVAL, idle_timeout_problems
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig
from jupyterhub_gpu.model.validation import Problem, ProfilesError, parse_profiles_text

#: The row of users in none of the file's groups: they see the profiles without `groups`.
EVERYONE = "(users in no listed group)"
FIELDS = ("display_name", "pool", "gpu", "price", "idle_timeout", "priority_ceiling", "options")


def checksum(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def _duration(seconds: int | None) -> str:
    if seconds is None:
        return "none"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _gpu(cfg: ProfilesConfig, p: Profile) -> str:
    if p.gpu is None:
        return "none"
    pool = cfg.pool_of(p)
    model = pool.gpu.model if pool is not None and pool.gpu is not None else "?"
    what = f"{p.gpu.kind} {p.gpu.profile}" if p.gpu.profile else p.gpu.kind
    return f"{p.gpu.count} × {model} ({what})"


def _options(p: Profile) -> str:
    parts = []
    for name, opt in p.options.items():
        choices = ", ".join(opt.choices)
        typed = " or typed" if opt.unlisted_choice is not None else ""
        parts.append(f"{name}: {choices}{typed}")
    return "; ".join(parts) or "none"


def profile_row(cfg: ProfilesConfig, p: Profile, groups: list[str]) -> dict[str, str]:
    """What one group's members see of profile `p`, as text."""
    return {"display_name": p.display_name, "pool": p.pool or "default", "gpu": _gpu(cfg, p),
            "price": f"${hourly_cost(cfg, p):.2f}/h", "idle_timeout": _duration(p.idle_timeout),
            "priority_ceiling": cfg.max_priority_for(p, groups), "options": _options(p)}


def groups_of(cfg: ProfilesConfig) -> list[str]:
    """Every group the file names (profiles, option choices, priority ceilings, teams), sorted."""
    found: set[str] = set(cfg.group_max_priority) | set(cfg.teams)
    for p in cfg.profiles:
        found.update(p.groups or [])
        for opt in p.options.values():
            for choice in opt.choices.values():
                found.update(choice.groups or [])
    return sorted(found)


def offered(cfg: ProfilesConfig, groups: Iterable[str] | None = None) -> dict[str, dict[str, dict[str, str]]]:
    """Group (the file's, or `groups`) → slug → row, in the picker's order; EVERYONE first."""
    out = {}
    for group in [EVERYONE, *(groups_of(cfg) if groups is None else groups)]:
        groups = [] if group == EVERYONE else [group]
        out[group] = {p.slug: profile_row(cfg, p, groups) for p in cfg.profiles_for(groups)}
    return out


@dataclass
class GroupDiff:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)  # slug → "field: old → new"

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


@dataclass
class Diff:
    groups: dict[str, GroupDiff] = field(default_factory=dict)  # only groups with a change
    kueue_added: list[str] = field(default_factory=list)       # "Kind namespace/name"
    kueue_removed: list[str] = field(default_factory=list)
    kueue_changed: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.groups or self.kueue_added or self.kueue_removed or self.kueue_changed)


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def kueue_objects(cfg: ProfilesConfig, hub_namespace: str | None = None) -> dict[str, dict]:
    objs = render_kueue(cfg, hub_namespace) if hub_namespace else render_kueue(cfg)
    return {_key(o): o for o in objs}


def diff(old: ProfilesConfig, new: ProfilesConfig, hub_namespace: str | None = None) -> Diff:
    """What changes for users (per group) and in the cluster (Kueue objects) if `new` replaces `old`."""
    out = Diff()
    # a group one file no longer names still exists in the hub: its members then see what everyone sees
    names = sorted(set(groups_of(old)) | set(groups_of(new)))
    before, after = offered(old, names), offered(new, names)
    for group in after:
        was, now = before[group], after[group]
        d = GroupDiff(added=[s for s in now if s not in was], removed=[s for s in was if s not in now])
        for slug in (s for s in now if s in was):
            changes = [f"{f}: {was[slug][f]} → {now[slug][f]}" for f in FIELDS if was[slug][f] != now[slug][f]]
            if changes:
                d.changed[slug] = changes
        if d:
            out.groups[group] = d
    ko, kn = kueue_objects(old, hub_namespace), kueue_objects(new, hub_namespace)
    out.kueue_added = [k for k in kn if k not in ko]
    out.kueue_removed = [k for k in ko if k not in kn]
    out.kueue_changed = [k for k in kn if k in ko and kn[k] != ko[k]]
    return out


def servers_losing_profile(users: Iterable[Mapping[str, Any]], new: ProfilesConfig) -> list[str]:
    """'user/server (profile)' of each server (the hub API's user models) whose profile `new` does not have."""
    out = []
    for user in users:
        servers = user.get("servers") if isinstance(user, Mapping) else None
        for name, server in (servers or {}).items() if isinstance(servers, Mapping) else ():
            options = server.get("user_options") if isinstance(server, Mapping) else None
            slug = options.get("profile") if isinstance(options, Mapping) else None
            if isinstance(slug, str) and slug and slug not in new.by_slug:
                out.append(f"{user.get('name')}/{name} ({slug})")
    return sorted(out)


def check_text(text: str, activity_interval: int = DEFAULT_ACTIVITY_INTERVAL) -> tuple[ProfilesConfig | None,
                                                                                        list[str]]:
    """(the file, []) or (None, every problem as `gpuhub validate` prints them)."""
    try:
        cfg = parse_profiles_text(text, source="pasted file")
    except ProfilesError as e:
        return None, [str(p) for p in e.problems]
    problems: list[Problem] = idle_timeout_problems(cfg, activity_interval)
    if problems:
        return None, [str(p) for p in problems]
    return cfg, []
