"""Spot evictions counted apart from preemptions: from a pod's DisruptionTarget condition, from a spot pod
that vanished with its node, in the report's rows and totals, the table, and the collector's counters."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from prometheus_client import generate_latest

from jupyterhub_gpu.contract import PROFILE_LABEL, USER_ANNOTATION
from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.services.usage import accounting as acc
from jupyterhub_gpu.services.usage.collect import report
from jupyterhub_gpu.services.usage.metrics import UsageMetrics
from jupyterhub_gpu.tools.report import render

T0 = datetime(2026, 2, 2, 8, 0, tzinfo=timezone.utc)
TAINT = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
A100 = {"model": "A100-80GB", "count_per_node": 1}
CFG = ProfilesConfig.model_validate({
    "pools": {
        "system": {"node_selector": {"agentpool": "system"}, "instance_type": "Standard_D8s_v5"},
        "ondemand": {"node_selector": {"agentpool": "a"}, "gpu": A100, "taints": [TAINT], "cost_per_node_hour": 3.67},
        "spot": {"node_selector": {"agentpool": "s"}, "gpu": A100, "taints": [TAINT], "cost_per_node_hour": 1.1,
                 "spot": True},
    },
    "profiles": [
        {"slug": "cpu", "display_name": "CPU", "pool": "system", "default": True},
        {"slug": "a100", "display_name": "A100", "pool": "ondemand", "gpu": {"kind": "full"}},
        {"slug": "a100-spot", "display_name": "A100 spot", "pool": "spot", "gpu": {"kind": "full"}},
    ],
})
RULES, TEAMS = acc.rules_and_teams(CFG)
SPOT = acc.spot_profiles(CFG)


def pod(name, profile, node, disruption=None, status_reason=None, ended=True, user="alice"):
    st = {"phase": "Failed" if ended else "Running", "startTime": T0.isoformat()}
    if ended:
        st["containerStatuses"] = [{"name": "x", "state": {"terminated": {
            "finishedAt": (T0 + timedelta(hours=1)).isoformat()}}}]
    if disruption:
        st["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": disruption}]
    if status_reason:
        st["reason"] = status_reason
    return {"metadata": {"name": name, "namespace": "jhub", "uid": name, "labels": {PROFILE_LABEL: profile},
                         "annotations": {USER_ANNOTATION: user}}, "spec": {"nodeName": node}, "status": st}


def lt(p):
    return acc.lifetime_of(p, RULES, TEAMS, spot=SPOT)


def test_disruptions_say_spot_eviction_preemption_or_eviction():
    assert SPOT == {"a100-spot"}
    assert lt(pod("s1", "a100-spot", "spot-0", "DeletionByPodGC")).ended_by == acc.SPOT_EVICTION
    assert lt(pod("s2", "a100-spot", "spot-0", "TerminationByKubelet")).ended_by == acc.SPOT_EVICTION
    assert lt(pod("s3", "a100-spot", "spot-0", status_reason="Terminated")).ended_by == acc.SPOT_EVICTION
    assert lt(pod("s4", "a100-spot", "spot-0", "PreemptionByScheduler")).ended_by == acc.PREEMPTED
    assert lt(pod("s5", "a100-spot", "spot-0")).ended_by == ""  # it ended by itself (or its owner)
    # the same node loss on an on-demand pool is an eviction, not a spot eviction
    assert lt(pod("o1", "a100", "a-0", "DeletionByTaintManager")).ended_by == acc.EVICTED
    assert lt(pod("o2", "a100", "a-0", "EvictionByEvictionAPI")).ended_by == acc.EVICTED  # a drain
    assert lt(pod("o3", "a100", "a-0", status_reason="Evicted")).ended_by == acc.EVICTED  # node pressure
    assert lt(pod("o4", "a100", "a-0", "PreemptionByScheduler")).ended_by == acc.PREEMPTED
    running = lt(pod("r", "a100-spot", "spot-0", "DeletionByPodGC", ended=False))
    assert running.end is None and running.ended_by == "" and running.spot and running.node == "spot-0"


def test_a_spot_pod_gone_with_its_node_was_evicted():
    seen = T0 + timedelta(minutes=30)
    open_ = {x.uid: x for x in (lt(pod("spot-a", "a100-spot", "spot-0", ended=False)),
                                lt(pod("spot-b", "a100-spot", "spot-1", ended=False)),
                                lt(pod("demand", "a100", "a-0", ended=False)))}
    still, done = acc.close_missing(open_, [], seen, nodes={"spot-1"})  # spot-0 and a-0 went away
    ends = {x.uid: (x.end, x.ended_by) for x in done}
    assert ends == {"spot-a": (seen, acc.SPOT_EVICTION), "spot-b": (seen, ""), "demand": (seen, "")}
    assert not still
    _, done = acc.close_missing(open_, [], seen)  # nodes unknown: nothing is called an eviction
    assert {x.ended_by for x in done} == {""}
    # stored rows from before these fields read back with their defaults
    old = {k: v for k, v in open_["spot-a"].to_json().items() if k not in ("node", "spot", "ended_by")}
    assert acc.Lifetime.from_json(old).ended_by == "" \
        and acc.Lifetime.from_json(open_["spot-a"].to_json()) == open_["spot-a"]


def test_report_and_metrics_count_them_apart():
    lts = [lt(pod("s1", "a100-spot", "spot-0", "DeletionByPodGC")),
           lt(pod("s2", "a100-spot", "spot-0", "DeletionByPodGC", user="bob")),
           lt(pod("p1", "a100", "a-0", "PreemptionByScheduler")),
           lt(pod("e1", "a100", "a-0", status_reason="Evicted"))]
    out = report(lts, [], T0, T0 + timedelta(hours=2), "user", None, None)
    rows = {r["key"]: r for r in out["rows"]}
    assert (rows["alice"]["spot_evictions"], rows["alice"]["preemptions"]) == (1, 1)
    assert (rows["bob"]["spot_evictions"], rows["bob"]["preemptions"]) == (1, 0)
    assert (out["spot_evictions"], out["pod_preemptions"]) == (2, 1)
    assert out["total"]["spot_evictions"] == 2
    assert "spot evictions: 2 pods · preempted by the scheduler: 1 pods" in render(out, "table")
    assert render(out, "csv").splitlines()[0].endswith(",spot_evictions,preemptions")
    later = report(lts, [], T0 + timedelta(hours=1, minutes=1), T0 + timedelta(hours=2), "user", None, None)
    assert later["spot_evictions"] == 0  # counted in the range where they ended
    m = UsageMetrics()
    m.finished(lts)
    text = generate_latest(m.registry).decode()
    assert 'gpuhub_usage_spot_evictions_total{kind="server",profile="a100-spot",team="",user="alice"} 1.0' in text
    assert 'gpuhub_usage_spot_evictions_total{kind="server",profile="a100-spot",team="",user="bob"} 1.0' in text
    assert 'gpuhub_usage_pod_preemptions_total{kind="server",profile="a100",team="",user="alice"} 1.0' in text
    assert "a100-spot" not in "".join(x for x in text.splitlines() if x.startswith("gpuhub_usage_pod_preemptions"))
