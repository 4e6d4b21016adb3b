"""A team's quota of N GPUs admits N servers: the CPU and memory rendered next to the GPU quota is what the
team's profiles ask for with N (never only the node's per-slot share), and `gpuhub validate` refuses a file
whose pool's nodes could not run them (issue 34)."""
from __future__ import annotations

import subprocess
from decimal import Decimal

import pytest
import yaml

from jupyterhub_gpu.builders.kueue import render_kueue
from jupyterhub_gpu.model import quota
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.model.quantities import GI, parse
from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles_text

#: The issue's file: two A100-40GB 1g.5gb slices for team analytics on 12-CPU / 100 GiB nodes (7 slices
#: each, so a slice's share is 1.71 CPUs / 14.3 GiB), and a profile asking 2 CPUs / 20 GiB + 1 GiB shm.
ANALYTICS = {
    "pools": {"a40single": {
        "node_selector": {"kubernetes.azure.com/agentpool": "a40single"},
        "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
        "node": {"cpu": 12, "memory": "100Gi"}, "gpu": {"model": "A100-40GB", "count_per_node": 1},
        "sharing": {"strategy": "mig", "mig_strategy": "mixed", "layout": "all-1g.5gb"},
        "min_nodes": 1, "max_nodes": 1}},
    "profiles": [{"slug": "mig-analytics", "display_name": "MIG 1g.5gb", "pool": "a40single",
                  "gpu": {"kind": "mig", "profile": "1g.5gb"}, "cpu": 2, "memory": "20Gi", "shm": "1Gi"}],
    "teams": {"analytics": {"namespace": "team-an", "quota": {"a40single": 2}}},
}


def file_with(edit=None) -> str:
    data = yaml.safe_load(yaml.safe_dump(ANALYTICS))
    if edit:
        edit(data)
    return yaml.safe_dump(data)


