"""Kueue's condition messages (as Kueue writes them into Workload conditions) told in plain words."""
from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.model.kueue_words import QueueContext, context_for, plain_reason, slot_noun
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

CFG = load_profiles(EXAMPLE_PROFILES)
T4 = context_for(CFG, "team-ds", "t4-shared", position=1, of=2)


def test_context_reads_the_teams_quota_and_the_pools_unit():
    assert (T4.team, T4.pool, T4.quota, T4.noun, T4.position, T4.of) == ("data-science", "gput4", 8, "T4 slots", 1, 2)
    mig = context_for(CFG, "team-mlr", "a100-mig-1g10gb")
    assert mig.quota == 7 and mig.noun.endswith("MIG slices")
    assert slot_noun(CFG.pools["gpuh100"]).endswith("GPUs")
    unknown = context_for(CFG, "nowhere", "no-such-profile")
    assert (unknown.team, unknown.pool, unknown.quota) == (None, None, None)


def test_quota_in_use_names_the_teams_slots_and_the_place_in_the_queue():
    raw = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gput4, " \
          "1 more needed"
    assert plain_reason(raw, T4, "Pending") == "your team's 8 T4 slots are in use; starts when one finishes — " \
                                                "1 of 2 waiting"


def test_flavors_of_pools_the_user_never_chose_are_left_out():
    raw = ("couldn't assign flavors to pod set main: flavor gpuh100 doesn't match node affinity, flavor gpumig "
           "doesn't match node affinity, insufficient unused quota for nvidia.com/gpu in flavor gput4, 1 more needed")
    said = plain_reason(raw, T4)
    assert said.startswith("your team's 8 T4 slots are in use")
    assert "gpuh100" not in said and "affinity" not in said


def test_request_above_the_teams_whole_quota_can_never_start():
    raw = ("couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor gput4, "
           "request > maximum capacity (12 > 8)")
    said = plain_reason(raw, T4)
    assert "more T4 slots than your team's quota can ever give (12 asked, at most 8 possible)" in said
    assert "ask an admin to raise the team's quota" in said
    older = "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor gput4 in " \
            "ClusterQueue"
    assert "can ever give, so it cannot start" in plain_reason(older, T4)


def test_resource_without_quota_and_namespace_selector_are_setup_problems():
    said = plain_reason("couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in "
                        "ClusterQueue", T4)
    assert said.startswith("your team's quota has no T4 slots")
    said = plain_reason("Workload namespace doesn't match ClusterQueue selector", T4, "Inadmissible")
    assert "does not take jobs from this namespace" in said and "gpuhub doctor" in said
    for raw in ("ClusterQueue team-data-science is inactive", "LocalQueue data-science doesn't exist",
                "ClusterQueue team-data-science doesn't exist"):
        assert plain_reason(raw, T4, "Inadmissible").startswith("your team's queue is not ready"), raw
    taint = "couldn't assign flavors to pod set main: untolerated taint {sku gpu NoSchedule} in flavor gput4"
    assert "disagree about where this job may run" in plain_reason(taint, T4)


@pytest.mark.parametrize("raw,reason,why", [
    ("Preempted to accommodate a workload (UID: 5c1f, JobUID: 77aa) due to prioritization in the ClusterQueue",
     "InClusterQueue", "a higher-priority job needed the GPU"),
    ("Preempted to accommodate a workload (UID: 5c1f, JobUID: 77aa) due to reclamation within the cohort",
     "InCohortReclamation", "another team took back GPUs it had lent to yours"),
    ("Preempted to accommodate a workload (UID: 5c1f, JobUID: 77aa) due to Fair Sharing within the cohort",
     "InCohortFairSharing", "shared out fairly"),
    ("Preempted to accommodate a higher priority Workload", "Preempted", "a higher-priority job needed the GPU"),
])
def test_preemption_messages(raw, reason, why):
    said = plain_reason(raw, T4, reason)
    assert why in said and "resume from its last checkpoint" in said and "UID" not in said


def test_pending_preemption_and_empty_or_unknown_messages():
    assert plain_reason("Pending the preemption of 2 workload(s)", T4).startswith(
        "making room: 2 lower-priority jobs are being stopped")
    assert plain_reason("", T4) == "waiting in your team's queue — 1 of 2 waiting"
    assert plain_reason("something Kueue says one day", QueueContext()) == "waiting in your team's queue"


@given(st.text(max_size=300))
def test_any_message_gives_a_short_sentence_without_raw_kueue_terms(raw):
    said = plain_reason(raw, T4)
    assert said and len(said) < 300
    assert "pod set" not in said and "flavor" not in said


