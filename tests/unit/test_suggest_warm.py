"""A suggested warm schedule from the usage history (tools/suggest_warm.py): the busy weekday-hours of each pool at
zero, in its time zone, with what the schedule costs and covers; the suggestion is a valid profiles-file entry."""
from __future__ import annotations

import copy
import zoneinfo
from datetime import datetime, timedelta, timezone

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import parse_profiles
from jupyterhub_gpu.tools.suggest_warm import suggest, text

DATA = yaml.safe_load(EXAMPLE_PROFILES.read_text())
CFG = parse_profiles(DATA)  # gput4: Europe/Berlin, min 0, max 4
MONDAY = datetime(2026, 1, 5, tzinfo=timezone.utc)  # winter: Berlin is UTC+1


def test_weekday_mornings_in_the_pools_time_zone():
    starts = []
    for week in range(4):
        for day in range(5):
            base = MONDAY + timedelta(weeks=week, days=day)
            starts += [("t4-shared", base + timedelta(hours=8)), ("t4-shared", base + timedelta(hours=13))]  # 09, 14
    starts.append(("t4-shared", MONDAY + timedelta(days=5, hours=9)))  # one Saturday: below the threshold
    starts.append(("cpu", MONDAY + timedelta(hours=8)))  # not a GPU pool
    (s,) = suggest(CFG, starts, weeks=4)
    assert s.pool == "gput4" and s.starts == 41 and s.covered == 40
    assert s.windows == [{"days": "Mon,Tue,Wed,Thu,Fri", "from": "08:45", "to": "15:00", "nodes": 1}]
    assert s.node_hours_per_week == 5 * 6.25
    data = copy.deepcopy(DATA)
    data["pools"]["gput4"]["warm"] = s.windows
    assert parse_profiles(data).pools["gput4"].warm  # adoptable as it is
    words = text([s], node_add_s=300)
    assert 'warm: [{days: Mon,Tue,Wed,Thu,Fri, from: "08:45", to: "15:00", nodes: 1}]' in words
    assert "40 of 41 starts (98%)" in words and "wait ~5 min" in words


def test_pools_kept_warm_already_or_without_history_get_nothing():
    assert suggest(CFG, [("a100-mig-1g10gb", MONDAY)], weeks=1) == []  # min_nodes 1
    assert "nothing to suggest" in text([])
    (quiet,) = suggest(CFG, [("t4-shared", MONDAY)], weeks=4)
    assert quiet.windows == [] and "stay at zero" in text([quiet])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2026, 3, 1),
                             timezones=st.just(timezone.utc)), max_size=200),
       st.floats(min_value=0.1, max_value=8), st.floats(min_value=0.05, max_value=3), st.integers(0, 120))
def test_any_history_gives_an_adoptable_schedule(times, weeks, min_starts, lead):
    found = suggest(CFG, [("t4-shared", t) for t in times], weeks, min_starts, lead)
    for s in found:
        assert 0 <= s.covered <= s.starts == len(times)
        data = copy.deepcopy(DATA)
        data["pools"]["gput4"]["warm"] = s.windows
        parse_profiles(data)  # valid: days, HH:MM, no overlap, nodes within bounds


