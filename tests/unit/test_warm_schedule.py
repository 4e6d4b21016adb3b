"""Warm capacity by schedule (model/warm_schedule.py): parsing, the rules `gpuhub validate` applies, the weekly
step function and the daily min-count changes rendered for AKS."""
from __future__ import annotations

import copy
from datetime import date, datetime, timezone

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.model import warm_schedule as W
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles, parse_profiles_text

BASE = yaml.safe_load(EXAMPLE_PROFILES.read_text())


def with_warm(warm, pool="gput4", **extra):
    data = copy.deepcopy(BASE)
    data["pools"][pool].update(warm=warm, **extra)
    return data


def problems(data) -> list[str]:
    with pytest.raises(ProfilesError) as e:
        parse_profiles(data)
    return [str(p) for p in e.value.problems]


WORKDAY = {"days": "Mon-Fri", "from": "08:30", "to": "18:00", "nodes": 1}


def test_the_issue_example_parses_and_steps():
    cfg = parse_profiles(with_warm([WORKDAY], time_zone="Europe/Berlin"))
    pool = cfg.pools["gput4"]
    assert pool.time_zone == "Europe/Berlin" and pool.warm[0].days == "Mon,Tue,Wed,Thu,Fri"
    assert W.steps(pool)[:3] == [(0, 0), (510, 1), (1080, 0)]
    assert [(c.cron, c.min_count) for c in W.changes(pool)] == [("30 8 * * 1,2,3,4,5", 1), ("0 18 * * 1,2,3,4,5", 0)]


def test_unquoted_times_from_yaml_are_refused_with_the_reason():
    text = EXAMPLE_PROFILES.read_text()
    quoted = 'warm: [{days: Mon-Fri, from: "08:00", to: "18:00", nodes: 1}]'
    assert quoted in text  # the example's own T4 schedule, unquoted here
    text = text.replace(quoted, "warm: [{days: Mon-Fri, from: 8:30, to: 18:00, nodes: 1}]", 1)
    with pytest.raises(ProfilesError) as e:
        parse_profiles_text(text)
    msgs = [str(p) for p in e.value.problems]
    assert any(m.startswith("pools.gput4.warm[0].from: 510") and "quoted" in m for m in msgs)
    assert any(m.startswith("pools.gput4.warm[0].to: 1080") for m in msgs)


@pytest.mark.parametrize("window, where, words", [
    ({**WORKDAY, "days": "Mon-Fry"}, "warm[0].days", "'Fry' is not a day"),
    ({**WORKDAY, "days": ""}, "warm[0].days", "not a list of days"),
    ({**WORKDAY, "from": "8:30"}, "warm[0].from", "not a time of day"),
    ({**WORKDAY, "to": "24:01"}, "warm[0].to", "not a time of day"),
    ({**WORKDAY, "from": "18:00", "to": "08:30"}, "warm[0]", "across midnight is two windows"),
    ({**WORKDAY, "nodes": 5}, "warm[0].nodes", "above max_nodes 4"),
    ({**WORKDAY, "nodes": 0}, "warm[0].nodes", "greater than or equal to 1"),
    ({**WORKDAY, "size": 1}, "warm[0].size", "size"),
])
def test_bad_windows_say_where_and_why(window, where, words):
    found = problems(with_warm([window]))
    assert any(f"pools.gput4.{where}" in m and words in m for m in found), found


def test_bad_time_zones():
    for zone in ("Mars/Olympus", "../../etc/passwd", "", "E" * 65, 3):
        found = problems(with_warm([WORKDAY], time_zone=zone))
        assert any(m.startswith("pools.gput4.time_zone") for m in found), (zone, found)
    # files of the zone database that zoneinfo opens but a CronJob's timeZone may not take; a name in the wrong
    # case (a case-insensitive file system opens it)
    for zone, words in (("localtime", "not an IANA zone"), ("Factory", "not an IANA zone"),
                        ("posix/Europe/Berlin", "not an IANA zone"), ("right/Europe/Berlin", "not an IANA zone"),
                        ("europe/berlin", "did you mean Europe/Berlin?")):
        found = problems(with_warm([WORKDAY], time_zone=zone))
        assert any(m.startswith("pools.gput4.time_zone") and words in m for m in found), (zone, found)


