"""Turn a profiles file into a `ProfilesConfig`, or into EVERY problem it has at once.

Each pool, profile and team is parsed on its own so one bad entry does not hide the next;
cross-references (pool names, MIG slices of the pool's GPU, quotas) are then checked on the
entries that parsed, and last whether each team's quota fits its pool's nodes (model/quota.py).
Every problem carries a path, the bad value and what would be valid.
"""
from __future__ import annotations

import difflib
import re
import typing
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from jupyterhub_gpu.model import datasets, dra, gpu_stack, identity, multinode, quota, sharing_rules, warm_schedule
from jupyterhub_gpu.model.gpus import GPU_MODELS
from jupyterhub_gpu.model.profiles import (
    DNS_LABEL,
    MIGSharing,
    MPSSharing,
    NoSharing,
    Pool,
    Profile,
    ProfilesConfig,
    Team,
    TimeSlicing,
)
from jupyterhub_gpu.model.quantities import human_bytes
from jupyterhub_gpu.model.queued_servers import preemptible_problems, queues_servers


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ProfilesError(ValueError):
    """A profiles file with problems; `str()` lists all of them, one per line."""

    def __init__(self, problems: list[Problem], source: str | None = None):
        self.problems = problems
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(f"{head}{len(problems)} problem(s) in the profiles file:\n" + "\n".join(
            f"  {p}" for p in problems))


NAME_RULE = "lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters"
KIND_FOR_STRATEGY = {NoSharing: "full", TimeSlicing: "time-sliced", MPSSharing: "mps", MIGSharing: "mig"}
TOP_LEVEL_KEYS = [k for k, f in ProfilesConfig.model_fields.items() if not f.exclude]


# ---------------------------------------------------------------- pydantic errors → problems
def _unwrap(t: Any) -> Any:
    while typing.get_origin(t) is typing.Annotated:
        t = typing.get_args(t)[0]
    return t


