"""Right-sizing hints on the example profiles file with known DCGM use: a hint for an oversized profile,
none for a well-sized one, none without enough sessions or without memory samples."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.services.usage import accounting as acc
from jupyterhub_gpu.services.usage.collect import report
from jupyterhub_gpu.services.usage.rightsize import capacity, hints

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)
CFG = load_profiles(EXAMPLE_PROFILES)
RULES, _ = acc.rules_and_teams(CFG)
COSTS = {slug: r.hourly_cost for slug, r in RULES.items()}
UNTIL = T0 + timedelta(days=7)


def sessions(user, profile, n, peak_mib, busy):
    """`n` two-hour sessions, each `busy` (0..1) of its time at work, peaking at `peak_mib`."""
    lts, used = [], {}
    for i in range(n):
        start = T0 + timedelta(hours=3 * i)
        lt = acc.Lifetime(f"{user}-{profile}-{i}", "job", "team-x", f"{user}-{profile}-{i}", user, "x", profile,
                          f"j{i}", RULES[profile].gpus, RULES[profile].hourly_cost, start, start + timedelta(hours=2))
        lts.append(lt)
        used[("team-x", lt.pod)] = acc.PodUse(2.0 * lt.gpus * busy, peak_mib)
    return lts, used


def test_capacities_of_the_example_profiles():
    assert capacity(CFG, CFG.profile("h100-full")) == (94.0, 1.0)
    assert capacity(CFG, CFG.profile("a100-mig-1g10gb")) == (10, 1 / 7)
    assert capacity(CFG, CFG.profile("t4-shared")) is None  # a share's compute is never promised


def test_oversized_gets_a_hint_well_sized_does_not():
    big, used_big = sessions("alice", "h100-full", 4, 7 * 1024, 0.10)   # 7 GB, 10 % busy on a whole H100
    fit, used_fit = sessions("bob", "h100-full", 4, 70 * 1024, 0.80)     # needs the H100
    (hint,) = hints(big + fit, {**used_big, **used_fit}, CFG, COSTS, T0, UNTIL)
    assert (hint.user, hint.profile, hint.suggestion, hint.sessions) == ("alice", "h100-full", "a100-mig-1g10gb", 4)
    assert hint.saving_per_hour == round(6.98 - 0.524, 3) and hint.peak_memory_gb == 7.0
    assert hint.peak_activity_pct == 10.0
    assert "a100-mig-1g10gb (for groups data-science, ml-research) would do, $6.46/h cheaper" in hint.text


def test_needs_compute_or_memory_headroom_too():
    # 7 GB but 50 % of an H100 busy: a 1/7 slice is too small; the cheaper whole A100 (spot) fits
    lts, used = sessions("carol", "h100-full", 3, 7 * 1024, 0.50)
    (hint,) = hints(lts, used, CFG, COSTS, T0, UNTIL)
    assert hint.suggestion == "a100-spot"
    # 9 GB peak: 10 GB slice lacks the 25 % headroom
    lts, used = sessions("dan", "h100-full", 3, 9 * 1024, 0.05)
    assert hints(lts, used, CFG, COSTS, T0, UNTIL)[0].suggestion == "a100-spot"


def test_never_without_enough_data():
    lts, used = sessions("erin", "h100-full", 2, 1024, 0.01)  # two sessions: too few
    assert hints(lts, used, CFG, COSTS, T0, UNTIL) == []
    lts, used = sessions("erin", "h100-full", 5, 1024, 0.01)
    no_memory = {k: acc.PodUse(u.used_hours, None) for k, u in used.items()}
    assert hints(lts, no_memory, CFG, COSTS, T0, UNTIL) == []
    assert hints(lts, {}, CFG, COSTS, T0, UNTIL) == []
    assert report(lts, [], T0, UNTIL, "user", None, None, CFG)["hints"] == []  # no DCGM: no hint
    assert report(lts, [], T0, UNTIL, "user", used, None, CFG)["hints"][0].startswith("erin: the last 5 sessions")
