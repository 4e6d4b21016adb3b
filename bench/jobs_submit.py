"""Benchmark the `gpu-jobs` service on the dev cluster with a real JupyterHub in front of it.

    python bench/jobs_submit.py                  # own dev cluster in a temp folder, then down
    python bench/jobs_submit.py --submits 50 --admits 8 --queued 500

Measures, through the hub's proxy with a user's own token (as `%gpu_submit` does):
  submit     POST /jobs → the response (it returns once the PVC, the suspended Job and the owned
             ConfigMap exist): p50/p95 over --submits jobs that stay queued (a team with 0 T4 quota)
  admit      submit → the service first reports the job past Queued (polled every 20 ms), next to
             Kueue's own admission (a watch on Workloads sees Admitted=True), both from the moment the
             POST is sent, same jobs, same run
  list       GET /jobs with --queued queued jobs of one user: p50/p95; then, side by side in this
             process, the same read through the API every time vs from the service's JobsCache
Prints one JSON line and writes bench/results/jobs_submit.json.
"""
from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from report import write_result  # noqa: E402  (bench/report.py, next to this script)

from jupyterhub_gpu.contract import JOBS_ACCESS_SCOPE  # noqa: E402
from jupyterhub_gpu.model.profiles_file import (
    EXAMPLE_PROFILES,  # noqa: E402
    load_profiles,  # noqa: E402
)
from jupyterhub_gpu_dev import cluster as dc  # noqa: E402
from jupyterhub_gpu_dev.devhub import DevHub, HubSettings, free_port  # noqa: E402

NB = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
      "cells": [{"cell_type": "code", "id": "a", "metadata": {}, "source": "x = 1", "outputs": [],
                 "execution_count": None}]}
GROUPS = {"alice": ["data-science"], "bench": ["bench"]}


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(round(q * (len(values) - 1))))] * 1000, 1)


class Hub:
    def __init__(self, url: str, admin: str):
        self.url, self.admin, self.tokens = url, admin, {}
        self.http = requests.Session()

    def token(self, user: str) -> str:
        if user not in self.tokens:
            s = requests.Session()
            page = s.get(f"{self.url}/hub/login", timeout=30).text
            xsrf = page.split('name="_xsrf" value="', 1)[1].split('"', 1)[0] if "_xsrf" in page else ""
            s.post(f"{self.url}/hub/login?next=", data={"username": user, "password": "", "_xsrf": xsrf}, timeout=30)
            r = requests.post(f"{self.url}/hub/api/users/{user}/tokens",
                              headers={"Authorization": f"token {self.admin}"},
                              json={"scopes": [JOBS_ACCESS_SCOPE]}, timeout=30)
            r.raise_for_status()
            self.tokens[user] = r.json()["token"]
        return self.tokens[user]

    def call(self, user: str, method: str, path: str, **kw) -> requests.Response:
        r = self.http.request(method, f"{self.url}/services/gpu-jobs{path}",
                              headers={"Authorization": f"token {self.token(user)}"}, timeout=60, **kw)
        r.raise_for_status()
        return r


class AdmissionWatch:
    """Kueue's own view: when a Workload of a Job first shows Admitted=True (local clock)."""

    def __init__(self, cluster: dc.Cluster, namespace: str):
        from kubernetes import client, config, watch

        self.seen: dict[str, float] = {}
        api = client.CustomObjectsApi(config.new_client_from_config(str(cluster.kubeconfig)))
        self.stop = threading.Event()

        def run():
            try:
                follow()
            except Exception:  # the stream ends when the cluster goes down
                pass

        def follow():
            w = watch.Watch()
            for ev in w.stream(api.list_namespaced_custom_object, "kueue.x-k8s.io", "v1beta2", namespace,
                               "workloads", timeout_seconds=600):
                obj = ev["object"]
                if any(c["type"] == "Admitted" and c["status"] == "True"
                       for c in (obj.get("status") or {}).get("conditions") or []):
                    for ref in obj["metadata"].get("ownerReferences") or []:
                        self.seen.setdefault(ref["name"], time.monotonic())
                if self.stop.is_set():
                    w.stop()

        threading.Thread(target=run, daemon=True).start()


def compare_cache(kubeconfig: Path, namespaces: list[str], user: str, rounds: int = 20) -> dict:
    """What `GET /jobs` does (jobs of a user → their statuses), in this process, interleaved: through
    the API on every call (the service before its cache) vs from the watch-fed JobsCache."""
    import asyncio

    from kubernetes_asyncio import client, config

    from jupyterhub_gpu.services.jobs.cache import JobsCache
    from jupyterhub_gpu.services.jobs.kube import Kube

    async def run() -> dict:
        cfg = client.Configuration()
        await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        api = client.ApiClient(cfg)
        cache = JobsCache(api, namespaces)
        await cache.start()
        direct, cached = Kube(api, namespaces), Kube(api, namespaces, cache=cache)
        times: dict[str, list[float]] = {"api": [], "cache": []}
        try:
            for _ in range(rounds):
                for label, kube in (("api", direct), ("cache", cached)):
                    t = time.monotonic()
                    await kube.statuses(await kube.jobs(user), with_logs=False)
                    times[label].append(time.monotonic() - t)
        finally:
            await cache.stop()
            await api.close()
        return {"list_inproc_api_p50_ms": pct(times["api"], 0.5), "list_inproc_cache_p50_ms": pct(times["cache"], 0.5),
                "list_inproc_speedup": round(statistics.median(times["api"]) / statistics.median(times["cache"]), 1)}

    return asyncio.run(run())


