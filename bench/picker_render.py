"""Benchmark: the profile picker's render with live capacity at 1,000 GPU nodes and 20,000 pods.

The state is filled by the same event handlers the informers call (`ClusterState.apply_*`) with
node manifests shaped by the dev cluster's builder; each render is GPUSpawner's real path:
the profile list with capacity (`allowed_profile_list`) and KubeSpawner's form template render.
API requests per render are counted on the spawner's Kubernetes client (must stay 0).

    python bench/picker_render.py [--nodes 1000] [--pods 20000] [--renders 300] [--churn]
"""
from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devcluster.nodes import build_nodes  # noqa: E402
from gpu_spawner.hub.capacity import ClusterState  # noqa: E402
from gpu_spawner.hub.informers import CapacityInformers  # noqa: E402
from gpu_spawner.hub.render_pod import make_spawner  # noqa: E402
from gpu_spawner.model.profiles import load_profiles  # noqa: E402
from gpu_spawner.model.profiles_file import EXAMPLE_PROFILES  # noqa: E402
from gpu_spawner.hub.spawner import GPUSpawner


def fill(state: ClusterState, nodes: int, pods: int, seed: int = 7) -> None:
    cfg = state.cfg
    gpu_pools = [n for n, p in cfg.pools.items() if p.is_gpu]
    per_pool = {name: nodes // len(gpu_pools) for name in gpu_pools}
    per_pool["system"] = 10
    manifests = build_nodes(cfg, per_pool)
    for m in manifests:
        m["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    state.replace("nodes", manifests)
    rnd = random.Random(seed)
    names = [m["metadata"]["name"] for m in manifests]
    for i in range(pods):
        node = rnd.choice(names)
        pool = state.nodes[node].pool
        res = {"cpu": "100m", "memory": "256Mi"}
        slots = cfg.pools[pool].slots_per_node()
        if slots and rnd.random() < 0.5:
            res[next(iter(slots))] = "1"
        bound = rnd.random() < 0.97
        state.apply_pod("ADDED", {
            "metadata": {"name": f"p{i}", "namespace": f"ns{i % 50}",
                         "labels": {"component": "singleuser-server", "gpuhub.io/profile": "t4-shared"}},
            "spec": {"nodeName": node if bound else None,
                     "nodeSelector": dict(cfg.pools[pool].node_selector),
                     "containers": [{"name": "c", "resources": {"requests": res, "limits": res}}]},
            "status": {"phase": "Running" if bound else "Pending"}})


class CountingCore:
    """Stands in for CoreV1Api on the informers: every call is counted (none should happen per render)."""

    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        def call(*a, **kw):
            self.calls += 1
            raise RuntimeError(f"unexpected API call {name} during a render")
        return call


async def main_async(args) -> dict:
    cfg = load_profiles(EXAMPLE_PROFILES)
    spawner = make_spawner(EXAMPLE_PROFILES, "bench", ["data-science", "ml-research"], live_capacity=True)
    core = CountingCore()
    informers = CapacityInformers(spawner.profiles, core)
    t0 = time.perf_counter()
    fill(informers.state, args.nodes, args.pods)
    fill_s = time.perf_counter() - t0
    informers.nodes.synced.set()
    informers.pods.synced.set()
    GPUSpawner._informers = informers  # what cluster_state() returns once the informers have synced
    times = []
    churn_pod = {"metadata": {"name": "churn", "namespace": "bench"},
                 "spec": {"nodeName": next(iter(informers.state.nodes)), "containers": []},
                 "status": {"phase": "Running"}}
    for i in range(args.renders):
        if args.churn:  # a watch event between renders: the capacity memo cannot be reused
            informers.state.apply_pod("MODIFIED", churn_pod)
        start = time.perf_counter()
        profile_list = await spawner.profile_list(spawner)
        html = spawner._render_options_form(profile_list)
        times.append((time.perf_counter() - start) * 1000)
    assert "gpuhub-picker" in html and "free" in html
    times.sort()
    await spawner.api.api_client.close()
    return {
        "nodes": len(informers.state.nodes), "pods": len(informers.state.pods), "profiles": len(cfg.profiles),
        "renders": args.renders, "events_between_renders": int(args.churn), "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[int(len(times) * 0.95) - 1], 2), "max_ms": round(times[-1], 2),
        "api_requests_per_render": core.calls / args.renders, "state_fill_s": round(fill_s, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods", type=int, default=20000)
    p.add_argument("--renders", type=int, default=300)
    p.add_argument("--churn", action="store_true", help="one pod event before every render (busy cluster)")
    result = asyncio.run(main_async(p.parse_args()))
    for k, v in result.items():
        print(f"{k:>24}: {v}")


if __name__ == "__main__":
    main()
