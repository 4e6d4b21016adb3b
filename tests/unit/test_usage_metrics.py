"""The collector's metrics from known lifetimes and Workloads (prometheus_client's own registry, read back)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.services.usage.accounting import Lifetime
from jupyterhub_gpu.services.usage.metrics import UsageMetrics

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)


def lt(uid, gpus=1, cost=0.5, end=None, user="alice"):
    return Lifetime(uid, "server", "jhub", f"jupyter-{uid}", user, "", "mig", "", gpus, cost, T0, end)


def wl(name, created, admitted=None, finished=False):
    conds = [{"type": "QuotaReserved", "status": "True",
              "lastTransitionTime": admitted.isoformat()}] if admitted else []
    if finished:
        conds.append({"type": "Finished", "status": "True"})
    return {"metadata": {"name": name, "uid": name, "namespace": "team-v", "creationTimestamp": created.isoformat()},
            "spec": {"queueName": "v"}, "status": {"conditions": conds}}


def value(m, name, **labels):
    return m.registry.get_sample_value(name, labels)


def test_gauges_counters_and_waits_once():
    m = UsageMetrics()
    pods = [lt("a", gpus=2, cost=7.0), lt("b"), lt("done", end=T0)]
    wls = [wl("w1", T0, T0 + timedelta(minutes=30)), wl("w2", T0),
           wl("w3", T0, T0 + timedelta(minutes=5), finished=True)]
    m.update(pods, wls, 0.0, None)
    key = dict(kind="server", user="alice", team="", profile="mig")
    assert value(m, "gpuhub_usage_gpus_held", **key) == 3  # the finished pod holds nothing
    assert value(m, "gpuhub_usage_cost_dollars_per_hour", **key) == pytest.approx(7.5)
    assert value(m, "gpuhub_queue_pending", queue_namespace="team-v", queue="v") == 1  # not the finished one
    q = dict(queue_namespace="team-v", queue="v")
    assert value(m, "gpuhub_queue_wait_seconds_count", **q) == 2
    assert value(m, "gpuhub_queue_wait_seconds_sum", **q) == 35 * 60
    m.update(pods, wls, 3600.0, T0)  # an hour later: counters grow by what was held; no wait twice
    assert value(m, "gpuhub_usage_gpu_hours_held_total", **key) == pytest.approx(3.0)
    assert value(m, "gpuhub_usage_dollars_total", **key) == pytest.approx(7.5)
    assert value(m, "gpuhub_queue_wait_seconds_count", **q) == 2
    m.update([], [], 60.0, T0)
    assert value(m, "gpuhub_usage_gpus_held", **key) is None and m.observed == set()
