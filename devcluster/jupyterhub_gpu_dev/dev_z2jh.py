"""`gpuhub dev --z2jh`: the dev cluster with real nodes (kubelet, containerd, kube-proxy, CoreDNS; realnodes.py) and
the product installed on them with the zero-to-jupyterhub chart (z2jh_dev.py). Every pod of the hub, the proxy,
gpu-jobs, the servers and the Jobs of the GPU pool runs as a container; the file's other GPU pools stay KWOK pools.

It prints the proxy-public URL and the dev users with their password, and on Ctrl-C (or SIGTERM) stops the
cluster, which stops every container, unmounts the volumes and removes the nodes' network.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from . import binaries, cluster, devsetup, images, leftovers, realnodes, stopping, z2jh, z2jh_dev
from .binaries import BuildError
from .components import SetupError
from .dev import AgentProcess


def _say(msg: str) -> None:
    print(f"[gpuhub dev --z2jh] {msg}", file=sys.stderr, flush=True)


def default_gpu_pool(cfg) -> str:
    """The file's first time-sliced GPU pool (several servers share its node), else its first GPU pool."""
    gpu = [name for name, pool in cfg.pools.items() if pool.is_gpu]
    if not gpu:
        raise SetupError("the profiles file has no GPU pool: --z2jh runs one GPU pool on a real node")
    shared = [name for name in gpu if any(p.pool == name and p.gpu and p.gpu.kind == "time-sliced"
                                          for p in cfg.profiles)]
    return (shared or gpu)[0]


def node_images_for(profiles: Path, cfg):
    """The `images` callback of cluster.up: each real node's archives (make images), named as deployed."""
    from jupyterhub_gpu.builders.deploy import generated_files

    gone = [n for n in z2jh_dev.NODE_IMAGES if not images.archive(n).is_file()]
    if gone:
        raise SetupError(f"the images {', '.join(gone)} are not built for this tree: run `make images` first")

    def images_of(nodes):
        jobs = generated_files(cfg, str(profiles), z2jh.NAMESPACE)["gpu-jobs.yaml"]
        names = z2jh_dev.product_image_names(profiles.read_text(), jobs)
        return z2jh_dev.node_images(nodes, names, realnodes.pause_archive(binaries.bin_dir(), images.images_dir()))

    return images_of


def start_agent(c: cluster.Cluster) -> AgentProcess | None:
    """The dev agent (SIMULATOR) for the KWOK pools, in its namespace beside the real nodes."""
    cmd = realnodes.agent_command(c.layout)
    if cmd is None:
        return None
    prefix, args, kubeconfig = cmd
    return AgentProcess(c.root / "agent-state", kubeconfig, prefix, args).start()


def start(profiles: Path, users: dict[str, list[str]], root: Path, chart: Path | None, gpu_pool: str | None,
          say=_say, started: list | None = None) -> tuple[cluster.Cluster, str, str]:
    """Cluster with real nodes and the dev agent (appended to `started`), then the chart; returns (cluster,
    proxy-public URL, password)."""
    from jupyterhub_gpu.model.profiles_file import load_profiles

    cfg = load_profiles(profiles)
    chart = chart or z2jh.chart_dir()
    pool = gpu_pool or default_gpu_pool(cfg)
    t0 = time.monotonic()
    c = cluster.up(profiles, 1, root=root, say=say, real_gpu_pool=pool, images=node_images_for(profiles, cfg))
    agent = start_agent(c)
    if agent is not None and started is not None:
        started.append(agent)
    system_ip = next(n["ip"] for n in realnodes.recorded(c.layout) if n["kind"] == "system")
    url, password = z2jh_dev.install(c.kubeconfig, profiles, users, root / "z2jh", system_ip, chart, say)
    say(f"ready in {time.monotonic() - t0:.0f} s")
    return c, url, password


def summary(url: str, password: str, users: dict[str, list[str]], pool: str, say=_say) -> None:
    say(f"JupyterHub (z2jh {z2jh.CHART_VERSION}) is up: {url}")
    say(f"log in as one of these users with the password {password}:")
    for line in devsetup.login_lines(users):
        say(line)
    say(f"the system pool and GPU pool {pool!r} run on real nodes (containers; the GPUs are simulated by a device "
        "plugin); the file's other GPU pools are KWOK nodes, whose pods the dev agent (SIMULATOR) runs as local "
        "processes, reachable from the real nodes' pods")
    say("Ctrl-C stops everything this command started")


def run(profiles: str | None, users_file: str | None, chart: str | None, gpu_pool: str | None) -> int:
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

    path = Path(profiles or EXAMPLE_PROFILES).resolve()
    cfg = load_profiles(path)
    users = devsetup.load_users(users_file) if users_file else devsetup.demo_users(cfg)
    root = cluster.state_dir().resolve()
    saved = stopping.install(_say)
    code = 0
    agents: list[AgentProcess] = []
    try:
        try:
            os.environ.update(realnodes.procs.owner_mark(root))
            # `gpuhub cluster status` tells this live run from a crashed one's leftovers by this record
            leftovers.write_dev_info(root, started_cluster=True, state_dir=root / "z2jh")
            _, url, password = start(path, users, root, Path(chart) if chart else None, gpu_pool, started=agents)
            summary(url, password, users, gpu_pool or default_gpu_pool(cfg))
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            code = 0
        except (cluster.ClusterError, BuildError, SetupError, z2jh.ChartMissing, RuntimeError, TimeoutError) as e:
            stopping.begin()
            print(f"error: {e}", file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        pass
    finally:
        while True:
            try:
                stopping.begin()
                for agent in agents:
                    _say("stopping the dev agent and the KWOK pools' pods it runs ...")
                    agent.stop()
                    agents.remove(agent)
                _say("stopping the dev cluster, its real nodes and their containers ...")
                cluster.down(root, say=_say)  # forgets the dev record too
                break
            except KeyboardInterrupt:
                continue
        stopping.restore(saved)
    return code
