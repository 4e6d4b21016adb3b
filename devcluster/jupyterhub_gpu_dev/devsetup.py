"""Who can log in to `gpuhub dev`, and the summary it prints at start: pure functions of the profiles file.

Profiles and teams are chosen by JupyterHub group, so an admin trying their own file needs users in
exactly that file's groups: by default one `<group>-user` per team and per group the file names
(plus `admin`, in all of them and hub admin), or their own list with `--users FILE`.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from jupyterhub_gpu.model.profiles import MIGSharing, MPSSharing, ProfilesConfig, TimeSlicing

from .nodes import node_name, with_system_pool

ADMIN = "admin"
#: JupyterHub lower-cases user names; keep them to what needs no escaping in URLs and pod names.
USER_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
MAX_USERS = 500
MAX_GROUPS = 64
MAX_GROUP_LEN = 128
MAX_FILE_BYTES = 256 * 1024


class UsersError(ValueError):
    """A bad `--users` file: the message names the entry and what would be valid."""


def file_groups(cfg: ProfilesConfig) -> list[str]:
    """Every group the file names, in file order: teams first, then profiles' `groups:`."""
    seen: dict[str, None] = {}
    for name in cfg.teams:
        seen.setdefault(name, None)
    for p in cfg.profiles:
        for g in p.groups or []:
            seen.setdefault(g, None)
    return list(seen)


def _user_for(group: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", group.lower()).strip("-")[:50] or "group"
    name, n = f"{base}-user", 2
    while name in taken:
        name, n = f"{base}-{n}-user", n + 1
    return name


def demo_users(cfg: ProfilesConfig) -> dict[str, list[str]]:
    """`<group>-user` in that one group for each group of the file, and `admin` in all of them."""
    groups = file_groups(cfg)
    users: dict[str, list[str]] = {}
    for g in groups:
        users[_user_for(g, set(users) | {ADMIN})] = [g]
    users[ADMIN] = groups
    return users


def parse_users(text: str, source: str = "--users") -> dict[str, list[str]]:
    """A YAML mapping of user name to a list of groups, checked entry by entry (every problem listed)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UsersError(f"{source}: not YAML: {e}") from None
    if not isinstance(data, dict) or not data:
        raise UsersError(f"{source}: must be a mapping of user name to a list of groups, "
                         "e.g. `research-user: [research]`")
    if len(data) > MAX_USERS:
        raise UsersError(f"{source}: {len(data)} users; at most {MAX_USERS}")
    problems, out = [], {}
    for name, groups in data.items():
        if not isinstance(name, str) or not USER_NAME.match(name):
            problems.append(f"user {name!r}: a name is lower-case letters, digits, '.', '_' or '-' "
                            "(at most 63, starting with a letter or digit)")
            continue
        if groups is None:
            groups = []
        if not isinstance(groups, list) or not all(isinstance(g, str) and 0 < len(g) <= MAX_GROUP_LEN
                                                   for g in groups):
            problems.append(f"user {name!r}: groups must be a list of group names, e.g. [research]; "
                            f"got {groups!r}"[:300])
            continue
        if len(groups) > MAX_GROUPS:
            problems.append(f"user {name!r}: {len(groups)} groups; at most {MAX_GROUPS}")
            continue
        out[name] = list(dict.fromkeys(groups))
    if problems:
        raise UsersError(f"{source}:\n  " + "\n  ".join(problems))
    return out


def load_users(path: str | Path) -> dict[str, list[str]]:
    try:
        if Path(path).stat().st_size > MAX_FILE_BYTES:
            raise UsersError(f"{path}: larger than {MAX_FILE_BYTES // 1024} KiB; is it the right file?")
        text = Path(path).read_text()
    except OSError as e:
        raise UsersError(f"cannot read users file {str(path)!r}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UsersError(f"{path}: not a text (UTF-8) file") from None
    return parse_users(text, str(path))


def unknown_groups(users: dict[str, list[str]], cfg: ProfilesConfig) -> list[str]:
    """Groups of `users` the profiles file never names (they change nothing: likely a typo)."""
    known = set(file_groups(cfg))
    return sorted({g for groups in users.values() for g in groups} - known)


def login_lines(users: dict[str, list[str]]) -> list[str]:
    return [f"log in as `{name}` (groups: {', '.join(groups) or 'none'}{'; hub admin' if name == ADMIN else ''})"
            for name, groups in users.items()]


def _sharing(pool) -> str:
    s = pool.sharing
    if isinstance(s, TimeSlicing):
        return f"time-sliced {s.replicas} ways"
    if isinstance(s, MPSSharing):
        return f"shared {s.replicas} ways by MPS"
    if isinstance(s, MIGSharing):
        return "MIG " + ", ".join(f"{n}× {sl}" for sl, n in pool.mig_layout.items()) + " per GPU"
    return "whole GPUs"


def node_lines(cfg: ProfilesConfig, nodes_per_pool: int) -> list[str]:
    """One line per pool as simulated nodes: how many, their names, GPUs and sharing."""
    out = []
    for name, pool in with_system_pool(cfg).items():
        names = f"{node_name(name, 0)}…" if nodes_per_pool > 1 else node_name(name, 0)
        what = (f"{pool.gpu.count_per_node}× {pool.gpu.model} each, {_sharing(pool)}" if pool.is_gpu
                else "CPU only")
        out.append(f"  {name}: {nodes_per_pool} node{'s' * (nodes_per_pool != 1)} ({names}), {what}"
                   + (", spot" if pool.spot else ""))
    return out


def quota_lines(cfg: ProfilesConfig) -> list[str]:
    """One line per team: its quota per pool (GPUs) and how much it may borrow."""
    out = []
    for name, team in cfg.teams.items():
        quota = ", ".join(f"{pool} {n}" for pool, n in team.quota.items()) or "no quota"
        borrow = f"; borrows up to {team.borrowing_limit}" if team.borrowing_limit is not None else ""
        out.append(f"  team {name} (namespace {team.namespace}): {quota}{borrow}"
                   + ("; default team" if team.default else ""))
    return out