def _is_model(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _walk(model: type[BaseModel], loc: tuple) -> tuple[list[str], list[str] | None]:
    """Display parts of a pydantic error location (union tags dropped) and, when the location ends
    inside a model, that model's field names (the valid keys)."""
    t: Any = model
    parts: list[str] = []
    for part in loc:
        t = _unwrap(t)
        origin = typing.get_origin(t)
        if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
            members = [_unwrap(m) for m in typing.get_args(t) if m is not type(None)]
            tagged = [m for m in members if _is_model(m) and _tag_of(m) == part]
            if tagged:
                t = tagged[0]
                continue  # the discriminator value is not part of the user's path
            t = next((m for m in members if _is_model(m)), members[0])
            origin = typing.get_origin(t)
        if _is_model(t):
            field = t.model_fields.get(part) if isinstance(part, str) else None
            parts.append(f".{part}")
            t = field.annotation if field else None
        elif origin is dict:
            parts.append(f".{part}")
            t = typing.get_args(t)[1]
        elif origin is list:
            parts.append(f"[{part}]")
            t = typing.get_args(t)[0]
        else:
            parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
            t = None
    t = _unwrap(t)
    if typing.get_origin(t) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        t = next((_unwrap(m) for m in typing.get_args(t) if _is_model(_unwrap(m))), None)
    return parts, (list(t.model_fields) if _is_model(t) else None)


def _tag_of(model: type[BaseModel]) -> str | None:
    f = model.model_fields.get("strategy")
    args = typing.get_args(f.annotation) if f else ()
    return args[0] if args else None


def _problem_from_pydantic(prefix: str, model: type[BaseModel], err: dict) -> Problem:
    loc = tuple(err["loc"])
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    if kind == "extra_forbidden":
        parts, valid = _walk(model, loc[:-1])
        key = loc[-1]
        path = prefix + "".join(parts) + f".{key}"
        near = difflib.get_close_matches(str(key), valid or [], n=1)
        hint = f" did you mean {near[0]!r}?" if near else ""
        return Problem(path.lstrip("."), f"unknown key {key!r};{hint} valid keys: {', '.join(valid or [])}")
    parts, _ = _walk(model, loc)
    path = (prefix + "".join(parts)).lstrip(".")
    if kind == "missing":
        _, valid = _walk(model, loc[:-1])
        return Problem(path, "is required")
    if kind == "literal_error":
        return Problem(path, f"{value!r} is not valid; valid: {ctx.get('expected', '').replace(' or ', ', ')}")
    if kind == "union_tag_invalid":
        return Problem(path, f"{ctx.get('tag')!r} is not a valid {ctx.get('discriminator', '').strip(chr(39))}; "
                             f"valid: {ctx.get('expected_tags', '').replace(' or ', ', ')}")
    if kind == "union_tag_not_found":
        return Problem(path, f"needs {ctx.get('discriminator')} (none, time-slicing, mps or mig)")
    if kind == "value_error":
        return Problem(path, str(ctx.get("error", err["msg"])))
    if kind == "string_pattern_mismatch":
        return Problem(path, f"{value!r} is not a valid name: {NAME_RULE}")
    if kind in ("too_short",) and isinstance(value, (list, dict, str)):
        return Problem(path, f"{value!r} must not be empty")
    return Problem(path, f"{value!r}: {err['msg'][0].lower()}{err['msg'][1:]}")


def _parse_each(model: type[BaseModel], data: Any, prefix: str, problems: list[Problem]):
    try:
        return TypeAdapter(model).validate_python(data)
    except ValidationError as e:
        problems.extend(_problem_from_pydantic(prefix, model, err) for err in e.errors())
        return None


# ---------------------------------------------------------------- cross-reference checks
def _check_pool(name: str, pool: Pool, out: list[Problem]) -> bool:
    """Check one parsed pool; False when its GPU or MIG setup is broken, so that profiles and quotas
    naming it are not checked against nonsense (its own problem is already reported)."""
    at = f"pools.{name}"
    if not re.fullmatch(DNS_LABEL, name):
        out.append(Problem(at, f"pool name {name!r} is not valid: {NAME_RULE}"))
    if pool.max_nodes is not None and pool.max_nodes < pool.min_nodes:
        out.append(Problem(f"{at}.max_nodes", f"{pool.max_nodes} is below min_nodes {pool.min_nodes}"))
    out.extend(Problem(x.at, x.message) for x in warm_schedule.pool_problems(name, pool))
    out.extend(Problem(x.at, x.message) for x in gpu_stack.pool_problems(name, pool) + dra.pool_problems(name, pool))
    if pool.gpu is None:
        if not isinstance(pool.sharing, NoSharing):
            out.append(Problem(f"{at}.sharing", f"{pool.sharing.strategy!r} needs a GPU; add gpu: {{model: ..., "
                                                "count_per_node: ...} or remove sharing"))
        return True
    if pool.gpu.model not in GPU_MODELS:
        out.append(Problem(f"{at}.gpu.model", f"{pool.gpu.model!r} is not a known GPU model; valid: "
                                              f"{', '.join(GPU_MODELS)}"))
        return False
    if not any(t.effect in ("NoSchedule", "NoExecute") for t in pool.effective_taints):
        out.append(Problem(f"{at}.taints", "a GPU pool needs a NoSchedule taint (e.g. {key: sku, value: gpu, "
                                           "effect: NoSchedule}) so CPU-only pods stay off its nodes"))
    rules = sharing_rules.pool_problems(name, pool)
    out.extend(Problem(x.at, x.message) for x in rules)
    return not rules


def _check_priority_ceilings(data: dict, priorities: dict[str, int], profiles: list[tuple[int, Profile]],
                             out: list[Problem]) -> None:
    """`default_priority`, `group_max_priority` and each profile's `max_priority` name priorities of the
    file, and no profile's ceiling is below its own priority."""
    valid = ", ".join(priorities)
    default = data.get("default_priority")
    if default is not None and default not in priorities:
        out.append(Problem("default_priority", f"{default!r} is not a priority; valid: {valid}"))
        default = None
    fallback = default or ("normal" if "normal" in priorities or not priorities
                           else min(priorities, key=priorities.__getitem__))
    groups = data.get("group_max_priority")
    if groups is not None and not isinstance(groups, dict):
        out.append(Problem("group_max_priority", "must map a JupyterHub group to a priority, e.g. "
                                                 f"{{ml-leads: high}}; got {type(groups).__name__}"))
    for group, prio in (groups if isinstance(groups, dict) else {}).items():
        if not isinstance(prio, str) or prio not in priorities:
            out.append(Problem(f"group_max_priority.{group}", f"{prio!r} is not a priority; valid: {valid}"))
    for i, p in profiles:
        if p.max_priority is None:
            continue
        if p.max_priority not in priorities:
            out.append(Problem(f"profiles[{i}].max_priority",
                               f"{p.max_priority!r} is not a priority; valid: {valid}"))
            continue
        own = p.priority if p.priority in priorities else fallback
        if priorities[p.max_priority] < priorities.get(own, priorities[p.max_priority]):
            higher = [n for n, v in priorities.items() if v >= priorities[own]]
            out.append(Problem(f"profiles[{i}].max_priority", f"{p.max_priority!r} is below the profile's own priority "
                                                              f"{own!r}; valid: {', '.join(higher)}"))


def _check_options(at: str, p: Profile, out: list[Problem]) -> None:
    """Each option has one default open to everyone allowed the profile, and a typed value is checked by a
    regex that compiles and lands in the override through `{value}`."""
    for name, option in p.options.items():
        where = f"{at}.options.{name}"
        if name == "profile" or "--" in name:
            out.append(Problem(where, f"{name!r} is not a valid option name: 'profile' and names with '--' "
                                      "are KubeSpawner's own form keys"))
        defaults = [k for k, c in option.choices.items() if c.default]
        if len(defaults) > 1:
            out.append(Problem(f"{where}.choices.{defaults[1]}.default", f"only one choice may be the default; "
                                                                          f"{defaults[0]!r} already is"))
        first = option.default_choice
        if option.choices[first].groups is not None:
            out.append(Problem(f"{where}.choices.{first}.groups", f"{first!r} is the default choice, so everyone "
                               "allowed the profile must be able to pick it; remove its groups or make another "
                               "choice the default"))
        unlisted = option.unlisted_choice
        if unlisted is None:
            continue
        try:
            re.compile(unlisted.validation_regex)
        except re.error as e:
            out.append(Problem(f"{where}.unlisted_choice.validation_regex",
                               f"{unlisted.validation_regex!r} is not a regular expression: {e}"))
        templates = _strings(unlisted.kubespawner_override.traits())
        try:
            for t in templates:
                t.format(value="x")
        except (KeyError, IndexError, ValueError) as e:
            bad = f"unknown placeholder {{{e.args[0]}}}" if isinstance(e, KeyError) else str(e)
            out.append(Problem(f"{where}.unlisted_choice.kubespawner_override", f"{bad}; the only placeholder "
                               "is {value}"))
            continue
        if not any("{value}" in t for t in templates):
            out.append(Problem(f"{where}.unlisted_choice.kubespawner_override", "never uses the typed value; write "
                               "{value} where it goes, e.g. image: '{value}'"))


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []


def _check_profile(i: int, p: Profile, cfg_pools: dict[str, Pool], priorities: dict[str, int] | None,
                   out: list[Problem], broken: set[str] = frozenset()) -> None:
    at = f"profiles[{i}]"
    pool = cfg_pools.get(p.pool) if p.pool else None
    if p.pool and pool is None and p.pool not in broken:
        out.append(Problem(f"{at}.pool", f"{p.pool!r} is not a pool of this file; pools: "
                                         f"{', '.join(cfg_pools) or '(none)'}"))
    if p.priority and priorities is not None and p.priority not in priorities:
        out.append(Problem(f"{at}.priority", f"{p.priority!r} is not a priority; valid: {', '.join(priorities)}"))
    if p.cpu_limit is not None and p.cpu_limit < p.cpu:
        out.append(Problem(f"{at}.cpu_limit", f"{float(p.cpu_limit):g} is below cpu {float(p.cpu):g}; "
                                              f"valid: at least {float(p.cpu):g}"))
    _check_options(at, p, out)
    out.extend(Problem(x.at, x.message) for x in multinode.profile_problems(at, p, pool))
    if p.pool in broken:
        return  # the pool's own problems are reported at pools.<name>; checking against it would mislead
    if p.gpu is None:
        if pool is not None and pool.is_gpu:
            out.append(Problem(f"{at}.pool", f"{p.pool!r} is a GPU pool but this profile asks for no GPU; add gpu: "
                                             "{kind: ..., count: 1} or choose a CPU pool (or no pool)"))
        _check_fits(at, p, pool, out)
        return
    if not p.pool:
        gpu_pools = [n for n, q in cfg_pools.items() if q.is_gpu]
        out.append(Problem(f"{at}.pool",
                           f"a GPU profile must name its pool; GPU pools: {', '.join(gpu_pools) or '(none)'}"))
        return
    if pool is None or pool.gpu is None or pool.gpu.model not in GPU_MODELS:
        if pool is not None and pool.gpu is None:
            out.append(Problem(f"{at}.gpu", f"pool {p.pool!r} has no GPUs; remove gpu or choose a GPU pool"))
        return
    expected = KIND_FOR_STRATEGY[type(pool.sharing)]
    if p.gpu.kind != expected:
        out.append(Problem(f"{at}.gpu.kind", f"{p.gpu.kind!r} does not match pool {p.pool!r} "
                                             f"(sharing {pool.sharing.strategy!r}); valid: {expected}"))
        return
    model = pool.gpu.spec
    if p.gpu.kind != "mig" and p.gpu.profile is not None:
        out.append(Problem(f"{at}.gpu.profile", f"{p.gpu.profile!r}: only MIG profiles name a slice; remove it"))
    if p.gpu.kind == "mig":
        offered = pool.mig_layout
        sl = p.gpu.profile
        if sl is None and pool.sharing.mig_strategy == "mixed":
            out.append(Problem(f"{at}.gpu.profile", f"is required for a mixed-strategy MIG pool; pool {p.pool!r} "
                                                    f"offers: {', '.join(offered)}"))
            return
        if sl is not None and sl not in model.mig:
            out.append(Problem(f"{at}.gpu.profile", f"{sl!r} is not a MIG profile of {model.name}; valid: "
                                                    f"{', '.join(model.mig)}"))
            return
        if sl is not None and offered and sl not in offered:
            out.append(Problem(f"{at}.gpu.profile", f"{sl!r} is not offered by pool {p.pool!r} (layout "
                                                    f"{pool.mig_config_name()}); offered: {', '.join(offered)}"))
            return
    per_node = pool.slots_per_node().get(pool.resource_name(p.gpu.profile), 0)
    if shm := sharing_rules.shm_problem(at, p, pool):
        out.append(Problem(shm.at, shm.message))
    if shared := sharing_rules.count_problem(at, p, pool):
        out.append(Problem(shared.at, shared.message))
    elif p.gpu.kind == "full" and p.gpu.count > pool.gpu.count_per_node:
        out.append(Problem(f"{at}.gpu.count", f"{p.gpu.count} GPUs never fit: a node of pool {p.pool!r} has "
                                              f"{pool.gpu.count_per_node}; valid: 1..{pool.gpu.count_per_node}"))
    elif p.gpu.count > per_node:
        out.append(Problem(f"{at}.gpu.count", f"{p.gpu.count} never fits: a node of pool {p.pool!r} offers "
                                              f"{per_node} x {pool.resource_name(p.gpu.profile)}; "
                                              f"valid: 1..{per_node}"))
    _check_fits(at, p, pool, out)


def _check_fits(at: str, p: Profile, pool: Pool | None, out: list[Problem]) -> None:
    """A profile bigger than one node of its pool could never be scheduled."""
    shape = pool.shape() if pool is not None else None
    if shape is None:  # an unknown node size is unknown, not small: the live checks read the real nodes
        return
    if p.cpu > shape.cpu:
        out.append(Problem(f"{at}.cpu", f"{p.cpu} CPUs never fit: a node of pool {p.pool!r} has {shape.cpu}"))
    if p.memory_limit > shape.memory:
        out.append(Problem(f"{at}.memory", f"memory + shm = {human_bytes(p.memory_limit)} never fits: a node of "
                                           f"pool {p.pool!r} has {human_bytes(shape.memory)}"))


def _check_team(name: str, team: Team, pools: dict[str, Pool], out: list[Problem],
                broken: set[str] = frozenset()) -> None:
    at = f"teams.{name}"
    if not re.fullmatch(DNS_LABEL, name):
        out.append(Problem(at, f"team name {name!r} is not valid: {NAME_RULE}"))
    gpu_pools = [n for n, p in pools.items() if p.is_gpu]
    for pool_name in team.quota:
        if pool_name in broken:
            continue  # reported at pools.<name>
        if pool_name not in pools:
            out.append(Problem(f"{at}.quota.{pool_name}", f"{pool_name!r} is not a pool of this file; GPU pools: "
                                                          f"{', '.join(gpu_pools) or '(none)'}"))
        elif not pools[pool_name].is_gpu:
            out.append(Problem(f"{at}.quota.{pool_name}", f"{pool_name!r} is a CPU pool; quotas are for GPU pools: "
                                                          f"{', '.join(gpu_pools)}"))
    if team.borrowing_limit is not None and team.cohort is None:
        out.append(Problem(f"{at}.borrowing_limit", f"{team.borrowing_limit}: borrowing needs a cohort; add "
                                                    "cohort: <name> or remove borrowing_limit"))


# ---------------------------------------------------------------- entry points
class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last one silently,
    so a second pool or profile key with the same name would hide the first)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # unhashable key: SafeLoader reports it
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"duplicate key {key!r}; each key may appear once", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_profiles_text(text: str, source: str | None = None) -> ProfilesConfig:
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ProfilesError([Problem("", f"not valid YAML: {where}{getattr(e, 'problem', e)}")], source) from None
    except ValueError as e:  # a value YAML's constructors cannot make: an integer of > 4300 digits, 2026-02-30
        why = str(e).split("; use sys.", 1)[0][:200]
        raise ProfilesError([Problem("", f"not valid YAML: a value cannot be read ({why})")], source) from None
    except RecursionError:
        raise ProfilesError([Problem("", "not valid YAML (nested too deeply)")], source) from None
    return parse_profiles(data, source)


