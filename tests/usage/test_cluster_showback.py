"""The usage collector and `gpuhub report` on the dev cluster: GPUSpawner's own pods scheduled by the real
kube-scheduler onto KWOK GPU pools, a stopped server's lifetime closed into the store across a collector
restart, and the report's GPU-hours and $ from the example profiles file.

Tolerance: a lifetime ends at the collector cycle that no longer sees its pod, so held hours are exact to
the pods' startTime and the cycles' clock, checked to 1e-4 GPU-hours (0.36 s) and $ to the cent."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.cluster.prices import hourly_cost
from jupyterhub_gpu.cluster.times import parse_time
from jupyterhub_gpu.model.profiles_file import load_profiles
from jupyterhub_gpu.services.usage.store import UsageStore
from jupyterhub_gpu_dev.testing import pod_outside_jhub, wait_until

pytestmark = pytest.mark.cluster

#: (profile, groups that may use it): a whole H100 and a MIG slice
PROFILES = {"h100-full": ["ml-research"], "a100-mig-1g10gb": ["data-science"]}


def run(*args, cluster):
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


async def server_pod(cluster, namespace: str, slug: str, name: str, groups: list[str]) -> str:
    cluster.create(await pod_outside_jhub(cluster, namespace, slug, f"user-{slug[:4]}", groups, name))
    return name


def started_pods(cluster, namespace: str, names):
    pods = {p.metadata.name: p for p in cluster.core.list_namespaced_pod(namespace).items}
    return all(pods.get(n) and pods[n].status.start_time for n in names) and pods


def pod_names(cluster, namespace: str) -> set[str]:
    return {p.metadata.name for p in cluster.core.list_namespaced_pod(namespace).items}


async def test_collector_and_report_on_the_dev_cluster(cluster, namespace, tmp_path):
    cfg = load_profiles(cluster.profiles)
    names = {slug: await server_pod(cluster, namespace, slug, f"jupyter-{slug}", groups)
             for slug, groups in PROFILES.items()}
    pods = wait_until(lambda: started_pods(cluster, namespace, names.values()), 60,
                      "GPU pods started on the KWOK pools")
    start = {n: pods[n].status.start_time for n in names.values()}
    store = tmp_path / "usage"
    collector = ["-m", "jupyterhub_gpu.services.usage", "--once", f"--profiles-file={cluster.profiles}",
                 f"--store={store}", f"--hub-namespace={namespace}"]
    run(*collector, cluster=cluster)
    opened, _ = UsageStore(store).load_open()
    assert {lt.pod: (lt.kind, lt.profile, lt.gpus) for lt in opened.values()} == {
        "jupyter-h100-full": ("server", "h100-full", 1), "jupyter-a100-mig-1g10gb": ("server", "a100-mig-1g10gb", 1)}

    # between two cycles a brief server starts and stops (no list ever sees it: the collector's watch
    # does, from where the last list left off), and the MIG server stops; the next (restarted) collector
    # closes both lifetimes into the store
    brief = await server_pod(cluster, namespace, "a100-mig-1g10gb", "jupyter-brief", ["data-science"])
    start[brief] = wait_until(lambda: started_pods(cluster, namespace, [brief]), 60,
                              "the brief server started")[brief].status.start_time
    for name in (names["a100-mig-1g10gb"], brief):
        cluster.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    wait_until(lambda: not {names["a100-mig-1g10gb"], brief} & pod_names(cluster, namespace), 60,
               "the MIG servers' pods gone")
    run(*collector, cluster=cluster)
    finished = {lt.pod: lt for lt in UsageStore(store).finished()}
    assert set(finished) == {"jupyter-a100-mig-1g10gb", "jupyter-brief"}
    assert all(lt.end is not None and lt.start == start[lt.pod] and lt.end >= lt.start
               for lt in finished.values())

    out = json.loads(run("-m", "jupyterhub_gpu.tools.cli", "report", str(cluster.profiles), "--since", "1h", "--by",
                         "profile", "--format", "json", f"--hub-namespace={namespace}", f"--store={store}",
                         cluster=cluster))
    now, until = datetime.now(timezone.utc), parse_time(out["until"])
    rows = {r["key"]: r for r in out["rows"]}
    mig_hours = sum((lt.end - lt.start).total_seconds() for lt in finished.values()) / 3600
    h100_hours = (until - start["jupyter-h100-full"]).total_seconds() / 3600  # still running at the report
    assert rows["a100-mig-1g10gb"]["gpu_hours_held"] == pytest.approx(mig_hours, abs=1e-4)
    assert rows["h100-full"]["gpu_hours_held"] == pytest.approx(h100_hours, abs=1e-4)
    price = hourly_cost(cfg, cfg.profile("h100-full"))
    assert price > 0 and rows["h100-full"]["cost"] == pytest.approx(h100_hours * price, abs=0.006)  # to the cent
    assert out["gpu_use_known"] is False and rows["h100-full"]["gpu_hours_used"] == 0  # no Prometheus given
    assert until <= now
