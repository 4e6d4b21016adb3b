"""Benchmark: N concurrent spawns on the dev cluster, time to pod bound, GPUSpawner vs plain KubeSpawner.

Both spawners run KubeSpawner's real `start()` against a fresh dev cluster (started here, stopped
at the end). The plain KubeSpawner gets the same resources, node selector and tolerations as
traits, so the difference is what GPUSpawner adds: the profile model, the group check, live
capacity (its informers are running) and the toleration guard.

This 2-core machine is noisy (one spawner's round medians vary 2x between rounds), so the method is
paired: each round runs both spawners back to back (order alternating), the round's ratio is taken
within the round, and the figure is the median of the per-round ratios with their spread (min–max);
hub CPU per spawn (this process's CPU time, where both spawners run) is the steadier figure. The T4 pool
gets enough KWOK nodes (4 GPUs x 8 time-slices each) to bind every server of a batch at once.

    python bench/spawn_bound.py [--servers 100] [--rounds 4] [--settle 5]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

BENCH_PROFILES = {
    "pools": {
        "system": {"node_selector": {"kubernetes.azure.com/agentpool": "system"},
                   "node": {"cpu": 64, "memory": "512Gi", "max_pods": 250}},
        "gput4": {"node_selector": {"kubernetes.azure.com/agentpool": "gput4"},
                  "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
                  "gpu": {"model": "T4", "count_per_node": 4}, "node": {"cpu": 64, "memory": "512Gi", "max_pods": 250},
                  "sharing": {"strategy": "time-slicing", "replicas": 8}},
    },
    "profiles": [{"slug": "t4", "display_name": "T4 share", "pool": "gput4", "gpu": {"kind": "time-sliced"},
                  "cpu": "100m", "memory": "128Mi", "shm": "64Mi"}],
}


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[max(0, int(round(q * len(values))) - 1)]


async def spawn_batch(make, n: int, core, namespace: str) -> list[float]:
    """Start n spawners at once; seconds from start() to the pod's nodeName being set, per spawner."""
    spawners = [make(f"u{i}") for i in range(n)]
    bound: dict[str, float] = {}
    t0: dict[str, float] = {}

    async def watch_bound():
        while len(bound) < n:
            pods = await core.list_namespaced_pod(namespace)
            now = time.perf_counter()
            for p in pods.items:
                if p.spec.node_name and p.metadata.name not in bound:
                    bound[p.metadata.name] = now
            await asyncio.sleep(0.05)

    async def start(sp):
        t0[sp.pod_name] = time.perf_counter()
        await sp.start()

    watcher = asyncio.create_task(watch_bound())
    await asyncio.gather(*(start(sp) for sp in spawners))
    await asyncio.wait_for(watcher, 60 + n / 5)
    await asyncio.gather(*(sp.stop(now=True) for sp in spawners))
    while (await core.list_namespaced_pod(namespace)).items:
        await asyncio.sleep(0.2)
    return [bound[name] - t0[name] for name in t0]