def parse_profiles(data: Any, source: str | None = None) -> ProfilesConfig:
    """Validate already-loaded data; raises `ProfilesError` with every problem."""
    problems: list[Problem] = []
    if data is None:
        data = {}  # an empty file: report what it lacks (profiles) rather than "got NoneType"
    if not isinstance(data, dict):
        raise ProfilesError([Problem("", f"the file must be a mapping with keys {', '.join(TOP_LEVEL_KEYS)}; got "
                                         f"{type(data).__name__}")], source)
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            near = difflib.get_close_matches(str(key), TOP_LEVEL_KEYS, n=1)
            hint = f" did you mean {near[0]!r}?" if near else ""
            problems.append(Problem(str(key), f"unknown key {key!r};{hint} valid keys: {', '.join(TOP_LEVEL_KEYS)}"))

    def mapping(key: str) -> dict:
        v = data.get(key) or {}
        if not isinstance(v, dict):
            problems.append(Problem(key, f"must be a mapping of name to settings; got {type(v).__name__}"))
            return {}
        return v

    pools = {}
    broken: set[str] = set()  # pools in the file that did not parse or whose GPU/MIG setup is wrong
    for name, raw in mapping("pools").items():
        pool = _parse_each(Pool, raw, f"pools.{name}", problems)
        if pool is None:
            broken.add(name)
            continue
        if _check_pool(name, pool, problems):
            pools[name] = pool
        else:
            broken.add(name)
    problems.extend(Problem(x.at, x.message) for x in sharing_rules.file_problems(pools))
    priorities = data.get("priorities")
    if priorities is None:
        priorities = ProfilesConfig.model_fields["priorities"].default_factory()
    elif not isinstance(priorities, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in priorities.values()
    ):
        problems.append(Problem("priorities", f"{priorities!r} must map a name to an integer value, "
                                              "e.g. {low: 100, normal: 1000, high: 10000}"))
        priorities = None  # reported above; profiles naming a priority are not checked against it
    for name in priorities or {}:
        if not re.fullmatch(DNS_LABEL, str(name)):
            problems.append(Problem(f"priorities.{name}", f"{name!r} is not a valid name: {NAME_RULE}"))

    raw_profiles = data.get("profiles")
    if not isinstance(raw_profiles, list) or not raw_profiles:
        problems.append(Problem("profiles", f"must be a non-empty list of profiles; got {raw_profiles!r}"))
        raw_profiles = []
    seen: dict[str, int] = {}
    defaults = []
    parsed: list[tuple[int, Profile]] = []
    for i, raw in enumerate(raw_profiles):
        p = _parse_each(Profile, raw, f"profiles[{i}]", problems)
        if p is None:
            continue
        if p.slug in seen:
            problems.append(Problem(f"profiles[{i}].slug", f"{p.slug!r} is already used by profiles[{seen[p.slug]}]; "
                                                           "slugs must be unique"))
        seen.setdefault(p.slug, i)
        if p.default:
            defaults.append(i)
        _check_profile(i, p, pools, priorities, problems, broken)
        parsed.append((i, p))
    if len(defaults) > 1:
        problems.append(Problem(f"profiles[{defaults[1]}].default", f"only one profile may be the default; "
                                                                    f"profiles[{defaults[0]}] already is"))

    if priorities is not None:
        _check_priority_ceilings(data, priorities, parsed, problems)

    team_defaults, teams = [], {}
    for name, raw in mapping("teams").items():
        team = _parse_each(Team, raw, f"teams.{name}", problems)
        if team is not None:
            _check_team(name, team, pools, problems, broken)
            teams[name] = team
            if team.default:
                team_defaults.append(name)
    problems.extend(Problem(x.at, x.message) for x in identity.file_problems(teams))
    if len(team_defaults) > 1:
        problems.append(Problem(f"teams.{team_defaults[1]}.default", f"only one team may be the default; "
                                                                     f"{team_defaults[0]!r} already is"))
    for name, raw in mapping("datasets").items():  # after teams and profiles: it names them
        if bad_name := datasets.name_problem(name):
            problems.append(Problem(f"datasets.{str(name)[:80]}", bad_name))
        elif (ds := _parse_each(datasets.Dataset, raw, f"datasets.{name}", problems)) is not None:
            found = datasets.dataset_problems(name, ds, set(teams), set(seen))
            problems.extend(Problem(x.at, x.message) for x in found)
    if problems:
        raise ProfilesError(problems, source)
    cfg = ProfilesConfig.model_validate({**data, "source": source})
    if bad := [Problem(x.at, x.message) for x in preemptible_problems(cfg) + dra.file_problems(cfg, queues_servers)]:
        raise ProfilesError(bad, source)
    # a team's quota its nodes cannot hold in servers (their CPU or memory, not their GPUs, runs out first)
    if short := [Problem(f"teams.{s.team}.quota.{s.pool}", s.message()) for s in quota.shortfalls(cfg)]:
        raise ProfilesError(short, source)
    return cfg