def test_gpu_amount_says_a_share_or_a_slice_never_one_gpu():
    from jupyterhub_gpu.model.gpu_amount import gpu_amount

    said = {p.slug: gpu_amount(CFG, p) for p in CFG.profiles}
    assert said["t4-shared"] == "¼ T4 (time-sliced)"
    assert said["a100-mig-1g10gb"] == "1g.10gb MIG slice"
    assert said["h100-full"] == "1 × H100 NVL" and said["cpu"] == "no GPU"
    two = CFG.profiles[2].model_copy(update={"gpu": CFG.profiles[2].gpu.model_copy(update={"count": 2})})
    assert gpu_amount(CFG, two) == "2 × 1g.10gb MIG slices"


# ---------------------------------------------------------------------- waits that name the real limit (issue 34)
MIG = context_for(CFG, "team-mlr", "a100-mig-1g10gb", position=1, of=2)
CPU_BOUND = ("couldn't assign flavors to pod set main: flavor gput4 doesn't match node affinity, insufficient "
             "unused quota for cpu in flavor gpumig, 572m more needed")


def test_a_cpu_bound_wait_names_cpu_and_the_pool_never_the_gpus():
    said = plain_reason(CPU_BOUND, MIG, "Pending")
    assert said == ("your team's CPU quota on the A100 80GB pool is used up: 0.572 CPUs more needed; starts when "
                    "one of the team's servers or jobs on this pool stops — 1 of 2 waiting")
    assert "slices are in use" not in said and "GPU" not in said


def test_with_the_live_queue_the_wait_says_what_is_used_and_what_is_free():
    from dataclasses import replace

    from jupyterhub_gpu.model.kueue_words import flavor_usage

    queue = {"spec": {"resourceGroups": [{"flavors": [
                {"name": "gput4", "resources": [{"name": "cpu", "nominalQuota": 8}]},
                {"name": "gpumig", "resources": [{"name": "cpu", "nominalQuota": "3428m"},
                                                 {"name": "memory", "nominalQuota": "48Gi"},
                                                 {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 2}]}]}]},
             "status": {"flavorsReservation": [{"name": "gpumig", "resources": [
                 {"name": "cpu", "total": "3428m"}, {"name": "memory", "total": "46Gi"},
                 {"name": "nvidia.com/mig-1g.10gb", "total": 1}]}]}}
    usage = flavor_usage(queue, "gpumig")
    assert usage["cpu"] == (Decimal("3.428"), Decimal("3.428")) and usage["nvidia.com/mig-1g.10gb"] == (1, 2)
    live = replace(MIG, usage=usage)
    assert plain_reason(CPU_BOUND, live).startswith(
        "your team's CPU quota on the A100 80GB pool is used up: 3.43 of 3.43 CPUs in use, 0.572 CPUs more needed; "
        "1 of 2 A100 80GB MIG slices is free; starts when")
    memory = CPU_BOUND.replace("for cpu", "for memory").replace("572m", "2Gi")
    assert plain_reason(memory, live).startswith(
        "your team's memory quota on the A100 80GB pool is used up: 46 GiB of 48 GiB in use, 2 GiB more needed")
    assert flavor_usage(queue, "nowhere") == {} and flavor_usage(None, "gpumig") == {}


def test_more_cpu_than_the_queue_can_ever_give_says_cpu():
    raw = ("couldn't assign flavors to pod set main: insufficient quota for cpu in flavor gpumig, request > "
           "maximum capacity (4 > 3428m)")
    said = plain_reason(raw, MIG)
    assert "asks for more CPU than your team's quota can ever give (4 CPUs asked, at most 3.43 CPUs possible)" in said


def test_the_widget_and_gpu_jobs_say_cpu_for_a_cpu_bound_job():
    """gpu-jobs' `message` (what the widget, %gpu_jobs and the lab panel show) comes from the same words."""
    from jupyterhub_gpu.contract import QUEUED
    from jupyterhub_gpu.services.jobs.words import explain
    from jupyterhub_gpu.singleuser.widgets import render_html, view

    status = explain(CFG, {"state": QUEUED, "namespace": "team-mlr", "profile": "a100-mig-1g10gb", "position": 1,
                           "queue_length": 2, "queue": "ml-research", "message": CPU_BOUND,
                           "kueue_message": CPU_BOUND, "kueue_reason": "Pending"})
    assert status["message"].startswith("your team's CPU quota on the A100 80GB pool is used up")
    head = render_html("gpu-alice-train", view(status), status).split("<details>")[0]
    assert "CPU quota on the A100 80GB pool is used up" in head and "MIG slices are in use" not in head
