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

from devcluster.testing import wait_until
from gpu_spawner.builders.datasets import volume_name
from gpu_spawner.cluster.prices import hourly_cost
from gpu_spawner.cluster.times import parse_time
from gpu_spawner.contract import ENV_DATASETS, PRIORITY_LABEL, QUEUE_LABEL
from gpu_spawner.model.profiles_file import load_profiles
from gpu_spawner.services.usage.store import UsageStore

pytestmark = pytest.mark.cluster

#: (profile, groups that may use it): a whole H100 and a MIG slice
PROFILES = {"h100-full": ["ml-research"], "a100-mig-1g10gb": ["data-science"]}


def run(*args, cluster):
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def drop_datasets(pod: dict, cfg) -> None:
    """Without the dataset volumes (and their mounts and env) the profiles file gives the pod's teams."""
    names = {volume_name(n) for n in cfg.datasets}
    pod["spec"]["volumes"] = [v for v in pod["spec"].get("volumes", []) if v["name"] not in names]
    for c in pod["spec"]["containers"]:
        c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if m["name"] not in names]
        c["env"] = [e for e in c.get("env", []) if e["name"] != ENV_DATASETS]


async def test_collector_and_report_on_the_dev_cluster(cluster, namespace, tmp_path):
    from gpu_spawner.hub.render_pod import pod_manifest

    cfg = load_profiles(cluster.profiles)
    names = {}
    for slug, groups in PROFILES.items():
        pod = await pod_manifest(cluster.profiles, slug, f"user-{slug[:4]}", groups)
        pod["metadata"].update(namespace=namespace, name=f"jupyter-{slug}")
        for label in (QUEUE_LABEL, PRIORITY_LABEL):  # no team queue in this namespace: not Kueue's to admit
            pod["metadata"]["labels"].pop(label, None)
        pod["spec"].pop("serviceAccountName", None)  # ml-research's identity account is in jhub, not here
        drop_datasets(pod, cfg)  # data-science's dataset claim is bound in jhub, not here
        cluster.create(pod)
        names[slug] = pod["metadata"]["name"]

    def started():
        pods = {p.metadata.name: p for p in cluster.core.list_namespaced_pod(namespace).items}
        return all(pods.get(n) and pods[n].status.start_time for n in names.values()) and pods

    pods = wait_until(started, 60, "GPU pods started on the KWOK pools")
    start = {n: pods[n].status.start_time for n in names.values()}
    store = tmp_path / "usage"
    collector = ["-m", "gpu_spawner.services.usage", "--once", f"--profiles-file={cluster.profiles}",
                 f"--store={store}", f"--hub-namespace={namespace}"]
    run(*collector, cluster=cluster)
    opened, _ = UsageStore(store).load_open()
    assert {lt.pod: (lt.kind, lt.profile, lt.gpus) for lt in opened.values()} == {
        "jupyter-h100-full": ("server", "h100-full", 1), "jupyter-a100-mig-1g10gb": ("server", "a100-mig-1g10gb", 1)}

    # the MIG server stops; the next (restarted) collector closes its lifetime into the store
    cluster.core.delete_namespaced_pod(names["a100-mig-1g10gb"], namespace, grace_period_seconds=0)
    wait_until(lambda: names["a100-mig-1g10gb"] not in {p.metadata.name
                                                        for p in cluster.core.list_namespaced_pod(namespace).items},
               60, "the MIG server's pod gone")
    run(*collector, cluster=cluster)
    (done,) = UsageStore(store).finished()
    assert done.pod == "jupyter-a100-mig-1g10gb" and done.end is not None and done.start == start[done.pod]

    out = json.loads(run("-m", "gpu_spawner.tools.cli", "report", str(cluster.profiles), "--since", "1h", "--by",
                         "profile", "--format", "json", f"--hub-namespace={namespace}", f"--store={store}",
                         cluster=cluster))
    now, until = datetime.now(timezone.utc), parse_time(out["until"])
    rows = {r["key"]: r for r in out["rows"]}
    mig_hours = (done.end - done.start).total_seconds() / 3600
    h100_hours = (until - start["jupyter-h100-full"]).total_seconds() / 3600  # still running at the report
    assert rows["a100-mig-1g10gb"]["gpu_hours_held"] == pytest.approx(mig_hours, abs=1e-4)
    assert rows["h100-full"]["gpu_hours_held"] == pytest.approx(h100_hours, abs=1e-4)
    price = hourly_cost(cfg, cfg.profile("h100-full"))
    assert price > 0 and rows["h100-full"]["cost"] == pytest.approx(h100_hours * price, abs=0.006)  # to the cent
    assert out["gpu_use_known"] is False and rows["h100-full"]["gpu_hours_used"] == 0  # no Prometheus given
    assert until <= now
