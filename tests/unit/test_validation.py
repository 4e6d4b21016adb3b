"""Validation of the profiles file: every bad file is refused with the path, the bad value and the fix.

Each case is a small edit of BASE (a valid file with a CPU pool, a time-sliced T4 pool, a mixed-strategy
A100-80GB MIG pool, a full-GPU H100 NVL pool and two teams). The edit is applied to the loaded YAML and
dumped back to YAML text, so every case goes through `parse_profiles_text` exactly like a real file.
"""
from __future__ import annotations

import copy
from typing import Any, Callable

import pytest
import yaml

from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles_text

BASE = """\
pools:
  cpu:
    node_selector: {kubernetes.azure.com/agentpool: cpu}
    instance_type: Standard_D8s_v5
  gput4:
    node_selector: {kubernetes.azure.com/agentpool: gput4}
    taints: [{key: sku, value: gpu, effect: NoSchedule}]
    instance_type: Standard_NC4as_T4_v3
    gpu: {model: T4, count_per_node: 1}
    sharing: {strategy: time-slicing, replicas: 4, rename_by_default: false, fail_requests_greater_than_one: true}
  gpumig:
    node_selector: {kubernetes.azure.com/agentpool: gpumig}
    taints: [{key: sku, value: gpu, effect: NoSchedule}]
    instance_type: Standard_NC24ads_A100_v4
    gpu: {model: A100-80GB, count_per_node: 1}
    sharing: {strategy: mig, mig_strategy: mixed, layout: all-1g.10gb}
  gpuh100:
    node_selector: {kubernetes.azure.com/agentpool: gpuh100}
    taints: [{key: sku, value: gpu, effect: NoSchedule}]
    instance_type: Standard_NC40ads_H100_v5
    gpu: {model: H100-NVL-94GB, count_per_node: 1}
profiles:
  - slug: cpu
    display_name: CPU only
    pool: cpu
    cpu: 2
    memory: 8Gi
    default: true
  - slug: t4-shared
    display_name: Shared T4
    pool: gput4
    gpu: {kind: time-sliced, count: 1}
    cpu: 1
    memory: 6Gi
    idle_timeout: 30m
    priority: normal
  - slug: a100-mig
    display_name: A100 MIG 1g.10gb
    pool: gpumig
    gpu: {kind: mig, profile: 1g.10gb, count: 1}
    cpu: 3
    memory: 24Gi
    groups: [data-science]
  - slug: h100-full
    display_name: Full H100 NVL
    pool: gpuh100
    gpu: {kind: full, count: 1}
    cpu: 32
    memory: 64Gi
    max_age: 24h
teams:
  data-science: {namespace: team-ds, cohort: gpu, quota: {gput4: 8, gpumig: 14}, borrowing_limit: 4, default: true}
  ml-research: {namespace: team-mlr, cohort: gpu, quota: {gpuh100: 2}}
"""

A100_80_SLICES = "1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"


def base() -> dict[str, Any]:
    return yaml.safe_load(BASE)


def edited(edit: Callable[[dict], Any]) -> str:
    data = copy.deepcopy(base())
    edit(data)
    return yaml.safe_dump(data, sort_keys=False)


def problems_of(text: str) -> list:
    with pytest.raises(ProfilesError) as info:
        parse_profiles_text(text)
    err = info.value
    assert err.problems, "ProfilesError without problems"
    # str() lists every problem, one per line, with its path
    for p in err.problems:
        assert str(p) in str(err)
    return err.problems


def test_base_is_valid():
    cfg = parse_profiles_text(BASE)
    assert [p.slug for p in cfg.profiles] == ["cpu", "t4-shared", "a100-mig", "h100-full"]


# ------------------------------------------------------------------ edit helpers
def pool(name: str) -> Callable[[dict], dict]:
    return lambda d: d["pools"][name]


def setp(d: dict, dotted: str, value: Any) -> None:
    """Set data at `pools.gput4.sharing.replicas` / `profiles.1.gpu.count` style paths."""
    *head, last = dotted.split(".")
    cur: Any = d
    for part in head:
        cur = cur[int(part)] if isinstance(cur, list) else cur[part]
    if isinstance(cur, list):
        cur[int(last)] = value
    else:
        cur[last] = value


def delp(d: dict, dotted: str) -> None:
    *head, last = dotted.split(".")
    cur: Any = d
    for part in head:
        cur = cur[int(part)] if isinstance(cur, list) else cur[part]
    del cur[last]


