"""The admin console's dry run (services/admin/diff.py): a file against itself differs in nothing; adding or
removing a profile shows exactly that profile, in exactly the groups that see it; a quota change shows as the
team's ClusterQueue; a bad file's problems are `gpuhub validate`'s; servers whose profile goes are named."""
from __future__ import annotations

import copy

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles
from jupyterhub_gpu.services.admin.diff import EVERYONE, check_text, checksum, diff, offered, servers_losing_profile

DATA = yaml.safe_load(EXAMPLE_PROFILES.read_text())
GROUPS = ["data-science", "ml-research", "teaching"]
SLUGS = [p["slug"] for p in DATA["profiles"]]
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def cfg_of(data):
    return parse_profiles(copy.deepcopy(data))


def seen_by(groups):
    """The offered() rows that see a profile with these groups."""
    return {EVERYONE, *GROUPS} if groups is None else set(groups)


@FAST
@given(st.sampled_from([EXAMPLE_PROFILES.read_text()]))
def test_a_file_against_itself_differs_in_nothing(text):
    cfg, problems = check_text(text)
    assert problems == [] and cfg is not None
    d = diff(cfg, cfg)
    assert d.empty and d.groups == {} and not (d.kueue_added or d.kueue_removed or d.kueue_changed)


@FAST
@given(slug=st.from_regex(r"[a-z][a-z0-9]{0,10}", fullmatch=True).filter(lambda s: s not in SLUGS),
       groups=st.one_of(st.none(), st.lists(st.sampled_from(GROUPS), min_size=1, max_size=3, unique=True)),
       cpu=st.integers(1, 4))
def test_adding_a_profile_shows_exactly_that(slug, groups, cpu):
    data = copy.deepcopy(DATA)
    profile = {"slug": slug, "display_name": f"New {slug}", "pool": "system", "cpu": cpu, "memory": "4Gi"}
    if groups is not None:
        profile["groups"] = groups
    data["profiles"].append(profile)
    old, new = cfg_of(DATA), cfg_of(data)
    d = diff(old, new)
    assert set(d.groups) == seen_by(groups)
    for g in d.groups.values():
        assert (g.added, g.removed, g.changed) == ([slug], [], {})
    assert offered(new)[next(iter(seen_by(groups)))][slug]["display_name"] == f"New {slug}"
    back = diff(new, old)  # and taking it out again: exactly that one removed
    assert set(back.groups) == seen_by(groups)
    assert all((g.added, g.removed, g.changed) == ([], [slug], {}) for g in back.groups.values())


@FAST
@given(st.sampled_from(range(len(DATA["profiles"]))))
def test_removing_a_profile_shows_exactly_that(i):
    data = copy.deepcopy(DATA)
    gone = data["profiles"].pop(i)
    try:
        new = cfg_of(data)
    except ProfilesError:  # a file without it is not valid (nothing to compare)
        assume(False)
    d = diff(cfg_of(DATA), new)
    assert set(d.groups) == seen_by(gone.get("groups"))
    assert all((g.added, g.removed, g.changed) == ([], [gone["slug"]], {}) for g in d.groups.values())


def test_a_changed_price_and_timeout_and_quota_show_as_such():
    data = copy.deepcopy(DATA)
    data["pools"]["gpuh100"]["cost_per_node_hour"] = 1000.0
    h100 = next(p for p in data["profiles"] if p["slug"] == "h100-full")
    h100["idle_timeout"] = "3h"
    data["teams"]["ml-research"]["quota"]["gpuh100"] = 3
    d = diff(cfg_of(DATA), cfg_of(data))
    assert set(d.groups) == {"ml-research"}
    changes = d.groups["ml-research"].changed["h100-full"]
    assert [c.split(":")[0] for c in changes] == ["price", "idle_timeout"]
    assert changes[1].endswith("→ 3h")
    assert [k for k in d.kueue_changed if k.startswith("ClusterQueue")] == ["ClusterQueue team-ml-research"]
    assert d.kueue_added == [] and d.kueue_removed == []


def test_a_new_team_adds_its_kueue_objects():
    data = copy.deepcopy(DATA)
    data["teams"]["vision"] = {"namespace": "team-vision", "cohort": "gpu", "quota": {"gput4": 2}}
    d = diff(cfg_of(DATA), cfg_of(data))
    assert "Namespace team-vision" in d.kueue_added
    assert any(k.startswith("ClusterQueue ") and "vision" in k for k in d.kueue_added)
    assert any(k.startswith("LocalQueue team-vision/") for k in d.kueue_added)
    assert d.kueue_removed == []


def test_a_bad_file_lists_every_problem_as_validate_does():
    cfg, problems = check_text("profiles:\n- slug: BAD\n  display_name: x\n  pool: nowhere\nfoo: 1\n")
    assert cfg is None and len(problems) >= 2
    assert any(p.startswith("foo: unknown key") for p in problems)
    cfg, problems = check_text("profiles: [")
    assert cfg is None and problems[0].startswith("not valid YAML")
    short = yaml.safe_dump({**DATA, "profiles": [{**DATA["profiles"][0], "idle_timeout": "1m"}]})
    cfg, problems = check_text(short)
    assert cfg is None and any("idle_timeout" in p for p in problems)


def test_servers_whose_profile_goes_are_named():
    data = copy.deepcopy(DATA)
    data["profiles"] = [p for p in data["profiles"] if p["slug"] != "h100-full"]
    new = cfg_of(data)
    users = [{"name": "rita", "servers": {"": {"user_options": {"profile": "h100-full"}},
                                          "small": {"user_options": {"profile": "cpu"}}}},
             {"name": "alice", "servers": {"": {"user_options": {}}}},
             {"name": "odd", "servers": None}, "not-a-user"]
    assert servers_losing_profile(users, new) == ["rita/ (h100-full)"]


def test_checksum_is_sha256():
    assert checksum("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