def test_gpuhub_report_suggest_warm_reads_the_stores_server_starts(tmp_path, capsys):
    """`gpuhub report --suggest-warm` end to end: the real store on disk, read only, and the CLI's contract."""
    from jupyterhub_gpu.services.usage.accounting import Lifetime
    from jupyterhub_gpu.services.usage.store import UsageStore
    from jupyterhub_gpu.tools.cli import main

    now = datetime.now(timezone.utc)
    berlin_nine = (now - timedelta(days=7)).astimezone(zoneinfo.ZoneInfo("Europe/Berlin")).replace(
        hour=9, minute=5, second=0, microsecond=0)

    def server(i: int, kind: str = "server") -> Lifetime:
        start = berlin_nine - timedelta(days=i)
        return Lifetime(f"u{i}{kind}", kind, "jhub", f"jupyter-a{i}", f"a{i}", "", "t4-shared", "", 1, 0.5,
                        start.astimezone(timezone.utc), start.astimezone(timezone.utc) + timedelta(hours=1))

    store = UsageStore(tmp_path)
    store.append_finished([server(i) for i in range(14)] + [server(i, "job") for i in range(14)])
    store.close()
    assert main(["report", str(EXAMPLE_PROFILES), "--store", str(tmp_path), "--suggest-warm",
                 "--since", "28d", "--min-starts", "0.25"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gput4:\n  warm: [{days: ") and 'from: "08:45", to: "10:00"' in out
    assert "14 of 14 starts (100%)" in out  # the jobs' lifetimes are not server starts
    assert main(["report", str(EXAMPLE_PROFILES), "--suggest-warm"]) == 2  # no store: said, nothing printed
    bad = capsys.readouterr()
    assert bad.out == "" and "--store" in bad.err
    assert main(["report", str(EXAMPLE_PROFILES), "--store", str(tmp_path), "--suggest-warm", "--since", "400d"]) == 2
    assert "at most 182d" in capsys.readouterr().err


def test_the_mean_divides_by_the_weeks_the_store_covers_not_the_weeks_asked_for(tmp_path, capsys):
    """A store one week old asked for --since 28d: its starts are one week's, not a quarter of four weeks'."""
    from jupyterhub_gpu.services.usage.accounting import Lifetime
    from jupyterhub_gpu.services.usage.store import UsageStore
    from jupyterhub_gpu.tools.cli import main

    now = datetime.now(timezone.utc)
    monday = (now - timedelta(days=7)).astimezone(zoneinfo.ZoneInfo("Europe/Berlin"))
    monday = (monday - timedelta(days=monday.weekday())).replace(hour=9, minute=5, second=0, microsecond=0)
    starts = [monday + timedelta(days=d) for d in range(5)]  # one week of Mon-Fri 09:05 starts
    store = UsageStore(tmp_path)
    store.append_finished([Lifetime(f"u{i}", "server", "jhub", f"jupyter-a{i}", f"a{i}", "", "t4-shared", "", 1,
                                    0.5, t.astimezone(timezone.utc), t.astimezone(timezone.utc) + timedelta(hours=1))
                           for i, t in enumerate(starts)])
    store.close()
    # one start per weekday-hour in the week recorded: a mean of about 1 (not 0.25) passes --min-starts 0.5
    assert main(["report", str(EXAMPLE_PROFILES), "--store", str(tmp_path), "--suggest-warm", "--since", "28d",
                 "--min-starts", "0.5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gput4:\n  warm: [{days: Mon,Tue,Wed,Thu,Fri, from: \"08:45\", to: \"10:00\"") and (
        "5 of 5 starts" in out), out


def test_suggested_edges_avoid_the_hour_daylight_saving_skips_and_a_busy_week_says_min_nodes():
    # Berlin skips 02:00-03:00 on the last Sunday of March: a Sunday window ending at 02:00 ends at 03:00 instead
    sunday_one = [("t4-shared", datetime(2026, 1, 4, 0, 30, tzinfo=timezone.utc))]  # Sun 01:30 Berlin
    (s,) = suggest(CFG, sunday_one, weeks=1, min_starts=1, lead_min=0)
    assert s.windows == [{"days": "Sun", "from": "01:00", "to": "03:00", "nodes": 1}]
    data = copy.deepcopy(DATA)
    data["pools"]["gput4"]["warm"] = s.windows
    parse_profiles(data)
    every = [("t4-shared", MONDAY + timedelta(hours=h)) for h in range(7 * 24)]
    (s,) = suggest(CFG, every, weeks=1, min_starts=1, lead_min=0)
    assert s.every_hour and not s.windows and "set min_nodes: 1 instead" in text([s])