def sets(*pairs: tuple[str, Any]) -> Callable[[dict], None]:
    def edit(d: dict) -> None:
        for dotted, value in pairs:
            setp(d, dotted, value)
    return edit


def rename_key(dotted: str, new: str) -> Callable[[dict], None]:
    """Rename the last key of `dotted` (keeps its value): the typo an admin makes."""
    def edit(d: dict) -> None:
        *head, last = dotted.split(".")
        cur: Any = d
        for part in head:
            cur = cur[int(part)] if isinstance(cur, list) else cur[part]
        cur[new] = cur.pop(last)
    return edit


def add_profile(**fields: Any) -> Callable[[dict], None]:
    def edit(d: dict) -> None:
        d["profiles"].append({"display_name": "Extra", **fields})
    return edit


# ------------------------------------------------------------------ the bad files
# (id, edit of BASE, exact path of the problem, substrings its message must contain, problems expected)
CASES: list[tuple[str, Callable[[dict], None], str, list[str], int]] = [
    # unknown keys at every level, with the did-you-mean hint and the valid keys
    ("unknown-top-level-key", rename_key("teams", "team"), "team",
     ["unknown key 'team'", "did you mean 'teams'", "valid keys: pools, profiles, teams, priorities"], 1),
    ("unknown-pool-key", rename_key("pools.gput4.node_selector", "node_selecter"), "pools.gput4.node_selecter",
     ["unknown key 'node_selecter'", "did you mean 'node_selector'", "valid keys:", "taints"], 2),
    ("unknown-pool-gpu-key", rename_key("pools.gput4.gpu.count_per_node", "count_per_nodes"),
     "pools.gput4.gpu.count_per_nodes",
     ["unknown key 'count_per_nodes'", "did you mean 'count_per_node'", "valid keys: model, count_per_node"], 1),
    ("unknown-pool-sharing-key", rename_key("pools.gput4.sharing.replicas", "replica"), "pools.gput4.sharing.replica",
     ["unknown key 'replica'", "did you mean 'replicas'", "valid keys:", "rename_by_default"], 2),
    ("unknown-mig-sharing-key", rename_key("pools.gpumig.sharing.mig_strategy", "migstrategy"),
     "pools.gpumig.sharing.migstrategy",
     ["unknown key 'migstrategy'", "did you mean 'mig_strategy'", "layout"], 1),
    ("unknown-profile-key", rename_key("profiles.1.idle_timeout", "idle_timout"), "profiles[1].idle_timout",
     ["unknown key 'idle_timout'", "did you mean 'idle_timeout'", "valid keys:", "max_age"], 1),
    ("unknown-profile-gpu-key", rename_key("profiles.1.gpu.count", "cuont"), "profiles[1].gpu.cuont",
     ["unknown key 'cuont'", "did you mean 'count'", "valid keys: kind, count, profile"], 1),
    ("unknown-team-key", rename_key("teams.ml-research.cohort", "cohrt"), "teams.ml-research.cohrt",
     ["unknown key 'cohrt'", "did you mean 'cohort'", "valid keys:", "borrowing_limit"], 1),
    # GPU models and MIG
    ("unknown-gpu-model", sets(("pools.gpuh100.gpu.model", "H100-NVL")), "pools.gpuh100.gpu.model",
     ["'H100-NVL' is not a known GPU model", "valid:", "H100-NVL-94GB", "A100-80GB", "T4"], 1),
    ("mig-on-gpu-without-mig", sets(("pools.gpumig.gpu.model", "T4")), "pools.gpumig.sharing.strategy",
     ["T4 does not support MIG", "A100-40GB, A100-80GB, H100-80GB, H100-NVL-94GB, H200-141GB"], 1),
    ("bad-mig-layout-string", sets(("pools.gpumig.sharing.layout", "1g.10gb-all")), "pools.gpumig.sharing.layout",
     ["'1g.10gb-all' is not a MIG layout", "all-1g.10gb", "all-balanced"], 1),
    ("mig-layout-slice-of-other-gpu", sets(("pools.gpumig.sharing.layout", "all-1g.5gb")),
     "pools.gpumig.sharing.layout",
     ["'all-1g.5gb' is not a MIG layout of A100-80GB", "all-balanced", "all-1g.10gb", "all-7g.80gb"], 1),
    ("mig-layout-overflows-compute", sets(("pools.gpumig.sharing.layout", {"4g.40gb": 1, "2g.20gb": 2})),
     "pools.gpumig.sharing.layout", ["8 compute slices", "A100-80GB has 7"], 1),
    ("mig-layout-overflows-memory", sets(("pools.gpumig.sharing.layout", {"4g.40gb": 1, "1g.20gb": 3})),
     "pools.gpumig.sharing.layout", ["10 memory slices", "A100-80GB has 8"], 1),
    ("mig-layout-too-many-of-one-slice", sets(("pools.gpumig.sharing.layout", {"1g.10gb": 8})),
     "pools.gpumig.sharing.layout", ["at most 7 x 1g.10gb", "not 8"], 1),
    ("single-strategy-mixed-layout",
     sets(("pools.gpumig.sharing", {"strategy": "mig", "mig_strategy": "single",
                                    "layout": {"1g.10gb": 3, "2g.20gb": 2}}),
          ("profiles.2.gpu", {"kind": "mig", "count": 1})),
     "pools.gpumig.sharing.layout", ["single MIG strategy needs one slice type", "mig_strategy: mixed"], 1),
    ("mig-profile-not-of-gpu", sets(("profiles.2.gpu.profile", "1g.11gb")), "profiles[2].gpu.profile",
     ["'1g.11gb' is not a MIG profile of A100-80GB", f"valid: {A100_80_SLICES}"], 1),
    ("mig-profile-not-in-layout", sets(("profiles.2.gpu.profile", "3g.40gb")), "profiles[2].gpu.profile",
     ["'3g.40gb' is not offered by pool 'gpumig'", "all-1g.10gb", "offered: 1g.10gb"], 1),
    ("mixed-mig-profile-missing", sets(("profiles.2.gpu", {"kind": "mig", "count": 1})), "profiles[2].gpu.profile",
     ["is required for a mixed-strategy MIG pool", "offers: 1g.10gb"], 1),
    ("gpu-kind-mismatch", sets(("profiles.1.gpu.kind", "full")), "profiles[1].gpu.kind",
     ["'full' does not match pool 'gput4'", "time-slicing", "valid: time-sliced"], 1),
    ("gpu-kind-unknown", sets(("profiles.1.gpu.kind", "shared")), "profiles[1].gpu.kind",
     ["'shared' is not valid", "time-sliced", "mig", "full"], 1),
    ("time-sliced-count-above-one", sets(("profiles.1.gpu.count", 2)), "profiles[1].gpu.count",
     ["2", "fail_requests_greater_than_one", "valid: 1"], 1),
    ("full-count-above-gpus-per-node", sets(("profiles.3.gpu.count", 2)), "profiles[3].gpu.count",
     ["2 GPUs never fit", "pool 'gpuh100' has 1", "valid: 1..1"], 1),
    ("mig-count-above-slices-per-node", sets(("profiles.2.gpu.count", 8)), "profiles[2].gpu.count",
     ["8 never fits", "7 x nvidia.com/mig-1g.10gb", "valid: 1..7"], 1),
    # pools named by profiles
    ("gpu-profile-without-pool", lambda d: delp(d, "profiles.1.pool"), "profiles[1].pool",
     ["a GPU profile must name its pool", "GPU pools: gput4, gpumig, gpuh100"], 1),
    ("gpu-profile-on-cpu-pool", sets(("profiles.1.pool", "cpu")), "profiles[1].gpu",
     ["pool 'cpu' has no GPUs", "choose a GPU pool"], 1),
    ("cpu-profile-on-gpu-pool", sets(("profiles.0.pool", "gput4"), ("profiles.0.memory", "4Gi")), "profiles[0].pool",
     ["'gput4' is a GPU pool", "asks for no GPU", "choose a CPU pool"], 1),
    ("unknown-pool", sets(("profiles.3.pool", "gpuh200")), "profiles[3].pool",
     ["'gpuh200' is not a pool of this file", "pools: cpu, gput4, gpumig, gpuh100"], 1),
    # durations and quantities
    ("bad-duration", sets(("profiles.1.idle_timeout", "30 minutes please")), "profiles[1].idle_timeout",
     ["'30 minutes please' is not a duration", "30m", "1h30m"], 1),
    ("zero-duration", sets(("profiles.3.max_age", 0)), "profiles[3].max_age",
     ["0", "longer than zero", "30m"], 1),
    ("negative-duration", sets(("profiles.1.idle_timeout", "-5m")), "profiles[1].idle_timeout",
     ["'-5m'", "longer than zero", "30m"], 1),
    ("bad-memory-quantity", sets(("profiles.0.memory", "lots")), "profiles[0].memory",
     ["'lots' is not a Kubernetes memory quantity", "8Gi"], 1),
    ("bad-cpu-quantity", sets(("profiles.0.cpu", "lots")), "profiles[0].cpu",
     ["'lots' is not a Kubernetes CPU quantity", "500m"], 1),
    ("negative-shm", sets(("profiles.0.shm", "-1Gi")), "profiles[0].shm", ["'-1Gi'", "must not be negative"], 1),
    ("cpu-exceeds-node", sets(("profiles.0.cpu", 16)), "profiles[0].cpu",
     ["16 CPUs never fit", "pool 'cpu' has 7.82"], 1),  # Standard_D8s_v5's allocatable, not its 8 vCPUs
    ("memory-plus-shm-exceeds-node", sets(("profiles.0.memory", "30Gi"), ("profiles.0.shm", "4Gi")),
     "profiles[0].memory", ["memory + shm = 34 GiB never fits", "pool 'cpu' has 28.7 GiB"], 1),
    # profiles among themselves
    ("duplicate-slug", sets(("profiles.3.slug", "t4-shared")), "profiles[3].slug",
     ["'t4-shared' is already used by profiles[1]", "unique"], 1),
    ("two-default-profiles", sets(("profiles.2.default", True)), "profiles[2].default",
     ["only one profile may be the default", "profiles[0] already is"], 1),
    ("bad-slug-uppercase", sets(("profiles.1.slug", "T4-Shared")), "profiles[1].slug",
     ["'T4-Shared' is not a valid name", "lowercase letters"], 1),
    ("missing-display-name", lambda d: delp(d, "profiles.1.display_name"), "profiles[1].display_name",
     ["is required"], 1),
    ("unknown-priority", sets(("profiles.1.priority", "urgent")), "profiles[1].priority",
     ["'urgent' is not a priority", "valid: low, normal, high"], 1),
    # teams
    ("team-quota-unknown-pool", sets(("teams.ml-research.quota", {"gpuh200": 2})), "teams.ml-research.quota.gpuh200",
     ["'gpuh200' is not a pool of this file", "GPU pools: gput4, gpumig, gpuh100"], 1),
    ("team-quota-cpu-pool", sets(("teams.ml-research.quota", {"cpu": 2})), "teams.ml-research.quota.cpu",
     ["'cpu' is a CPU pool", "quotas are for GPU pools: gput4, gpumig, gpuh100"], 1),
    ("borrowing-limit-without-cohort", lambda d: delp(d, "teams.data-science.cohort"),
     "teams.data-science.borrowing_limit", ["4", "borrowing needs a cohort", "cohort: <name>"], 1),
    ("two-default-teams", sets(("teams.ml-research.default", True)), "teams.ml-research.default",
     ["only one team may be the default", "'data-science' already is"], 1),
    ("bad-team-namespace", sets(("teams.ml-research.namespace", "Team_MLR")), "teams.ml-research.namespace",
     ["'Team_MLR' is not a valid name", "lowercase letters"], 1),
    # pools themselves
    ("gpu-pool-without-noschedule-taint", lambda d: delp(d, "pools.gpuh100.taints"), "pools.gpuh100.taints",
     ["a GPU pool needs a NoSchedule taint", "effect: NoSchedule"], 1),
    ("gpu-pool-prefer-noschedule-only", sets(("pools.gpuh100.taints", [{"key": "sku", "value": "gpu",
                                                                        "effect": "PreferNoSchedule"}])),
     "pools.gpuh100.taints", ["a GPU pool needs a NoSchedule taint"], 1),
    ("replicas-below-two", sets(("pools.gput4.sharing.replicas", 1)), "pools.gput4.sharing.replicas",
     ["1", "greater than or equal to 2"], 1),
    ("unknown-sharing-strategy", sets(("pools.gput4.sharing.strategy", "vgpu")), "pools.gput4.sharing",
     ["'vgpu' is not a valid strategy", "none", "time-slicing", "mps", "mig"], 1),
    ("sharing-on-cpu-pool", sets(("pools.cpu.sharing", {"strategy": "time-slicing", "replicas": 2})),
     "pools.cpu.sharing", ["'time-slicing' needs a GPU", "add gpu: {model: ..., count_per_node: ...} or remove"], 1),
    ("max-nodes-below-min-nodes-cpu-pool", sets(("pools.cpu.min_nodes", 3), ("pools.cpu.max_nodes", 1)),
     "pools.cpu.max_nodes", ["1 is below min_nodes 3"], 1),
    ("bad-taint-effect", sets(("pools.gpuh100.taints", [{"key": "sku", "value": "gpu", "effect": "NoSchedul"}])),
     "pools.gpuh100.taints[0].effect", ["'NoSchedul' is not valid", "'NoSchedule'", "'NoExecute'"], 1),
    ("unknown-top-level-key-no-hint", sets(("xyzzy", 1)), "xyzzy",
     ["unknown key 'xyzzy'; valid keys: pools, profiles, teams, priorities"], 1),
    ("priorities-not-integers", sets(("priorities", {"low": "x"})), "priorities",
     ["must map a name to an integer value", "{low: 100"], 1),
    ("priority-not-in-custom-priorities", sets(("priorities", {"batch": 10, "interactive": 100})),
     "profiles[1].priority", ["'normal' is not a priority", "valid: batch, interactive"], 1),
    ("cpu-limit-below-cpu", sets(("profiles.0.cpu_limit", "500m")), "profiles[0].cpu_limit",
     ["0.5 is below cpu 2", "valid: at least 2"], 1),
    ("mig-layout-mapping-unknown-slice", sets(("pools.gpumig.sharing.layout", {"1g.11gb": 1})),
     "pools.gpumig.sharing.layout", ["'1g.11gb' is not a MIG profile of A100-80GB", f"valid: {A100_80_SLICES}"], 1),
    ("slice-on-full-gpu-profile", sets(("profiles.3.gpu.profile", "1g.12gb")), "profiles[3].gpu.profile",
     ["'1g.12gb'", "only MIG profiles name a slice", "remove it"], 1),
    ("gpu-count-zero", sets(("profiles.1.gpu.count", 0)), "profiles[1].gpu.count",
     ["0", "greater than or equal to 1"], 1),
    ("negative-quota", sets(("teams.ml-research.quota.gpuh100", -1)), "teams.ml-research.quota.gpuh100",
     ["-1", "greater than or equal to 0"], 1),
    ("bad-pool-name", lambda d: d["pools"].__setitem__("GPU_T4", d["pools"].pop("gput4")) or
     [p.__setitem__("pool", "GPU_T4") for p in d["profiles"] if p.get("pool") == "gput4"] and
     d["teams"]["data-science"]["quota"].__setitem__("GPU_T4", d["teams"]["data-science"]["quota"].pop("gput4")),
     "pools.GPU_T4", ["'GPU_T4' is not valid", "lowercase letters"], 1),
]