def test_overlaps_and_pool_rules():
    found = problems(with_warm([WORKDAY, {"days": "Fri-Mon", "from": "17:00", "to": "20:00", "nodes": 2}]))
    assert any("warm[1]" in m and "overlaps warm[0]" in m and "Mon, Fri" in m for m in found), found
    # back to back is no overlap; weekends apart neither
    parse_profiles(with_warm([WORKDAY, {"days": "Mon-Fri", "from": "18:00", "to": "20:00", "nodes": 2},
                              {"days": "Sat,Sun", "from": "08:00", "to": "18:00", "nodes": 1}]))
    gpumig = problems(with_warm([{**WORKDAY, "nodes": 1}], pool="gpumig"))  # min_nodes 1 there
    assert any("not above min_nodes 1" in m for m in gpumig), gpumig
    fixed = copy.deepcopy(BASE)
    fixed["pools"]["gput4"].pop("max_nodes")
    fixed["pools"]["gput4"]["warm"] = [WORKDAY]
    assert any("needs max_nodes" in m for m in problems(fixed))


def test_minimum_at_follows_the_pools_time_zone_and_daylight_saving():
    pool = parse_profiles(with_warm([WORKDAY], time_zone="Europe/Berlin")).pools["gput4"]
    # Monday 2026-03-30 (CEST, UTC+2): 08:30 local is 06:30 UTC
    assert W.minimum_at(pool, datetime(2026, 3, 30, 6, 29, tzinfo=timezone.utc)) == 0
    assert W.minimum_at(pool, datetime(2026, 3, 30, 6, 30, tzinfo=timezone.utc)) == 1
    # Monday 2026-01-05 (CET, UTC+1): 08:30 local is 07:30 UTC
    assert W.minimum_at(pool, datetime(2026, 1, 5, 7, 0, tzinfo=timezone.utc)) == 0
    assert W.minimum_at(pool, datetime(2026, 1, 5, 7, 30, tzinfo=timezone.utc)) == 1
    assert W.minimum_at(pool, datetime(2026, 1, 10, 10, 0, tzinfo=timezone.utc)) == 0  # a Saturday


def test_a_window_to_midnight_and_one_from_midnight_join():
    pool = parse_profiles(with_warm([{"days": "Fri", "from": "20:00", "to": "24:00", "nodes": 2},
                                     {"days": "Sat", "from": "00:00", "to": "02:00", "nodes": 2}])).pools["gput4"]
    assert [(c.day_names, c.at, c.min_count) for c in W.changes(pool)] == [("Sat", "02:00", 0), ("Fri", "20:00", 2)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sets(st.integers(0, 6), min_size=1), st.integers(0, 47), st.integers(1, 48),
                          st.integers(1, 4)), min_size=1, max_size=5))
def test_changes_replayed_over_the_week_give_the_step_function(raw):
    """Whatever valid schedule: applying the daily changes in time order reproduces `minimum_at_minute` at every
    half hour of the week (the CronJobs and the replay's model cannot disagree)."""
    windows, taken = [], []
    for days, a, length, nodes in raw:
        b = min(48, a + length)
        if a >= b or any(set(days) & d and a < y and x < b for d, x, y in taken):
            continue
        taken.append((set(days), a, b))
        windows.append({"days": ",".join(W.DAYS[d] for d in sorted(days)), "from": f"{a // 2:02d}:{a % 2 * 30:02d}",
                        "to": f"{b // 2:02d}:{b % 2 * 30:02d}", "nodes": nodes})
    if not windows:
        return
    data = with_warm(windows, time_zone="UTC")  # no daylight-saving gap to refuse a change time in
    whole_week = all(any(x in d and a <= h < b for d, a, b in taken) for x in range(7) for h in range(48))
    if whole_week and len({w["nodes"] for w in windows}) == 1:
        assert any("whole week" in m for m in problems(data))  # no change to render: refused
        return
    pool = parse_profiles(data).pools["gput4"]
    events = sorted((d * 1440 + W.minutes(c.at), c.min_count) for c in W.changes(pool) for d in c.days)
    value = events[-1][1] if events else W.minimum_at_minute(pool, 0)  # Sunday night carries into Monday
    for t in range(0, W.WEEK_MIN, 30):
        for at, v in events:
            if at == t:
                value = v
        assert value == W.minimum_at_minute(pool, t), (t, windows)


