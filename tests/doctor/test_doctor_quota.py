"""`gpuhub doctor` says, per team and pool, whether the live ClusterQueue's quota can be used in full: a
queue applied from an older file (CPU = each slot's share of a node) admits fewer servers than its GPUs."""
from __future__ import annotations

import pytest
import yaml
from doctor.test_doctor_checks import failed, healthy, row

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import parse_profiles_text
from jupyterhub_gpu.tools.doctor import FAIL, OK, run_checks


@pytest.fixture(scope="module")
def cfg():
    """The example with a profile on the MIG pool above a slice's share (3.38 CPUs / 30.2 GiB of 7)."""
    data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    data["profiles"].append({"slug": "mig-big", "display_name": "MIG large", "pool": "gpumig",
                             "gpu": {"kind": "mig", "profile": "1g.10gb"}, "cpu": 5, "memory": "32Gi",
                             "shm": "1Gi", "groups": ["ml-research"]})
    data["teams"]["ml-research"]["quota"]["gpumig"] = 2
    return parse_profiles_text(yaml.safe_dump(data))


def flavor(snap, team, pool):
    cq = next(q for q in snap.kueue["ClusterQueue"] if q["metadata"]["name"] == f"team-{team}")
    return {r["name"]: r for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"] == pool
            for r in f["resources"]}


def test_every_team_and_pool_is_usable_in_full_as_rendered(cfg):
    checks = run_checks(cfg, healthy(cfg), "p.yaml")
    # (doctor_size's "node size" row still says 7 of mig-big never fit one node: slices stay idle)
    assert [c for c in failed(checks) if c.section == "kueue"] == []
    mlr = row(checks, "kueue", "quota ml-research on gpumig")
    assert mlr.status == OK and "usable in full: 2 GPU units with 10 CPUs / 66 GiB" in mlr.detail
    assert {c.name for c in checks if c.name.startswith("quota ")} == {
        f"quota {t} on {p}" for t, team in cfg.teams.items() for p in team.quota}


def test_a_live_queue_with_each_slices_share_of_cpu_admits_one_server_of_two(cfg):
    snap = healthy(cfg)
    res = flavor(snap, "ml-research", "gpumig")
    res["cpu"]["nominalQuota"] = "6760m"  # 2 × 23.66 / 7: the per-slot share, as rendered before issue 34
    checks = run_checks(cfg, snap, "p.yaml")
    c = row(checks, "kueue", "quota ml-research on gpumig")
    assert c.status == FAIL
    assert c.detail.startswith("a GPU quota of 2 that cannot be used in full: CPU 6.76 CPUs of the 10 CPUs needed, "
                               "so only 1 of 2 servers or jobs of 'mig-big' (5 CPUs / 33 GiB each) run at once")
    assert c.fix.startswith("gpuhub render kueue p.yaml")
    assert row(checks, "kueue", "quota data-science on gpumig").status == OK  # per team: the others are fine


def test_memory_and_scratch_disk_shortfalls_are_named_too(cfg):
    snap = healthy(cfg)
    res = flavor(snap, "ml-research", "gpumig")
    res["memory"]["nominalQuota"] = "40Gi"
    res["ephemeral-storage"]["nominalQuota"] = "100Gi"
    c = row(run_checks(cfg, snap, "p.yaml"), "kueue", "quota ml-research on gpumig")
    assert c.status == FAIL and "memory 40 GiB of the 66 GiB needed" in c.detail
    assert "scratch disk 100 GiB of the 200 GiB that 2 jobs may ask" in c.detail
