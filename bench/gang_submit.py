"""Benchmark multi-node jobs (`%gpu_submit --nodes N`) on the dev cluster: the real JobSet controller and
Kueue, a real JupyterHub with gpu-jobs, and the dev node agent (SIMULATOR) running the ranks.

    python bench/gang_submit.py                  # own dev cluster in a temp folder, then down
    python bench/gang_submit.py --rounds 8 --nodes 2

Each round, alternately on the same profile (h100-full, two H100 nodes), one 2-node job and one
single-node job, each cancelled (and its pods gone) before the next:
  running    POST /jobs → the service reports the job Running (for a gang: every rank's pod runs),
             polled every 20 ms through the hub's proxy
  admitted   POST /jobs → the service first reports it past Queued, next to Kueue's own admission
             (a watch on Workloads sees Admitted=True), both from the moment the POST is sent
Prints one JSON line and writes bench/results/gang_submit.json.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jobs_submit import AdmissionWatch, Hub, dev_hub, pct  # noqa: E402  (bench/jobs_submit.py)
from report import write_result  # noqa: E402

from jupyterhub_gpu.contract import JOB_LABEL  # noqa: E402
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES  # noqa: E402
from jupyterhub_gpu_dev import cluster as dc  # noqa: E402
from jupyterhub_gpu_dev.dev import AgentProcess  # noqa: E402

NB = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                    "language": "python"}},
      "cells": [{"cell_type": "code", "id": "a", "metadata": {}, "source": "import time\ntime.sleep(600)",
                 "outputs": [], "execution_count": None}]}
GROUPS = {"rita": ["ml-research"]}


def one(hub: Hub, watch: AdmissionWatch, kube, nodes: int) -> tuple[float, float, float]:
    """(service says past Queued, Kueue's Admitted, service says Running) in seconds from the POST."""
    body = {"profile": "h100-full", "notebook_path": "bench.ipynb", "notebook": NB,
            **({"nodes": nodes} if nodes > 1 else {})}
    t0 = time.monotonic()
    name = hub.call("rita", "POST", "/jobs", json=body).json()["name"]
    admitted = running = None
    deadline = t0 + 120
    while running is None:
        state = hub.call("rita", "GET", f"/jobs/{name}").json()["state"]
        now = time.monotonic()
        if state != "Queued" and admitted is None:
            admitted = now - t0
        if state in ("Running", "Preempted-and-resumed"):
            running = now - t0
        if now > deadline:
            raise SystemExit(f"{name} did not run within 120 s (state {state})")
        time.sleep(0.02)
    while name not in watch.seen and time.monotonic() < deadline:
        time.sleep(0.01)
    kueue = watch.seen[name] - t0
    hub.call("rita", "DELETE", f"/jobs/{name}")
    while kube.list("v1", "Pod", "team-mlr", label_selector=JOB_LABEL):  # the next job starts on empty nodes
        time.sleep(0.1)
    return admitted, kueue, running


def measure(cluster: dc.Cluster, hub: Hub, rounds: int, nodes: int) -> dict:
    watch = AdmissionWatch(cluster, "team-mlr")
    kube = cluster.kube()
    time.sleep(1)
    one(hub, watch, kube, 1)  # warm-up: the first job of a run pays for imports and caches
    times: dict[str, list[tuple[float, float, float]]] = {"gang": [], "single": []}
    for _ in range(rounds):  # interleaved, so drift hits both alike
        times["gang"].append(one(hub, watch, kube, nodes))
        times["single"].append(one(hub, watch, kube, 1))
    watch.stop.set()
    kube.close()
    out: dict = {"rounds": rounds, "nodes": nodes}
    for kind, rows in times.items():
        svc, kueue, run = (list(col) for col in zip(*rows))
        out.update({f"{kind}_running_p50_ms": pct(run, 0.5), f"{kind}_running_p95_ms": pct(run, 0.95),
                    f"{kind}_admit_service_p50_ms": pct(svc, 0.5), f"{kind}_admit_service_p95_ms": pct(svc, 0.95),
                    f"{kind}_admit_kueue_p50_ms": pct(kueue, 0.5), f"{kind}_admit_kueue_p95_ms": pct(kueue, 0.95)})
    for what in ("admit_kueue", "admit_service", "running"):  # side by side, same run: the gang's cost
        out[f"gang_vs_single_{what}_p50_ratio"] = round(out[f"gang_{what}_p50_ms"] / out[f"single_{what}_p50_ms"], 2)
    out["service_vs_kueue_gang_admit_p50_ms"] = round(
        out["gang_admit_service_p50_ms"] - out["gang_admit_kueue_p50_ms"], 1)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--nodes", type=int, default=2)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuhub-bench-gang-") as tmp:
        root = Path(tmp)
        data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
        next(p for p in data["profiles"] if p["slug"] == "h100-full")["max_per_user"] = 2
        profiles = root / "profiles.yaml"
        profiles.write_text(yaml.safe_dump(data, sort_keys=False))
        cluster = dc.up(profiles, nodes_per_pool=2, root=root / "cluster")
        agent = AgentProcess(root / "hub", cluster.kubeconfig).start()
        try:
            hub, token = dev_hub(root / "hub", profiles, cluster, GROUPS)
            try:
                result = measure(cluster, Hub(hub.settings.url, token), a.rounds, a.nodes)
            finally:
                hub.stop()
        finally:
            agent.stop()
            dc.down(root / "cluster")
    return write_result("gang_submit", result)


if __name__ == "__main__":
    sys.exit(main())