@given(st.text(max_size=70))
def test_days_parser_never_crashes(text):
    try:
        out = W.parse_days(text)
    except ValueError:
        return
    assert out and all(d in W.DAYS for d in out.split(","))


def test_a_huge_warm_list_is_one_problem_found_fast():
    """100k windows (a generated file gone wrong): one problem, at once; not O(n²) overlap problems."""
    import time

    from jupyterhub_gpu.model.profiles import Pool

    assert Pool.model_fields["warm"].metadata[0].max_length == W.MAX_WINDOWS
    t0 = time.monotonic()
    found = problems(with_warm([WORKDAY] * 100_000))
    assert time.monotonic() - t0 < 5
    assert [m for m in found if "warm" in m] == [m for m in found if m.startswith("pools.gput4.warm")]
    (mine,) = [m for m in found if m.startswith("pools.gput4.warm")]
    assert f"at most {W.MAX_WINDOWS}" in mine and "100000" in mine, mine
    # the rule itself stops at the count too (a pool built without the field's check)
    pool = parse_profiles(with_warm([WORKDAY])).pools["gput4"].model_copy(update={"warm": [W.WarmWindow(
        days="Mon", start="08:00", end="09:00", nodes=1)] * 3000})
    assert len(W.pool_problems("gput4", pool)) == 1


@pytest.mark.parametrize("warm", [
    [{"days": "Mon-Sun", "from": "00:00", "to": "24:00", "nodes": 2}],
    [{"days": "Mon-Sun", "from": "00:00", "to": "12:00", "nodes": 2},
     {"days": "Mon-Sun", "from": "12:00", "to": "24:00", "nodes": 2}],
])
def test_a_schedule_covering_the_whole_week_at_one_value_is_refused(warm):
    """No step, so no CronJob: the pool would never get its nodes. min_nodes says it."""
    found = problems(with_warm(warm))
    assert any(m.startswith("pools.gput4.warm") and "set min_nodes: 2 instead" in m for m in found), found
    # the whole week at two values does change: accepted
    day = {"days": "Mon-Sun", "from": "00:00", "to": "12:00", "nodes": 2}
    pool = parse_profiles(with_warm([day, {**day, "from": "12:00", "to": "24:00", "nodes": 3}],
                                    time_zone="UTC")).pools["gput4"]
    assert [(c.at, c.min_count) for c in W.changes(pool)] == [("00:00", 2), ("12:00", 3)]


@pytest.mark.parametrize("zone, window, where, words", [
    ("Europe/Berlin", {"days": "Sun", "from": "02:30", "to": "06:00", "nodes": 1}, "warm[0]",
     "02:30 does not exist in Europe/Berlin on Sun "),  # the last Sunday of March: 02:00–03:00 skipped
    ("Europe/Berlin", {"days": "Sat-Sun", "from": "01:00", "to": "02:00", "nodes": 1}, "warm[0]",
     "02:00 does not exist in Europe/Berlin on Sun"),
    ("America/Santiago", {"days": "Sat", "from": "20:00", "to": "24:00", "nodes": 1}, "warm[0]",
     "00:00 does not exist in America/Santiago on Sun"),
])
def test_a_change_time_the_clocks_skip_is_refused(zone, window, where, words):
    """robfig/cron (the CronJob controller) steps over a skipped local time: that change would not run that day."""
    found = problems(with_warm([window], time_zone=zone))
    assert any(m.startswith(f"pools.gput4.{where}") and words in m for m in found), found


def test_a_time_skipped_only_on_other_days_or_in_other_zones_is_fine():
    sunday_gap = {"days": "Mon-Fri", "from": "02:30", "to": "06:00", "nodes": 1}  # Berlin skips it on Sundays only
    parse_profiles(with_warm([sunday_gap], time_zone="Europe/Berlin"))
    parse_profiles(with_warm([{**sunday_gap, "days": "Sun"}], time_zone="Asia/Tokyo"))
    assert W.gaps("Europe/Berlin", 2027) == ((date(2027, 3, 28), 120, 180), (date(2028, 3, 26), 120, 180))
    assert W.gaps("UTC") == ()
