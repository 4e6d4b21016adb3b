"""Shared GPUs' evidence in showback and right-sizing: a time-sliced or MPS pod's DCGM series are its
device's (its neighbours' use too), so they never count as its GPU-hours used or peak memory, and each row
says which evidence it used. The culler's side: tests/culler/test_shared_gpu.py."""
from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone

import yaml
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.services.usage import accounting as acc
from jupyterhub_gpu.services.usage.collect import report
from jupyterhub_gpu.services.usage.rightsize import hints
from jupyterhub_gpu.tools.report import render

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)
UNTIL = T0 + timedelta(days=1)
CFG = load_profiles(EXAMPLE_PROFILES)
RULES, _ = acc.rules_and_teams(CFG)


def session(user, profile, i, rules=RULES, hours=2.0):
    start = T0 + timedelta(hours=3 * i)
    r = rules[profile]
    return acc.Lifetime(f"{user}-{profile}-{i}", "server", "jhub", f"jupyter-{user}-{profile}-{i}", user, "",
                        profile, "", r.gpus, r.hourly_cost, start, start + timedelta(hours=hours))


def test_shared_profiles_are_the_time_sliced_and_mps_ones():
    assert acc.shared_profiles(RULES) == {"t4-shared", "t4-mps"}


def test_an_idle_share_beside_a_busy_neighbour_shows_no_use_and_says_why():
    # the exporter gives both pods on the T4 the device's 90 % and its 14 GiB; ana's own H100 is 50 % busy
    idle, busy, own = session("bo", "t4-shared", 0), session("cy", "t4-shared", 0), session("ana", "h100-full", 0)
    used = {("jhub", lt.pod): acc.PodUse(1.8, 14 * 1024) for lt in (idle, busy)}
    used[("jhub", own.pod)] = acc.PodUse(1.0, 30 * 1024)
    rep = report([idle, busy, own], [], T0, UNTIL, "user", used, None, CFG)
    rows = {r["key"]: r for r in rep["rows"]}
    assert (rows["bo"]["gpu_hours_held"], rows["bo"]["gpu_hours_used"], rows["bo"]["utilisation_pct"]) == \
        (2.0, 0.0, None)
    assert rows["bo"]["peak_memory_mib"] is None and rows["bo"]["gpu_hours_shared"] == 2.0
    assert rows["bo"]["evidence"] == "not attributable: shared devices (time-sliced / MPS)"
    assert (rows["ana"]["gpu_hours_used"], rows["ana"]["utilisation_pct"], rows["ana"]["evidence"]) == \
        (1.0, 50.0, "DCGM, own devices")
    total = rep["total"]
    assert (total["gpu_hours_held"], total["gpu_hours_used"], total["utilisation_pct"]) == (6.0, 1.0, 50.0)
    assert total["evidence"] == "DCGM, own devices; 4.00 GPU-h on shared devices not counted"
    table = render(rep, "table").splitlines()
    assert "use from" in table[1] and table[2].startswith("ana") and table[2].endswith("DCGM, own devices")
    bo = next(line for line in table if line.startswith("bo "))
    assert "?" in bo and bo.endswith("not attributable: shared devices (time-sliced / MPS)")
    assert {r["key"]: r["evidence"] for r in csv.DictReader(io.StringIO(render(rep, "csv")))}["bo"] == \
        rows["bo"]["evidence"]


def test_without_dcgm_no_row_claims_any_evidence():
    rep = report([session("bo", "t4-shared", 0)], [], T0, UNTIL, "user", None, None, CFG)
    assert rep["rows"][0]["evidence"] == "" and rep["total"]["evidence"] == ""


@given(st.lists(st.tuples(st.sampled_from(["ana", "bo"]), st.sampled_from(sorted(RULES.keys() - {"cpu"})),
                          st.floats(0, 1), st.floats(0, 80 * 1024)), max_size=12))
def test_used_counts_only_own_devices_whatever_the_mix(mix):
    lts, used = [], {}
    for i, (user, slug, busy, mem) in enumerate(mix):
        lt = session(user, slug, i)
        lts.append(lt)
        used[("jhub", lt.pod)] = acc.PodUse(2.0 * lt.gpus * busy, mem)
    shared = acc.shared_profiles(RULES)
    for r in acc.aggregate(lts, T0, T0 + timedelta(days=3), "user", used, shared):
        mine = [lt for lt in lts if lt.user == r.key]
        own = [lt for lt in mine if lt.profile not in shared]
        assert abs(r.gpu_hours_used - sum(used[("jhub", lt.pod)].used_hours for lt in own)) < 1e-6
        assert abs(r.gpu_hours_shared - sum(2.0 * lt.gpus for lt in mine if lt.profile in shared)) < 1e-6
        assert r.peak_memory_mib == (max(used[("jhub", lt.pod)].peak_memory_mib for lt in own) if own else None)
        assert (r.utilisation is None) == (not own)
        assert r.evidence.startswith("not attributable") == (not own)


def test_no_right_sizing_hint_from_a_shared_devices_series(tmp_path):
    """A time-sliced H100 share ($3.49/h) whose pods read the device's 7 GB and 10 %: before, that was
    taken as the sessions' own and a 1g.10gb slice suggested; it is the device's, so no hint."""
    data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    data["pools"]["gpuh100"]["sharing"] = {"strategy": "time-slicing", "replicas": 2}
    h100 = next(p for p in data["profiles"] if p["slug"] == "h100-full")
    h100["gpu"] = {"kind": "time-sliced", "count": 1}
    h100.pop("max_nodes", None)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    cfg = load_profiles(tmp_path / "p.yaml")
    rules, _ = acc.rules_and_teams(cfg)
    costs = {slug: r.hourly_cost for slug, r in rules.items()}
    lts = [session("ana", "h100-full", i, rules) for i in range(4)]
    used = {("jhub", lt.pod): acc.PodUse(0.2, 7 * 1024) for lt in lts}
    assert hints(lts, used, cfg, costs, T0, UNTIL) == []
    whole = [session("ana", "h100-full", i) for i in range(4)]  # the same sessions on whole H100s: a hint
    used = {("jhub", lt.pod): acc.PodUse(0.2, 7 * 1024) for lt in whole}
    costs = {slug: r.hourly_cost for slug, r in RULES.items()}
    assert hints(whole, used, CFG, costs, T0, UNTIL)[0].suggestion == "a100-mig-1g10gb"
