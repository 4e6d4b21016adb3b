"""The profile model on valid files: resource names, slots per node, MIG tables, taints, durations,
quantities, group filtering and team lookup."""
from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import yaml

import jupyterhub_gpu
from jupyterhub_gpu.model.gpus import GPU_MODELS, mig_layout_problems
from jupyterhub_gpu.model.profiles import SPOT_TAINT
from jupyterhub_gpu.model.profiles_file import load_profiles
from jupyterhub_gpu.model.validation import parse_profiles_text

EXAMPLE = Path(jupyterhub_gpu.__file__).parent / "examples" / "profiles.yaml"
SKU_TAINT = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}

# NVIDIA's MIG user guide, supported profiles per GPU model: slices per GPU, typed here literally.
NVIDIA_MIG_TABLES = {
    "A100-40GB": {"1g.5gb": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},
    "A100-80GB": {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    "H100-80GB": {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
    "H100-NVL-94GB": {"1g.12gb": 7, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1},
    "H200-141GB": {"1g.18gb": 7, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1},
}


def one_pool(model: str = "T4", count: int = 1, sharing: dict | None = None, kind: str = "full",
             mig_profile: str | None = None, gpu_count: int = 1, **pool_extra) -> str:
    """A file with a single GPU pool `p` and a single profile `x` on it."""
    pool = {"node_selector": {"kubernetes.azure.com/agentpool": "p"}, "taints": [SKU_TAINT],
            "instance_type": "Standard_ND96asr_v4", "gpu": {"model": model, "count_per_node": count}, **pool_extra}
    if sharing:
        pool["sharing"] = sharing
    gpu = {"kind": kind, "count": gpu_count}
    if mig_profile:
        gpu["profile"] = mig_profile
    data = {"pools": {"p": pool}, "profiles": [{"slug": "x", "display_name": "X", "pool": "p", "gpu": gpu}]}
    return yaml.safe_dump(data, sort_keys=False)


def pool_of(text: str):
    cfg = parse_profiles_text(text)
    return cfg, cfg.pools["p"], cfg.profiles[0]


# ------------------------------------------------------------------ resource names
@pytest.mark.parametrize(("sharing", "kind", "mig_profile", "resource"), [
    ({"strategy": "time-slicing", "replicas": 4, "rename_by_default": False}, "time-sliced", None, "nvidia.com/gpu"),
    ({"strategy": "time-slicing", "replicas": 4}, "time-sliced", None, "nvidia.com/gpu"),
    ({"strategy": "time-slicing", "replicas": 4, "rename_by_default": True}, "time-sliced", None,
     "nvidia.com/gpu.shared"),
    ({"strategy": "mig", "mig_strategy": "mixed", "layout": "all-1g.10gb"}, "mig", "1g.10gb",
     "nvidia.com/mig-1g.10gb"),
    ({"strategy": "mig", "mig_strategy": "mixed", "layout": "all-balanced"}, "mig", "3g.40gb",
     "nvidia.com/mig-3g.40gb"),
    ({"strategy": "mig", "mig_strategy": "single", "layout": "all-1g.10gb"}, "mig", None, "nvidia.com/gpu"),
    ({"strategy": "mig", "mig_strategy": "single", "layout": "all-3g.40gb"}, "mig", "3g.40gb", "nvidia.com/gpu"),
    (None, "full", None, "nvidia.com/gpu"),
    ({"strategy": "none"}, "full", None, "nvidia.com/gpu"),
], ids=["ts-rename-false", "ts-rename-default", "ts-rename-true", "mig-mixed", "mig-mixed-balanced",
        "mig-single", "mig-single-with-slice", "full", "full-explicit-none"])
def test_resource_name(sharing, kind, mig_profile, resource):
    model = "A100-80GB" if kind == "mig" else "T4"
    cfg, pool, prof = pool_of(one_pool(model, sharing=sharing, kind=kind, mig_profile=mig_profile))
    assert cfg.resource_name(prof) == resource
    assert pool.resource_name(mig_profile) == resource


def test_cpu_profile_has_no_resource_name():
    cfg = load_profiles(EXAMPLE)
    cpu = cfg.profile("cpu")
    assert not cpu.is_gpu
    assert cfg.resource_name(cpu) is None
    assert cfg.pools["system"].resource_name() is None
    assert cfg.pools["system"].slots_per_node() == {}
    assert not cfg.pools["system"].is_gpu


# ------------------------------------------------------------------ slots per node
@pytest.mark.parametrize(("model", "count", "sharing", "kind", "slots"), [
    ("T4", 1, {"strategy": "time-slicing", "replicas": 4}, "time-sliced", {"nvidia.com/gpu": 4}),
    ("T4", 2, {"strategy": "time-slicing", "replicas": 4, "rename_by_default": True}, "time-sliced",
     {"nvidia.com/gpu.shared": 8}),
    ("A100-80GB", 1, {"strategy": "mig", "layout": "all-1g.10gb"}, "mig", {"nvidia.com/mig-1g.10gb": 7}),
    ("A100-80GB", 2, {"strategy": "mig", "layout": "all-3g.40gb"}, "mig", {"nvidia.com/mig-3g.40gb": 4}),
    ("A100-80GB", 2, {"strategy": "mig", "mig_strategy": "single", "layout": "all-3g.40gb"}, "mig",
     {"nvidia.com/gpu": 4}),
    ("A100-80GB", 1, {"strategy": "mig", "mig_strategy": "single", "layout": "all-1g.10gb"}, "mig",
     {"nvidia.com/gpu": 7}),
    ("A100-80GB", 1, {"strategy": "mig", "layout": "all-balanced"}, "mig",
     {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-3g.40gb": 1}),
    ("A100-80GB", 1, {"strategy": "mig", "layout": {"1g.10gb": 3, "2g.20gb": 2}}, "mig",
     {"nvidia.com/mig-1g.10gb": 3, "nvidia.com/mig-2g.20gb": 2}),
    ("A100-80GB", 4, {"strategy": "mig", "layout": {"4g.40gb": 1, "3g.40gb": 1}}, "mig",
     {"nvidia.com/mig-4g.40gb": 4, "nvidia.com/mig-3g.40gb": 4}),
    ("A100-40GB", 8, {"strategy": "mig", "layout": "all-1g.5gb"}, "mig", {"nvidia.com/mig-1g.5gb": 56}),
    ("H100-NVL-94GB", 1, None, "full", {"nvidia.com/gpu": 1}),
    ("A100-40GB", 8, None, "full", {"nvidia.com/gpu": 8}),
], ids=["t4x1-r4", "t4x2-r4-renamed", "a100-all-1g", "a100x2-all-3g", "a100x2-single-3g", "a100-single-1g",
        "a100-balanced", "a100-mapping", "a100x4-mapping", "a100-40x8-all-1g.5gb", "h100-full", "a100-40x8-full"])
def test_slots_per_node(model, count, sharing, kind, slots):
    mig_profile = None
    if kind == "mig" and sharing.get("mig_strategy", "mixed") == "mixed":
        mig_profile = next(iter(slots)).removeprefix("nvidia.com/mig-")
    _, pool, _ = pool_of(one_pool(model, count, sharing, kind, mig_profile))
    assert pool.slots_per_node() == slots


def test_balanced_layout_of_a100_80gb():
    assert GPU_MODELS["A100-80GB"].balanced_layout() == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    _, pool, _ = pool_of(one_pool("A100-80GB", sharing={"strategy": "mig", "layout": "all-balanced"}, kind="mig",
                                  mig_profile="2g.20gb"))
    assert pool.mig_layout == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert pool.mig_config_name() == "all-balanced"


def test_mig_config_name_of_a_mapping_layout():
    _, pool, _ = pool_of(one_pool("A100-80GB", sharing={"strategy": "mig", "layout": {"2g.20gb": 2, "1g.10gb": 3}},
                                  kind="mig", mig_profile="2g.20gb"))
    assert pool.mig_config_name() == "custom-3x1g.10gb-2x2g.20gb"
    assert pool.mig_layout == {"2g.20gb": 2, "1g.10gb": 3}


def test_mig_profile_count_up_to_slots_is_valid():
    _, _, prof = pool_of(one_pool("A100-80GB", 2, {"strategy": "mig", "layout": "all-1g.10gb"}, "mig", "1g.10gb",
                                  gpu_count=14))
    assert prof.gpu.count == 14


def test_time_sliced_count_above_one_allowed_without_fail_requests():
    _, pool, prof = pool_of(one_pool("T4", 1, {"strategy": "time-slicing", "replicas": 4}, "time-sliced",
                                     gpu_count=2))
    assert prof.gpu.count == 2 and pool.slots_per_node() == {"nvidia.com/gpu": 4}


# ------------------------------------------------------------------ the MIG tables of NVIDIA's MIG user guide
@pytest.mark.parametrize("model", list(NVIDIA_MIG_TABLES))
def test_mig_table_matches_nvidia(model):
    assert GPU_MODELS[model].mig == NVIDIA_MIG_TABLES[model]
    assert list(GPU_MODELS[model].mig) == list(NVIDIA_MIG_TABLES[model])  # same order: messages list them so
    assert GPU_MODELS[model].supports_mig


def test_only_the_design_gpus_have_mig():
    assert {name for name, m in GPU_MODELS.items() if m.supports_mig} == set(NVIDIA_MIG_TABLES)


@pytest.mark.parametrize(("model", "slice_name", "per_gpu"),
                         [(m, s, n) for m, table in NVIDIA_MIG_TABLES.items() for s, n in table.items()],
                         ids=[f"{m}-{s}" for m, table in NVIDIA_MIG_TABLES.items() for s in table])
def test_every_table_entry_as_an_all_layout(model, slice_name, per_gpu):
    """`all-<slice>` offers exactly the table's count per GPU, times GPUs per node; one more never fits."""
    text = one_pool(model, 2, {"strategy": "mig", "layout": f"all-{slice_name}"}, "mig", slice_name,
                    gpu_count=2 * per_gpu)
    cfg, pool, prof = pool_of(text)
    assert pool.mig_layout == {slice_name: per_gpu}
    assert pool.slots_per_node() == {f"nvidia.com/mig-{slice_name}": 2 * per_gpu}
    assert cfg.resource_name(prof) == f"nvidia.com/mig-{slice_name}"
    spec = GPU_MODELS[model]
    assert mig_layout_problems(spec, {slice_name: per_gpu}) == []
    assert mig_layout_problems(spec, {slice_name: per_gpu + 1})


@pytest.mark.parametrize("model", list(NVIDIA_MIG_TABLES))
def test_balanced_layout_of_every_mig_gpu(model):
    table = list(NVIDIA_MIG_TABLES[model])
    # the smallest 1g slice twice, the 2g slice once, the 3g slice once
    expected = {table[0]: 2, table[2]: 1, table[3]: 1}
    _, pool, _ = pool_of(one_pool(model, sharing={"strategy": "mig", "layout": "all-balanced"}, kind="mig",
                                  mig_profile=table[3]))
    assert pool.mig_layout == expected
    assert mig_layout_problems(GPU_MODELS[model], expected) == []


@pytest.mark.parametrize(("layout", "fits"), [
    ({"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}, True),
    ({"4g.40gb": 1, "3g.40gb": 1}, True),
    ({"1g.20gb": 4}, True),
    ({"2g.20gb": 3, "1g.10gb": 1}, True),
    ({"4g.40gb": 1, "2g.20gb": 2}, False),   # 8 compute slices
    ({"4g.40gb": 1, "1g.20gb": 3}, False),   # 10 memory slices
    ({"7g.80gb": 1, "1g.10gb": 1}, False),
], ids=["3g+2g+2x1g", "4g+3g", "4x1g.20gb", "3x2g+1g", "compute-overflow", "memory-overflow", "7g+1g"])
def test_mapping_layouts_on_a100_80gb(layout, fits):
    assert (mig_layout_problems(GPU_MODELS["A100-80GB"], layout) == []) is fits
    if fits:
        sl = next(iter(layout))
        _, pool, _ = pool_of(one_pool("A100-80GB", sharing={"strategy": "mig", "layout": layout}, kind="mig",
                                      mig_profile=sl))
        assert pool.slots_per_node() == {f"nvidia.com/mig-{s}": n for s, n in layout.items()}


# ------------------------------------------------------------------ taints and tolerations
def test_spot_taint_added_once():
    _, pool, _ = pool_of(one_pool("A100-80GB", spot=True))
    assert [t.model_dump() for t in pool.effective_taints] == [SKU_TAINT, SPOT_TAINT]
    assert pool.tolerations() == [
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot",
         "effect": "NoSchedule"},
    ]
    # an admin who already wrote the spot taint does not get it twice
    _, pool, _ = pool_of(one_pool("A100-80GB", spot=True, taints=[SKU_TAINT, SPOT_TAINT]))
    assert len(pool.effective_taints) == 2


def test_spot_taint_alone_satisfies_the_gpu_pool_taint_rule():
    _, pool, _ = pool_of(one_pool("A100-80GB", spot=True, taints=[]))
    assert pool.tolerations() == [{"key": SPOT_TAINT["key"], "operator": "Equal", "value": "spot",
                                   "effect": "NoSchedule"}]


def test_toleration_of_a_taint_without_value_uses_exists():
    _, pool, _ = pool_of(one_pool("T4", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]))
    assert pool.tolerations() == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_gpu_taints_of_the_example():
    cfg = load_profiles(EXAMPLE)
    taints = [(t.key, t.value, t.effect) for t in cfg.gpu_taints()]
    assert taints == [("sku", "gpu", "NoSchedule"), (SPOT_TAINT["key"], "spot", "NoSchedule")]
    assert cfg.pools["system"].tolerations() == []
    assert cfg.pools["gput4"].tolerations() == [{"key": "sku", "operator": "Equal", "value": "gpu",
                                                 "effect": "NoSchedule"}]
    assert len(cfg.pools["spota100"].tolerations()) == 2


# ------------------------------------------------------------------ durations and quantities
SIZED = """\
profiles:
  - slug: sized
    display_name: Sized
    cpu: 500m
    cpu_limit: 2
    memory: 8Gi
    shm: 512Mi
    idle_timeout: 1h30m
    max_age: 2h
    max_job_timeout: 90
  - slug: defaults
    display_name: Defaults
  - slug: decimal
    display_name: Decimal
    cpu: 1.5
    memory: 1G
    idle_timeout: 30m
    max_age: 1d
"""


def test_durations_are_parsed_to_seconds():
    cfg = parse_profiles_text(SIZED)
    p = cfg.profile("sized")
    assert p.idle_timeout == 5400
    assert p.max_age == 7200
    assert p.max_job_timeout == 90
    assert cfg.profile("decimal").idle_timeout == 1800
    assert cfg.profile("decimal").max_age == 86400
    d = cfg.profile("defaults")
    assert d.idle_timeout is None and d.max_age is None and d.max_job_timeout is None


def test_quantities_are_parsed():
    cfg = parse_profiles_text(SIZED)
    p = cfg.profile("sized")
    assert p.memory == 8589934592
    assert p.shm == 512 * 2**20
    assert p.cpu == Decimal("0.5")
    assert p.cpu_limit == 2
    assert p.memory_limit == 8589934592 + 512 * 2**20
    assert isinstance(p.memory_limit, int)
    dec = cfg.profile("decimal")
    assert dec.cpu == Decimal("1.5")
    assert dec.memory == 10**9
    d = cfg.profile("defaults")
    assert d.cpu == 1 and d.memory == 4 * 2**30 and d.shm == 2**30 and d.cpu_limit is None


def test_profile_without_pool_is_cpu_only():
    cfg = parse_profiles_text(SIZED)
    assert cfg.pools == {} and cfg.teams == {}
    assert cfg.pool_of(cfg.profile("sized")) is None
    assert cfg.resource_name(cfg.profile("sized")) is None


# ------------------------------------------------------------------ groups and teams
GROUPS = """\
profiles:
  - {slug: everyone, display_name: Everyone}
  - {slug: ds, display_name: DS, groups: [data-science]}
  - {slug: both, display_name: Both, groups: [data-science, ml-research]}
  - {slug: nobody, display_name: Nobody, groups: []}
teams:
  ml-research: {namespace: team-mlr}
  data-science: {namespace: team-ds}
  ops: {namespace: team-ops, default: true}
"""


@pytest.mark.parametrize(("groups", "slugs"), [
    ([], ["everyone"]),
    (["students"], ["everyone"]),
    (["data-science"], ["everyone", "ds", "both"]),
    (["ml-research"], ["everyone", "both"]),
    (["ml-research", "data-science", "students"], ["everyone", "ds", "both"]),
    ({"ml-research"}, ["everyone", "both"]),
])
def test_profiles_for_groups(groups, slugs):
    cfg = parse_profiles_text(GROUPS)
    assert [p.slug for p in cfg.profiles_for(groups)] == slugs


def test_team_for_takes_the_first_team_in_file_order():
    cfg = parse_profiles_text(GROUPS)
    # ml-research comes first in the file, whatever the order of the user's groups
    name, team = cfg.team_for(["data-science", "ml-research"])
    assert name == "ml-research" and team.namespace == "team-mlr"
    assert cfg.team_for(["data-science"])[0] == "data-science"
    assert cfg.team_for(["ops"])[0] == "ops"


def test_team_for_falls_back_to_the_default_team():
    cfg = parse_profiles_text(GROUPS)
    name, team = cfg.team_for(["students"])
    assert name == "ops" and team.namespace == "team-ops" and team.default
    assert cfg.team_for([])[0] == "ops"


def test_team_for_without_default_is_none():
    cfg = parse_profiles_text(GROUPS.replace(", default: true", ""))
    assert cfg.team_for(["students"]) is None
    assert cfg.team_for([]) is None
    assert cfg.team_for(["data-science"])[0] == "data-science"


def test_file_without_teams_has_no_team():
    assert parse_profiles_text(SIZED).team_for(["data-science"]) is None


# ------------------------------------------------------------------ priorities and lookups
def test_priorities_default_and_custom():
    cfg = parse_profiles_text(SIZED)
    assert cfg.priorities == {"low": 100, "normal": 1000, "high": 10000}
    assert cfg.priority_value("high") == 10000 and cfg.priority_value(None) is None
    custom = parse_profiles_text(SIZED + "priorities: {batch: 10, interactive: 500}\n")
    assert custom.priorities == {"batch": 10, "interactive": 500}


def test_profile_lookup_by_slug():
    cfg = load_profiles(EXAMPLE)
    assert cfg.profile("h100-full").pool == "gpuh100"
    with pytest.raises(KeyError, match="no profile 'nope'"):
        cfg.profile("nope")


# ------------------------------------------------------------------ the example file
def test_example_file_loads():
    cfg = load_profiles(EXAMPLE)
    assert cfg.source == str(EXAMPLE)
    assert list(cfg.pools) == ["system", "gput4", "gpumig", "gpuh100", "spota100", "gput4mps"]
    assert [p.slug for p in cfg.profiles] == ["cpu", "t4-shared", "a100-mig-1g10gb", "h100-full", "a100-spot", "t4-mps"]
    assert list(cfg.teams) == ["data-science", "ml-research"]
    assert {n: p.slots_per_node() for n, p in cfg.pools.items()} == {
        "system": {},
        "gput4": {"nvidia.com/gpu": 4},
        "gpumig": {"nvidia.com/mig-1g.10gb": 7},
        "gpuh100": {"nvidia.com/gpu": 1},
        "spota100": {"nvidia.com/gpu": 1},
        "gput4mps": {"nvidia.com/gpu": 4},
    }
    assert {p.slug: cfg.resource_name(p) for p in cfg.profiles} == {
        "cpu": None,
        "t4-shared": "nvidia.com/gpu",
        "a100-mig-1g10gb": "nvidia.com/mig-1g.10gb",
        "h100-full": "nvidia.com/gpu",
        "a100-spot": "nvidia.com/gpu",
        "t4-mps": "nvidia.com/gpu",
    }
    assert [p.slug for p in cfg.profiles if p.default] == ["cpu"]
    assert cfg.team_for(["nobody"])[0] == "data-science"
    assert cfg.team_for(["ml-research"])[0] == "ml-research"
    assert [p.slug for p in cfg.profiles_for(["data-science"])] == ["cpu", "t4-shared", "a100-mig-1g10gb"]
    assert cfg.pools["spota100"].spot
    assert cfg.profile("t4-shared").idle_timeout == 1800


def test_example_file_text_parses_the_same():
    assert parse_profiles_text(EXAMPLE.read_text()).model_dump() == load_profiles(EXAMPLE).model_dump()
