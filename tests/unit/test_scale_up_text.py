"""The picker's words for a pool at zero (hub/capacity_text.py, pure): the wait from the pool's recorded time to add
a node, never a made-up number, and MIG pools that AKS cannot scale from zero say so."""
from __future__ import annotations

import copy

import yaml
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.hub.capacity_text import describe, node_add_countdown, node_add_seconds, scale_up_text
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import parse_profiles

DATA = yaml.safe_load(EXAMPLE_PROFILES.read_text())
CFG = parse_profiles(DATA)


def at_zero(cfg, slug, node_add_s=None):
    prof = cfg.by_slug[slug]
    pool = cfg.pool_of(prof)
    return describe(prof, pool, cfg.resource_name(prof), 0, 0, 0, 0, 0, True, node_add_s)


def test_recorded_time_becomes_the_minutes_to_wait():
    assert node_add_seconds([]) is None
    assert node_add_seconds([300, 420, 360]) == 360
    assert node_add_seconds([9999] * 5 + [240] * 20) == 240  # only the recent samples count
    assert at_zero(CFG, "t4-shared", 361) == ("no T4 time-slices running now", "starts in ~7 min (a node is added)")
    assert at_zero(CFG, "t4-shared", 20)[1] == "starts in ~1 min (a node is added)"
    assert at_zero(CFG, "t4-shared")[1] == "the pool scales up from zero: a node takes a few minutes"


def test_a_mig_pool_at_zero_says_it_cannot_start():
    data = copy.deepcopy(DATA)
    data["pools"]["gpumig"]["min_nodes"] = 0
    summary, outlook = at_zero(parse_profiles(data), "a100-mig-1g10gb", 300)
    assert summary == "no A100 80GB MIG 1g.10gb slices running now"
    assert outlook.startswith("cannot start now: MIG pools do not scale up from zero on AKS")
    assert "starts in" not in outlook


TIMES = st.one_of(st.floats(min_value=-1e9, max_value=1e9), st.just(float("nan")), st.just(float("inf")))


@given(st.lists(TIMES, max_size=50))
def test_any_recorded_times_give_a_sane_sentence(samples):
    s = node_add_seconds(samples)
    text = scale_up_text(s)
    assert text.startswith("starts in ~") or text.startswith("the pool scales up")
    if s is not None:
        n = int(text.removeprefix("starts in ~").split()[0])
        assert 1 <= n <= 1e9 / 60 + 1


def test_the_countdown_from_the_recorded_time():
    assert node_add_countdown(360, 0) == "a node is being added: about 6 min left"
    assert node_add_countdown(360, 130) == "a node is being added: about 4 min left"
    assert node_add_countdown(360, 359) == "a node is being added: about 1 min left"
    assert node_add_countdown(360, -50) == "a node is being added: about 6 min left"  # a clock behind: none waited
    assert node_add_countdown(360, 360) == ("a node is being added and is taking longer than usual (it usually "
                                            "takes about 6 min)")
