"""Benchmark: the profile picker's render with live capacity at 1,000 GPU nodes and 20,000 pods (or more).

The state is filled by the same event handlers the informers call (`ClusterState.apply_*`) with
node manifests shaped by the dev cluster's builder; each render is GPUSpawner's real path:
the profile list with capacity (`allowed_profile_list`) and KubeSpawner's form template render.
API requests per render are counted on the spawner's Kubernetes client (must stay 0). `rss_mib` is
this process's resident memory after the fill (the hub holds the same state); `state_mib` what the fill
added to it.

    python bench/picker_render.py [--nodes 1000] [--pods 20000] [--renders 300] [--churn]
    python bench/picker_render.py --churn --sizes 1000/20000,5000/100000   # both sizes, one run, ratio
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _capacity_module_from_argv() -> None:
    """`--capacity-module FILE`: measure another version of hub/capacity.py (e.g. the one before a change,
    `git show REV:jupyterhub_gpu/hub/capacity.py > FILE`) in its place; it must be imported first."""
    if "--capacity-module" not in sys.argv:
        return
    import importlib.util
    path = sys.argv[sys.argv.index("--capacity-module") + 1]
    spec = importlib.util.spec_from_file_location("jupyterhub_gpu.hub.capacity", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["jupyterhub_gpu.hub.capacity"] = module
    spec.loader.exec_module(module)


_capacity_module_from_argv()

from jupyterhub_gpu.hub.capacity import ClusterState  # noqa: E402
from jupyterhub_gpu.hub.informers import CapacityInformers  # noqa: E402
from jupyterhub_gpu.hub.render_pod import make_spawner  # noqa: E402
from jupyterhub_gpu.hub.spawner import GPUSpawner  # noqa: E402
from jupyterhub_gpu.model.profiles_file import (
    EXAMPLE_PROFILES,  # noqa: E402
    load_profiles,  # noqa: E402
)
from jupyterhub_gpu_dev.nodes import build_nodes  # noqa: E402


def rss_mib() -> float:
    """This process's resident memory (VmRSS), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


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


async def main_async(args, sizes: list[tuple[int, int]]) -> list[dict]:
    """Fill one state per size (its memory measured as it grows), then render round-robin across the sizes,
    so that the load of this shared machine falls on every size alike (the ratio is taken within the run)."""
    cfg = load_profiles(EXAMPLE_PROFILES)
    spawner = make_spawner(EXAMPLE_PROFILES, "bench", ["data-science", "ml-research"], live_capacity=True)
    runs = []
    for nodes, pods in sizes:
        core = CountingCore()
        informers = CapacityInformers(spawner.profiles, core)
        gc.collect()
        rss0 = rss_mib()
        t0 = time.perf_counter()
        fill(informers.state, nodes, pods)
        fill_s = time.perf_counter() - t0
        gc.collect()
        rss1 = rss_mib()
        informers.nodes.synced.set()
        informers.pods.synced.set()
        gpu_node = next(n for n in informers.state.nodes if "gpu" in n)
        res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
        churn_pod = {"metadata": {"name": "churn", "namespace": "bench"},
                     "spec": {"nodeName": gpu_node, "containers": [{"name": "c", "resources": {"requests": res}}]},
                     "status": {"phase": "Running"}}
        runs.append({"informers": informers, "core": core, "churn_pod": churn_pod, "times": [],
                     "fill_s": fill_s, "rss1": rss1, "state_mib": rss1 - rss0})
    for i in range(args.renders):
        for run in runs:
            informers = run["informers"]
            GPUSpawner._informers = informers  # what cluster_state() returns once the informers have synced
            if args.churn:  # a watch event between renders (a server starts, then stops): no memo can be reused
                informers.state.apply_pod("DELETED" if i % 2 else "ADDED", run["churn_pod"])
            start = time.perf_counter()
            profile_list = await spawner.profile_list(spawner)
            html = spawner._render_options_form(profile_list)
            run["times"].append((time.perf_counter() - start) * 1000)
            assert "gpuhub-picker" in html and "free" in html
    await spawner.api.api_client.close()
    out = []
    for run in runs:
        times, state = sorted(run["times"]), run["informers"].state
        out.append({
            "nodes": len(state.nodes), "pods": len(state.pods), "profiles": len(cfg.profiles),
            "renders": args.renders, "events_between_renders": int(args.churn),
            "p50_ms": round(statistics.median(times), 2), "p95_ms": round(times[int(len(times) * 0.95) - 1], 2),
            "max_ms": round(times[-1], 2), "api_requests_per_render": run["core"].calls / args.renders,
            "state_fill_s": round(run["fill_s"], 2), "rss_mib": round(run["rss1"], 1),
            "state_mib": round(run["state_mib"], 1)})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods", type=int, default=20000)
    p.add_argument("--renders", type=int, default=300)
    p.add_argument("--churn", action="store_true", help="one pod event before every render (busy cluster)")
    p.add_argument("--capacity-module", metavar="FILE", help="measure this capacity.py instead (see above)")
    p.add_argument("--sizes", default="", help="NODES/PODS,NODES/PODS,...: every size in this process, renders "
                   "interleaved, then the ratio of the last p95 to the first (overrides --nodes/--pods)")
    args = p.parse_args()
    sizes = [tuple(int(x) for x in s.split("/")) for s in args.sizes.split(",") if s] or [(args.nodes, args.pods)]
    results = asyncio.run(main_async(args, sizes))
    for result in results:
        for k, v in result.items():
            print(f"{k:>24}: {v}")
        print()
    if len(results) > 1:
        print(f"{'p95_ratio_last_first':>24}: {results[-1]['p95_ms'] / results[0]['p95_ms']:.2f}")


if __name__ == "__main__":
    main()