def measure(cluster: dc.Cluster, hub: Hub, submits: int, admits: int, queued: int) -> dict:
    body = {"profile": "t4-shared", "notebook_path": "bench.ipynb", "notebook": NB}
    # 1. submit latency (jobs stay queued: team `bench` has no T4 quota)
    lat = []
    for _ in range(submits):
        t = time.monotonic()
        hub.call("bench", "POST", "/jobs", json=body)
        lat.append(time.monotonic() - t)
    # 2. submit → admitted (data-science has 8 T4 slots): service-reported vs Kueue's own
    watch = AdmissionWatch(cluster, "team-ds")
    time.sleep(1)
    service, kueue = [], []
    for _ in range(admits):
        t0 = time.monotonic()  # both from the moment the user submits
        name = hub.call("alice", "POST", "/jobs", json=body).json()["name"]
        while hub.call("alice", "GET", f"/jobs/{name}").json()["state"] == "Queued":
            time.sleep(0.02)
        service.append(time.monotonic() - t0)
        deadline = time.monotonic() + 30
        while name not in watch.seen and time.monotonic() < deadline:
            time.sleep(0.01)
        kueue.append(watch.seen[name] - t0)
    watch.stop.set()
    # 3. list with `queued` queued jobs of one user
    for _ in range(max(0, queued - submits)):
        hub.call("bench", "POST", "/jobs", json=body)
    n = len(hub.call("bench", "GET", "/jobs").json()["jobs"])
    listing = []
    for _ in range(20):
        t = time.monotonic()
        hub.call("bench", "GET", "/jobs")
        listing.append(time.monotonic() - t)
    return {"submits": submits, "submit_p50_ms": pct(lat, 0.5), "submit_p95_ms": pct(lat, 0.95),
            "admits": admits, "admit_service_p50_ms": pct(service, 0.5), "admit_service_p95_ms": pct(service, 0.95),
            "admit_kueue_p50_ms": pct(kueue, 0.5), "admit_kueue_p95_ms": pct(kueue, 0.95),
            "list_jobs": n, "list_p50_ms": pct(listing, 0.5), "list_p95_ms": pct(listing, 0.95),
            "mean_submit_ms": round(statistics.mean(lat) * 1000, 1)}


def dev_hub(state: Path, profiles: Path, cluster: dc.Cluster, groups: dict) -> tuple[DevHub, str]:
    """A started dev hub whose `bench` service token may make users' tokens, once gpu-jobs answers."""
    token = secrets.token_hex(16)
    extra = ('c.JupyterHub.load_roles = list(c.JupyterHub.load_roles) + [{"name": "bench-tokens", '
             '"scopes": ["tokens", "admin:users"], "services": ["bench"]}]')
    state.mkdir(parents=True, exist_ok=True)
    hub = DevHub(HubSettings(state_dir=state, profiles=profiles, kubeconfig=cluster.kubeconfig,
                             port=free_port(), groups=groups, api_tokens={"bench": token}, extra=extra))
    hub.start()
    deadline = time.monotonic() + 60
    while requests.get(f"{hub.settings.url}/services/gpu-jobs/health", timeout=10).status_code != 200:
        if time.monotonic() > deadline:
            hub.stop()
            raise SystemExit("the gpu-jobs service did not come up:\n" + hub.log_tail(60))
        time.sleep(0.5)
    return hub, token


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--submits", type=int, default=50)
    p.add_argument("--admits", type=int, default=8)
    p.add_argument("--queued", type=int, default=500)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuhub-bench-jobs-") as tmp:
        root = Path(tmp)
        data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
        data["teams"]["bench"] = {"namespace": "team-bench", "quota": {"gput4": 0}}
        profiles = root / "profiles.yaml"
        profiles.write_text(yaml.safe_dump(data, sort_keys=False))
        t = time.monotonic()
        cluster = dc.up(EXAMPLE_PROFILES, nodes_per_pool=2, root=root / "cluster")
        up_s = time.monotonic() - t
        kube = cluster.kube()
        dc.apply_kueue_objects(kube, load_profiles(profiles))
        kube.close()
        hub, token = dev_hub(root / "hub", profiles, cluster, GROUPS)
        try:
            result = measure(cluster, Hub(hub.settings.url, token), a.submits, a.admits, a.queued)
            result.update(compare_cache(cluster.kubeconfig, ["team-bench"], "bench"))
            result["cluster_up_s"] = round(up_s, 2)
        finally:
            hub.stop()
            dc.down(root / "cluster")
    return write_result("jobs_submit", result)


if __name__ == "__main__":
    sys.exit(main())