@pytest.mark.parametrize(("edit", "path", "needles", "count"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_file_is_refused_with_path_value_and_fix(edit, path, needles, count):
    problems = problems_of(edited(edit))
    listing = "\n".join(map(str, problems))
    at_path = [p for p in problems if p.path == path]
    assert at_path, f"no problem at {path!r}; got:\n{listing}"
    msg = " | ".join(p.message for p in at_path)
    for needle in needles:
        assert needle in msg, f"{needle!r} not in message at {path}: {msg}"
    assert len(problems) == count, f"expected {count} problem(s), got:\n{listing}"


def test_case_ids_are_distinct_and_many():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 30


# ------------------------------------------------------------------ files that are not even the right shape
def test_not_yaml_names_the_line():
    text = BASE.replace("  - slug: t4-shared\n", "  - slug: t4-shared\n   display_name: [unclosed\n", 1)
    [problem] = problems_of(text)
    line = BASE.splitlines().index("  - slug: t4-shared") + 2  # the bad line, 1-based
    assert "not valid YAML" in problem.message
    assert "line " in problem.message
    assert any(f"line {n}," in problem.message for n in (line, line + 1)), problem.message


def test_not_yaml_tab_indent_names_the_line():
    [problem] = problems_of("pools: {}\nprofiles:\n\t- slug: x\n")
    assert "not valid YAML" in problem.message and "line 3" in problem.message, problem.message


@pytest.mark.parametrize("value, words", [("9" * 5000, "4300 digits"), ("2026-02-30", "day is out of range")])
def test_a_value_yaml_cannot_construct_is_a_problem_not_a_traceback(value, words):
    # PyYAML raises ValueError (not YAMLError) from its int and timestamp constructors
    [problem] = problems_of(BASE + f"x_unreadable: {value}\n")
    assert "not valid YAML" in problem.message and words in problem.message, problem.message
    assert "set_int_max_str_digits" not in problem.message and len(problem.message) < 300


def test_duplicate_key_is_refused_with_its_line():
    # PyYAML keeps the last of two equal keys silently; a second `gput4:` would hide the first pool.
    lines = BASE.splitlines(keepends=True)
    at = lines.index("  gpuh100:\n")
    [problem] = problems_of("".join(lines[:at] + ["  gput4:\n"] + lines[at + 1:]))
    assert "duplicate key 'gput4'" in problem.message
    assert f"line {at + 1}," in problem.message, problem.message


def test_yaml_merge_keys_are_not_duplicates():
    text = BASE.replace("  gpuh100:\n    node_selector: {kubernetes.azure.com/agentpool: gpuh100}\n",
                        "  gpuh100:\n    <<: {spot: false, node_selector: {a: b}}\n"
                        "    node_selector: {kubernetes.azure.com/agentpool: gpuh100}\n")
    assert parse_profiles_text(text).pools["gpuh100"].node_selector == {"kubernetes.azure.com/agentpool": "gpuh100"}


def test_top_level_list():
    [problem] = problems_of("- slug: cpu\n  display_name: CPU\n")
    assert problem.path == ""
    assert "must be a mapping" in problem.message
    assert "pools, profiles, teams" in problem.message
    assert "list" in problem.message


@pytest.mark.parametrize("text", ["", "pools: {}\n", "pools: {}\nprofiles: []\n", "profiles:\n"],
                         ids=["empty-file", "no-profiles", "empty-profiles-list", "profiles-null"])
def test_empty_profiles(text):
    problems = problems_of(text)
    [problem] = [p for p in problems if p.path == "profiles"]
    assert "must be a non-empty list of profiles" in problem.message
    assert len(problems) == 1, problems


def test_profiles_not_a_list():
    problems = problems_of(edited(lambda d: d.__setitem__("profiles", {"cpu": {"display_name": "CPU"}})))
    assert [p.path for p in problems] == ["profiles"]
    assert "non-empty list" in problems[0].message


def test_pools_not_a_mapping():
    problems = problems_of(edited(lambda d: d.__setitem__("pools", ["cpu", "gput4"])))
    assert any(p.path == "pools" and "must be a mapping" in p.message for p in problems), problems


# ------------------------------------------------------------------ every error at once
def test_every_error_is_listed_at_once():
    def five_problems(d: dict) -> None:
        d["pools"]["gput4"]["taints"] = []                            # 1 GPU pool without NoSchedule taint
        d["profiles"][1]["idle_timeout"] = "30 minutes please"        # 2 bad duration
        d["profiles"][2]["gpu"]["profile"] = "1g.11gb"                # 3 not a MIG slice of A100-80GB
        d["profiles"][3]["slug"] = "cpu"                              # 4 duplicate slug
        d["teams"]["ml-research"]["quota"] = {"gpuh200": 1}           # 5 quota on an unknown pool

    with pytest.raises(ProfilesError) as info:
        parse_profiles_text(edited(five_problems), source="site.yaml")
    err = info.value
    paths = [p.path for p in err.problems]
    assert sorted(paths) == sorted([
        "pools.gput4.taints",
        "profiles[1].idle_timeout",
        "profiles[2].gpu.profile",
        "profiles[3].slug",
        "teams.ml-research.quota.gpuh200",
    ])
    text = str(err)
    assert text.startswith("site.yaml: 5 problem(s)")
    assert len([line for line in text.splitlines()[1:] if line.strip()]) == 5
    assert f"profiles[2].gpu.profile: '1g.11gb' is not a MIG profile of A100-80GB; valid: {A100_80_SLICES}" in text


def test_one_bad_entry_does_not_hide_the_next():
    def edit(d: dict) -> None:
        d["profiles"][0]["memroy"] = "8Gi"            # unknown key: this profile does not parse
        d["profiles"][1]["gpu"]["count"] = 3          # the next one is still checked
        d["pools"]["gpuh100"]["gpu"]["model"] = "X1"  # a broken pool...
        d["pools"]["gpumig"]["sharing"]["replicas"] = 2  # ...does not hide another one

    paths = sorted(p.path for p in problems_of(edited(edit)))
    assert paths == sorted(["profiles[0].memroy", "profiles[1].gpu.count", "pools.gpuh100.gpu.model",
                            "pools.gpumig.sharing.replicas"])


def test_deep_nesting_and_an_overflowing_quantity_are_problems_not_crashes():
    (deep,) = problems_of("[" * 5000)
    assert "not valid YAML (nested too deeply)" in deep.message
    text = edited(lambda d: d["profiles"][0].update(cpu="1e999999999"))
    paths = [p.path for p in problems_of(text)]
    assert paths == ["profiles[0].cpu"]
