"""How long the dev cluster takes to create N simulated GPU nodes and see them all Ready.

    python bench/cluster_nodes.py                 # own cluster in a temp folder, 1,000 nodes, then down
    python bench/cluster_nodes.py --nodes 2000 --parallel 16
    python bench/cluster_nodes.py --running       # use the cluster `gpuhub cluster up` started

Nodes are spread evenly over the GPU pools of the profiles file (default: the example), shaped
exactly like the dev cluster's own (jupyterhub_gpu_dev.nodes). Prints one JSON line and writes it to
bench/results/cluster_nodes.json.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from report import write_result  # noqa: E402  (bench/report.py, next to this script)

from jupyterhub_gpu.model.profiles_file import (
    EXAMPLE_PROFILES,  # noqa: E402
    load_profiles,  # noqa: E402
)
from jupyterhub_gpu_dev import cluster as dc  # noqa: E402
from jupyterhub_gpu_dev.nodes import SIMULATED_LABEL, node_manifest  # noqa: E402

BENCH_LABEL = "gpuhub.io/bench"
FIRST_INDEX = 100_000  # clear of the nodes `up` created


def manifests(cfg, count: int) -> list[dict]:
    pools = [(n, p) for n, p in cfg.pools.items() if p.is_gpu]
    out = []
    for i in range(count):
        name, pool = pools[i % len(pools)]
        node = node_manifest(name, pool, FIRST_INDEX + i // len(pools))
        node["metadata"]["labels"][BENCH_LABEL] = "true"
        out.append(node)
    return out


def measure(cluster: dc.Cluster, cfg, count: int, parallel: int, timeout: float) -> dict:
    kube = cluster.kube()
    nodes = manifests(cfg, count)
    t0 = time.monotonic()
    dc.add_nodes(kube, nodes, parallel=parallel)
    created = time.monotonic() - t0
    selector = f"{SIMULATED_LABEL}=true,{BENCH_LABEL}=true"
    polls = 0
    while len(dc.ready_nodes(kube, selector)) < count:
        polls += 1
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"only {len(dc.ready_nodes(kube, selector))} of {count} nodes Ready after {timeout} s")
        time.sleep(0.5)
    ready = time.monotonic() - t0
    kube.close()
    return {"nodes": count, "parallel": parallel, "create_s": round(created, 2), "all_ready_s": round(ready, 2),
            "nodes_per_s": round(count / ready, 1), "pools": sorted({n["metadata"]["labels"]
                                                                     ["kubernetes.azure.com/agentpool"]
                                                                     for n in nodes})}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--parallel", type=int, default=8, help="concurrent create requests")
    p.add_argument("--profiles", default=str(EXAMPLE_PROFILES))
    p.add_argument("--running", action="store_true", help="use the running cluster in GPUHUB_CLUSTER_DIR")
    p.add_argument("--timeout", type=float, default=600)
    a = p.parse_args()
    cfg = load_profiles(a.profiles)
    if a.running:
        result = measure(dc.Cluster(dc.state_dir()), cfg, a.nodes, a.parallel, a.timeout)
    else:
        root = Path(tempfile.mkdtemp(prefix="gpuhub-bench-"))
        t0 = time.monotonic()
        cluster = dc.up(a.profiles, nodes_per_pool=0, root=root)
        try:
            started = round(time.monotonic() - t0, 2)
            result = measure(cluster, cfg, a.nodes, a.parallel, a.timeout)
            result["cluster_up_s"] = started
        finally:
            dc.down(root)
    return write_result("cluster_nodes", result)


if __name__ == "__main__":
    sys.exit(main())
