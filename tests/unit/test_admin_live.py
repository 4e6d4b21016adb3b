"""The console's live state (services/admin/live.py) and how the page words it (render.py), pure: nodes starting
and pods waiting for a node per pool (a pending pod's pool from its nodeSelector or required node affinity, not
when Kueue still gates it), a team's borrowed quota and its oldest pending Workload, and each reading's slots in
use kept for the chart; whatever cannot be read is unknown, never 0, and every name is escaped."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.services.admin import render
from jupyterhub_gpu.services.admin.chart import Bucket
from jupyterhub_gpu.services.admin.live import (
    LiveReader,
    LiveState,
    PoolState,
    Read,
    TeamState,
    oldest_waits,
    pool_states,
    target_labels,
    team_state,
    waits_for,
    workload_namespaces,
)

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc).timestamp()
POOL = {"kubernetes.azure.com/agentpool": "gput4"}


@pytest.fixture(scope="module")
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def node(name, ready=True, cordoned=False, gpus="4"):
    return {"metadata": {"name": name, "labels": dict(POOL)}, "spec": {"unschedulable": True} if cordoned else {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "allocatable": {"nvidia.com/gpu": gpus}}}


def pending(reason="Unschedulable", selector=POOL, affinity=None, **status):
    spec = {"nodeSelector": dict(selector or {}), "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": affinity}}}
    return {"metadata": {"name": "p"}, "spec": spec, "status": {
        "phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": reason}], **status}}


def test_a_node_neither_ready_nor_cordoned_is_starting_and_unbound_pods_of_the_pool_wait(cfg):
    nodes = [node("a"), node("b", ready=False), node("c", ready=False, cordoned=True)]
    bound = {"spec": {"nodeName": "a", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
             "status": {"phase": "Running"}}
    pods = [pending(), pending(), pending(reason="SchedulingGated"), bound]
    p = pool_states(cfg, nodes, pods)["gput4"]
    assert (p.ready, p.cordoned, p.starting, p.waiting, p.slots_total, p.slots_used) == (1, 1, 1, 2, 12, 2)
    assert pool_states(cfg, nodes, None)["gput4"].waiting is None  # pods unread: unknown, not 0
    assert pool_states(cfg, None, pods)["gput4"] == PoolState()


def test_a_pending_pods_pool_comes_from_its_selector_or_one_required_affinity_term(cfg):
    one = [{"matchExpressions": [{"key": "kubernetes.azure.com/agentpool", "operator": "In", "values": ["gpumig"]}]}]
    assert waits_for(cfg, pending(selector=None, affinity=one)) == "gpumig"
    assert waits_for(cfg, pending(selector=None, affinity=one + one)) is None  # alternatives: no one pool
    two_values = [{"matchExpressions": [{"key": "kubernetes.azure.com/agentpool", "operator": "In",
                                         "values": ["gpumig", "gput4"]}]}]
    assert waits_for(cfg, pending(selector=None, affinity=two_values)) is None
    assert target_labels({"nodeSelector": POOL, "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": one}}}}) == POOL  # selector wins
    assert waits_for(cfg, pending(selector=None)) is None
    assert waits_for(cfg, {**pending(), "spec": {**pending()["spec"], "nodeName": "a"}}) is None
    assert waits_for(cfg, pending(phase="Running")) is None


def queue(usage=True, borrowed="2"):
    q = {"spec": {"resourceGroups": [{"flavors": [{"name": "gput4", "resources": [
        {"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]}, "status": {"pendingWorkloads": 1}}
    if usage:
        q["status"]["flavorsUsage"] = [{"name": "gput4", "resources": [
            {"name": "nvidia.com/gpu", "total": "10", "borrowed": borrowed}]}]
    return q


def test_a_teams_borrowed_quota_and_no_usage_status_is_unknown_not_zero(cfg):
    assert team_state(cfg, "data-science", queue()).quota == (("gput4", "nvidia.com/gpu", 10, 8, 2),)
    assert team_state(cfg, "data-science", queue(usage=False)).quota == (("gput4", "nvidia.com/gpu", None, 8, None),)
    t = team_state(cfg, "data-science", None)
    assert (t.quota, t.pending, t.waits_known, t.oldest_wait) == ((), None, False, None)


def workload(name, ns, queue_name, created, *conditions, admission=None):
    wl = {"metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
          "spec": {"queueName": queue_name},
          "status": {"conditions": [{"type": t, "status": "True", "lastTransitionTime": at} for t, at in conditions]}}
    if admission:
        wl["status"]["admission"] = admission
    return wl


def test_the_oldest_pending_workload_per_team_from_its_namespace_and_the_hubs(cfg):
    assert workload_namespaces(cfg, "jhub") == ["team-ds", "team-mlr", "jhub"]
    lists = {
        "team-ds": [workload("old-admitted", "team-ds", "data-science", "2026-12-03T08:00:00Z", ("Admitted", "x")),
                    workload("old-finished", "team-ds", "data-science", "2026-12-03T08:00:00Z", ("Finished", "x")),
                    workload("admission-only", "team-ds", "data-science", "2026-12-03T08:00:00Z",
                             admission={"clusterQueue": "team-data-science"}),
                    workload("other-queue", "team-ds", "someone-else", "2026-12-03T07:00:00Z"),
                    workload("job", "team-ds", "data-science", "2026-12-03T11:30:00Z")],
        "jhub": [workload("server", "jhub", "data-science", "2026-12-03T11:00:00Z"),
                 # requeued after an eviction at 11:50: it has waited since then
                 workload("evicted", "jhub", "ml-research", "2026-12-03T06:00:00Z",
                          ("Evicted", "2026-12-03T11:50:00Z"))],
        "team-mlr": [],
    }
    assert oldest_waits(cfg, lists, "jhub", NOW) == {"data-science": (True, 3600.0), "ml-research": (True, 600.0)}
    assert oldest_waits(cfg, {**lists, "jhub": []}, "jhub", NOW)["ml-research"] == (True, None)  # none waiting
    assert oldest_waits(cfg, {**lists, "jhub": None}, "jhub", NOW)["data-science"][0] is False  # a list failed


async def test_each_read_keeps_the_gpu_pools_slots_for_the_chart_and_the_page_draws_them(cfg):
    clock = iter([NOW, NOW, NOW + 300]).__next__

    async def reads(c):
        return Read([node("a")], [], {t: queue() for t in c.teams}, {ns: [] for ns in workload_namespaces(c, "jhub")})

    live = LiveReader(cfg, reads, clock=clock)
    await live.read_once()
    state = await live.read_once()
    assert state.history["gput4"] == (Bucket(NOW, 0, 4), Bucket(NOW + 300, 0, 4))
    assert "system" not in state.history and state.history["gpuh100"] == (Bucket(NOW, 0, 0), Bucket(NOW + 300, 0, 0))
    assert state.teams["data-science"].oldest_wait is None and state.teams["data-science"].waits_known
    page = render.live_section(state)
    assert page.count("<svg") == len(state.history) and "none in use; latest 0 of 4 at 12:05 UTC" in page
    assert "kept in memory only" in page and "none waiting" in page and "(borrowed 2)" in page


async def test_a_read_that_fails_altogether_leaves_every_new_field_unknown(cfg):
    async def reads(c):
        raise OSError("no API")

    state = await LiveReader(cfg, reads).read_once()
    assert all(p.starting is None and p.waiting is None for p in state.pools.values())
    assert all(not t.waits_known for t in state.teams.values())
    assert all(b == () for b in state.history.values())
    page = render.live_section(state)
    assert "none waiting" not in page and "<td>0</td>" not in page and "no reading yet" in page


def test_adversarial_pool_and_team_names_are_escaped():
    bad = "<img src=x onerror=alert(1)>'\"&"
    state = LiveState(NOW, {bad: PoolState(1, 0, 4, 2, 0, 1)},
                      {bad: TeamState(bad, ((bad, bad, 1, 2, 0),), 1, True, 90.0)}, [bad],
                      {bad: (Bucket(NOW, 2, 4),)}, NOW)
    page = render.live_section(state)
    assert "<img" not in page and "onerror=alert(1)>" not in page
    assert page.count("&lt;img src=x onerror=alert(1)&gt;&#x27;&quot;&amp;") >= 6
    assert "90 s" in page
