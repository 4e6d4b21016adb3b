"""Showback against the real Prometheus (Debian's) scraping the DCGM-format exporter of tests/culler: GPU-hours
used from known activity series, the collector's metrics as Prometheus stores them, and every PromQL query
of deploy/grafana-showback.json evaluated there.

Tolerance: with a 1 s scrape and a 10 s window the window holds 10 ± 1 samples, so a utilisation is exact
to ±0.1 of its value; gauges are exact."""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from culler.fixtures import NAMESPACE, SCRAPE, exporter, prometheus  # noqa: F401 (fixtures)
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpu.services.usage import accounting as acc
from jupyterhub_gpu.services.usage import collect
from jupyterhub_gpu.services.usage.metrics import UsageMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-showback.json"
WINDOW = 10


def lifetime(pod, profile="a100", gpus=1, cost=3.0, user="alice", team="", job="", start=None):
    return acc.Lifetime(uid=pod, kind="job" if job else "server", namespace=NAMESPACE, pod=pod, user=user,
                        team=team, profile=profile, job=job, gpus=gpus, hourly_cost=cost,
                        start=start or datetime.now(timezone.utc) - timedelta(hours=1))


def wl(name, created, admitted=None, evicted=0):
    conds = [{"type": "QuotaReserved", "status": "True",
              "lastTransitionTime": admitted.isoformat()}] if admitted else []
    return {"metadata": {"name": name, "uid": name, "namespace": "team-vision",
                         "creationTimestamp": created.isoformat()},
            "spec": {"queueName": "vision"}, "status": {"conditions": conds, "schedulingStats": {
                "evictions": [{"reason": "Preempted", "count": evicted}] if evicted else []}}}


def publish(exporter, metrics: UsageMetrics) -> None:
    """The collector's /metrics text, as the exporter serves it: Prometheus scrapes it like any target."""
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            key = s.name + json.dumps(s.labels, sort_keys=True)
            with exporter.lock:
                exporter.series[key] = (s.name, dict(s.labels), s.value)


def query(url, expr):
    return collect.prometheus_query(url, expr, datetime.now(timezone.utc))


def wait_for(url, expr, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query(url, expr):
            return
        time.sleep(0.5)
    raise AssertionError(f"no result for {expr}")


@pytest.fixture
def own_series(exporter):
    """The exporter is shared by the session (tests/culler too): take back the series this test adds."""
    before = set(exporter.series)
    yield exporter
    with exporter.lock:
        for key in set(exporter.series) - before:
            del exporter.series[key]


def test_showback_on_real_prometheus(prometheus, own_series):
    exporter = own_series
    # DCGM: a whole GPU at 50 % (PROF), one with only GPU_UTIL 40, a MIG slice with only the whole GPU's UTIL
    exporter.set_gpu("jupyter-alice", activity=0.5, util=90)
    exporter.set_gpu("jupyter-bob", util=40)
    exporter.set_gpu("job-x", util=100, mig=("3", "1g.10gb"))
    exporter.series["job-x/mem"] = ("DCGM_FI_DEV_FB_USED", {**exporter.series["job-x/0/('3', '1g.10gb')/util"][1]},
                                    9000.0)
    now = datetime.now(timezone.utc)
    open_ = [lifetime("jupyter-alice", cost=7.345, gpus=2),
             lifetime("jupyter-bob", user="bob", profile="t4", cost=0.132),
             lifetime("job-x", user="carol", profile="mig", team="vision", job="x", cost=0.524)]
    t = now - timedelta(hours=2)
    workloads = [wl(f"w{i}", t, t + timedelta(minutes=10 * (i + 1)), evicted=i % 2) for i in range(8)]
    workloads += [wl("waiting-1", now), wl("waiting-2", now)]
    metrics = UsageMetrics()
    metrics.update(open_, workloads, 60.0, None)
    publish(exporter, metrics)
    wait_for(prometheus, "gpuhub_queue_pending")
    time.sleep(WINDOW + 2 * SCRAPE)

    # GPU-hours used over the last WINDOW seconds, through the report
    until = datetime.now(timezone.utc)
    since = until - timedelta(seconds=WINDOW)
    used = collect.used_from_prometheus(prometheus, since, until, SCRAPE)
    rep = collect.report(open_, workloads, since, until, "user", used, None)
    util = {r["key"]: r["utilisation_pct"] for r in rep["rows"]}
    assert util["alice"] == pytest.approx(25.0, rel=0.1)  # 0.5 on one device of the two held
    assert util["bob"] == pytest.approx(40.0, rel=0.1)  # GPU_UTIL / 100 when there is no PROF series
    assert util["carol"] == 0.0  # a MIG slice's GPU_UTIL is the whole GPU's: not its use
    assert {r["key"]: r["peak_memory_mib"] for r in rep["rows"]}["carol"] == 9000.0
    assert rep["evictions"] == {"Preempted": 4} and rep["queue_wait_s"]["count"] == 0  # none admitted in 10 s
    waits = collect.report(open_, workloads, until - timedelta(hours=3), until, "team", None, None)["queue_wait_s"]
    assert (waits["count"], waits["p50"]) == (8, 45 * 60.0)  # admitted after 10, 20, ... 80 min

    # the dashboard: every query is valid PromQL on this Prometheus; the gauges read back exactly
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 39 and dashboard["uid"] and dashboard["panels"]
    results = {}
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}"
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "1m").replace("$__range", "1h")
            results[(panel["title"], target["refId"])] = query(prometheus, expr)  # raises on a PromQL error

    def values(title, ref="A"):
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in results[(title, ref)]}

    held = values("GPUs held now by profile")
    assert held == {(("profile", "a100"),): 2.0, (("profile", "t4"),): 1.0, (("profile", "mig"),): 1.0}
    assert values("Cost now ($/h)") == {(): pytest.approx(7.345 + 0.132 + 0.524)}
    assert values("Jobs waiting per queue") == {(("queue", "vision"), ("queue_namespace", "team-vision")): 2.0}
    assert values("Evictions by reason (preemptions, node loss)") == {
        (("queue", "vision"), ("reason", "Preempted")): 4.0}
    eta = values("Queue ETA of the next submission")
    assert eta[(("quantile", "0.5"), ("queue", "vision"))] == 1800.0  # 3rd in line, one admission per 10 min
    activity = {dict(k).get("exported_pod"): v for k, v in values(
        "GPU activity per pod (DCGM: GR_ENGINE_ACTIVE, else GPU_UTIL/100)").items()}
    assert activity == {"jupyter-alice": 0.5, "jupyter-bob": 0.4}  # the MIG slice has no activity of its own
    assert values("Fleet utilisation (active / held)") == {(): pytest.approx(0.5 / 4)}