def flavor_quota(cfg, team: str, flavor: str) -> dict:
    (cq,) = [o for o in render_kueue(cfg) if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == f"team-{team}"]
    (fl,) = [f for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"] == flavor]
    return {r["name"]: r for r in fl["resources"]}


def test_two_slices_of_quota_carry_what_two_servers_ask_not_two_slices_share_of_a_node():
    res = flavor_quota(parse_profiles_text(file_with()), "analytics", "a40single")
    assert res["nvidia.com/mig-1g.5gb"]["nominalQuota"] == 2
    assert res["cpu"]["nominalQuota"] == "4"             # was 3428m (2 × 12/7): one server of 2 CPUs
    assert res["memory"]["nominalQuota"] == "42Gi"       # 2 × (20 Gi + 1 Gi shm), above 2 × 100/7 GiB
    assert res["ephemeral-storage"]["nominalQuota"] == "200Gi"


def test_a_small_profile_keeps_the_slots_share_of_a_node():
    """Where the profiles ask less than a slot's share, the share stays (the example file's quotas are)."""
    small = parse_profiles_text(file_with(lambda d: d["profiles"][0].update(cpu="1", memory="4Gi")))
    assert flavor_quota(small, "analytics", "a40single")["cpu"]["nominalQuota"] == "3428m"


def test_need_counts_whole_servers_of_every_profile_the_team_may_choose():
    def two_profiles(d):
        d["teams"]["analytics"]["quota"]["a40single"] = 3
        d["profiles"].append({"slug": "mig-pair", "display_name": "2 slices", "pool": "a40single",
                              "gpu": {"kind": "mig", "profile": "1g.5gb", "count": 2}, "cpu": 5,
                              "memory": "8Gi", "shm": "1Gi"})
    cfg = parse_profiles_text(file_with(two_profiles))
    # 3 slices: one pair (5 CPUs) and one single (2) is the most CPU; three singles the most memory and pods
    assert quota.need(cfg, "analytics", "a40single", 3) == quota.Need(Decimal(7), Decimal(63 * GI), 3)
    assert quota.need(cfg, "analytics", "a40single", 2).cpu == 5  # the pair alone beats two singles (4)


def test_a_profile_only_an_earlier_teams_group_may_pick_is_not_counted():
    def teams(d):
        d["teams"] = {"first": {"namespace": "team-a", "quota": {"a40single": 1}},
                      "second": {"namespace": "team-b", "quota": {"a40single": 1}}}
        d["profiles"][0]["groups"] = ["first"]
    cfg = parse_profiles_text(file_with(teams))
    assert quota.may_choose(cfg, "first", cfg.profiles[0])
    # a user in groups first and second is in team first (file order): second's members never have it
    assert not quota.may_choose(cfg, "second", cfg.profiles[0])
    assert quota.need(cfg, "second", "a40single", 1) == quota.Need()
    cfg.profiles[0].groups.append("second")  # a member of both is in team first, so second may now
    assert quota.may_choose(cfg, "second", cfg.profiles[0])


def test_borrowing_limit_carries_what_the_borrowed_servers_ask():
    def borrow(d):
        d["teams"]["analytics"].update(cohort="shared", borrowing_limit=3)
    res = flavor_quota(parse_profiles_text(file_with(borrow)), "analytics", "a40single")
    assert res["cpu"]["borrowingLimit"] == "6" and res["memory"]["borrowingLimit"] == "63Gi"


def test_a_quota_the_pools_nodes_cannot_hold_is_refused_with_the_numbers_and_both_ways_out():
    text = file_with(lambda d: d["teams"]["analytics"]["quota"].update(a40single=7))
    with pytest.raises(ProfilesError) as e:
        parse_profiles_text(text)
    (problem,) = e.value.problems
    assert problem.path == "teams.analytics.quota.a40single"
    assert ("a quota of 7 promises 7 servers or jobs of 'mig-analytics' (2 CPUs / 21 GiB each, memory + shm): "
            "14 CPUs / 147 GiB, but pool 'a40single' has at most 1 node (max_nodes), which can run only 4 of "
            "them (4 per node)") in problem.message
    assert ("Either give 'mig-analytics' at most 1.71 CPUs / 14.3 GiB (memory + shm), or lower "
            "teams.analytics.quota.a40single to 4.") in problem.message


@pytest.mark.parametrize("way_out", ["smaller requests", "smaller quota"])
def test_each_way_out_the_refusal_names_is_accepted(way_out):
    def edit(d):
        d["teams"]["analytics"]["quota"]["a40single"] = 7
        if way_out == "smaller requests":  # what the message offers: 1.71 CPUs / 14.3 GiB with shm
            d["profiles"][0].update(cpu="1710m", memory="13Gi", shm="1Gi")
        else:
            d["teams"]["analytics"]["quota"]["a40single"] = 4
    cfg = parse_profiles_text(file_with(edit))
    assert quota.shortfalls(cfg) == []


def test_validate_cli_refuses_it_with_exit_2(tmp_path):
    path = tmp_path / "profiles.yaml"
    path.write_text(file_with(lambda d: d["teams"]["analytics"]["quota"].update(a40single=7)))
    r = subprocess.run(["gpuhub", "validate", str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "teams.analytics.quota.a40single: a quota of 7" in r.stderr and not r.stdout


def test_a_pool_of_unknown_size_or_count_is_not_refused():
    """Unknown is not small: without max_nodes more nodes may come (fit.py warns about a node's slots)."""
    no_max = file_with(lambda d: (d["teams"]["analytics"]["quota"].update(a40single=7),
                                  d["pools"]["a40single"].pop("max_nodes")))
    assert quota.shortfalls(parse_profiles_text(no_max)) == []


def test_the_example_file_still_validates_and_its_quotas_are_usable_in_full():
    cfg = load_profiles(EXAMPLE_PROFILES)
    assert quota.shortfalls(cfg) == []
    for name, team in cfg.teams.items():
        for pool, units in team.quota.items():
            res = flavor_quota(cfg, name, pool)
            wanted = quota.need(cfg, name, pool, units)
            assert parse(res["cpu"]["nominalQuota"]) >= wanted.cpu and parse(res["memory"]["nominalQuota"]) >= \
                wanted.memory, (name, pool)