async def run(args, kubeconfig: Path, profiles: Path) -> dict:
    os.environ["KUBECONFIG"] = str(kubeconfig)
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.config import kube_config

    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(kubeconfig)  # read once at import; KubeSpawner uses it
    from kubespawner import KubeSpawner

    from jupyterhub_gpu.builders import pods as podspec
    from jupyterhub_gpu.hub.render_pod import Group, OfflineUser
    from jupyterhub_gpu.hub.spawner import GPUSpawner
    from jupyterhub_gpu.model.profiles_file import load_profiles

    await config.load_kube_config(str(kubeconfig))
    api = client.ApiClient()
    core = client.CoreV1Api(api)
    ns = "bench"
    try:
        await core.create_namespace({"metadata": {"name": ns}})
    except client.ApiException:
        pass
    while not (await core.list_namespaced_service_account(ns)).items:
        await asyncio.sleep(0.2)
    cfg = load_profiles(profiles)
    overrides = podspec.spawner_overrides(cfg, cfg.by_slug["t4"])
    common = dict(namespace=ns, start_timeout=600, events_enabled=False, image="simulated")  # a loaded machine is slow

    def make_gpu(name):
        sp = GPUSpawner(_mock=True, user=OfflineUser(name, [Group("g")]), profiles_file=str(profiles), **common)
        sp.user_options = {"profile": "t4"}
        return sp

    def make_kube(name):
        traits = {k: v for k, v in overrides.items() if k not in ("environment",)}
        sp = KubeSpawner(_mock=True, user=OfflineUser(name), **common, **traits)
        sp.environment = {k: v for k, v in overrides["environment"].items() if isinstance(v, str)}
        return sp

    await GPUSpawner(_mock=True, user=OfflineUser("warm"), profiles_file=str(profiles), **common).cluster_state()
    results = {"GPUSpawner": [], "KubeSpawner": []}
    rounds: list[dict] = []
    for r in range(args.rounds):
        this: dict[str, float] = {}
        for label, make in (("GPUSpawner", make_gpu), ("KubeSpawner", make_kube))[:: 1 if r % 2 == 0 else -1]:
            await asyncio.sleep(args.settle)  # let the last batch's deletions drain: each batch starts from quiet
            c0 = time.process_time()
            times = await spawn_batch(make, args.servers, core, ns)
            this[f"{label}_cpu_ms"] = (time.process_time() - c0) / len(times) * 1000
            this[f"{label}_p50"], this[f"{label}_p95"] = statistics.median(times), percentile(times, 0.95)
            results[label] += times
            print(f"round {r + 1} {label}: p50 {this[label + '_p50']:.3f} s p95 {this[label + '_p95']:.3f} s "
                  f"cpu {this[label + '_cpu_ms']:.1f} ms/spawn", file=sys.stderr)
        rounds.append(this)
    await api.close()
    out = {"servers_per_batch": args.servers, "rounds": args.rounds, "t4_nodes": args.nodes}
    for label, values in results.items():
        out[f"{label}_p50_s"] = round(statistics.median(values), 3)
        out[f"{label}_p95_s"] = round(percentile(values, 0.95), 3)
        out[f"{label}_hub_cpu_ms_per_spawn"] = round(statistics.median(r[f"{label}_cpu_ms"] for r in rounds), 2)
    for q in ("p50", "p95", "cpu_ms"):  # within each round, then the median over rounds and the spread
        ratios = [r[f"GPUSpawner_{q}"] / r[f"KubeSpawner_{q}"] for r in rounds]
        out[f"round_ratio_{q}_median"] = round(statistics.median(ratios), 3)
        out[f"round_ratio_{q}_spread"] = f"{min(ratios):.3f}-{max(ratios):.3f}"
    return out


def main() -> None:
    from jupyterhub_gpu_dev import cluster

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--servers", "--spawns", dest="servers", type=int, default=100, help="concurrent spawns per batch")
    p.add_argument("--nodes", type=int, default=0, help="T4 nodes (0: enough for every server of a batch, at least 4)")
    p.add_argument("--rounds", type=int, default=4, help="A/B rounds; the order alternates each round")
    p.add_argument("--settle", type=float, default=5.0, help="quiet seconds before each batch")
    args = p.parse_args()
    args.nodes = args.nodes or max(4, -(-args.servers // 32) + 1)  # 4 GPUs x 8 time-slices per node, one spare
    with tempfile.TemporaryDirectory() as tmp:
        profiles = Path(tmp) / "profiles.yaml"
        profiles.write_text(yaml.safe_dump(BENCH_PROFILES))
        root = Path(tmp) / "cluster"
        c = cluster.up(profiles, {"system": 1, "gput4": args.nodes}, root=root, say=lambda m: None)
        try:
            result = asyncio.run(run(args, c.kubeconfig, profiles))
        finally:
            cluster.down(root)
    for k, v in result.items():
        print(f"{k:>20}: {v}")


if __name__ == "__main__":
    main()
