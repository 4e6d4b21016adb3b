"""`gpuhub cluster` and `gpuhub dev`: the development checkout's commands, added to the product's CLI through
its `gpuhub.commands` entry point (devcluster/pyproject.toml), so the product never imports the simulator."""
from __future__ import annotations

import argparse
from typing import Callable

from jupyterhub_gpu.tools.cli import CLIError


def _interval(value: str) -> int:
    """An argparse type: `--activity-interval 30s` (the one duration parser), 1 s to JupyterHub's 300 s."""
    from jupyterhub_gpu.model.activity import DEFAULT_ACTIVITY_INTERVAL
    from jupyterhub_gpu.model.durations import parse

    try:
        seconds = parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not 1 <= seconds <= DEFAULT_ACTIVITY_INTERVAL or seconds != int(seconds):
        raise argparse.ArgumentTypeError(f"{value!r}: give whole seconds from 1 s to {DEFAULT_ACTIVITY_INTERVAL} s "
                                         "(JupyterHub's default), e.g. 30s")
    return int(seconds)


def cmd_dev(args) -> int:
    from jupyterhub_gpu.model.activity import DEFAULT_ACTIVITY_INTERVAL, idle_timeout_problems
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
    from jupyterhub_gpu.model.validation import ProfilesError
    from jupyterhub_gpu_dev import dev
    from jupyterhub_gpu_dev.devsetup import UsersError, load_users

    # a bad file, or an idle_timeout the hub would refuse: exit 2 before anything starts
    path = args.profiles or str(EXAMPLE_PROFILES)
    interval = args.activity_interval or DEFAULT_ACTIVITY_INTERVAL
    if problems := idle_timeout_problems(load_profiles(path), interval):
        raise CLIError(f"{ProfilesError(problems, path)}\nto try a short idle_timeout with gpuhub dev, shorten the "
                       "hub's and the servers' interval together: gpuhub dev --activity-interval 30s")
    if args.users:
        try:
            load_users(args.users)
        except UsersError as e:
            raise CLIError(str(e)) from None
    if not 0 < args.port < 65536:
        raise CLIError(f"--port {args.port} is not a TCP port (1-65535)")
    if not 1 <= args.nodes_per_pool <= 50:
        raise CLIError(f"--nodes-per-pool {args.nodes_per_pool}: give 1 to 50")
    if args.z2jh:
        from jupyterhub_gpu_dev import dev_z2jh

        return dev_z2jh.run(args.profiles, args.users, args.chart, args.gpu_pool)
    if args.chart or args.gpu_pool:
        raise CLIError("--chart and --gpu-pool go with --z2jh")
    return dev.run(args.profiles, args.port, args.nodes_per_pool, args.users, args.activity_interval)


def _cluster_action(action: str) -> Callable[[argparse.Namespace], int]:
    def run(args) -> int:
        from jupyterhub_gpu_dev import cli as cluster_cli

        return cluster_cli.run(action, args)

    return run


def add_commands(sub) -> None:
    """Add `cluster` and `dev` to `gpuhub`'s subparsers."""
    c = sub.add_parser("cluster", help="the dev cluster: real control plane, Kueue and KWOK GPU pools")
    csub = c.add_subparsers(dest="action", required=True, metavar="ACTION")
    cu = csub.add_parser("up", help="start it in the background; prints KUBECONFIG=<path> last")
    cu.add_argument("--profiles", help="profiles file whose pools become nodes (default: the example)")
    cu.add_argument("--nodes-per-pool", type=int, default=2)
    cu.set_defaults(run=_cluster_action("up"))
    csub.add_parser("status", help="what runs, and its kubeconfig").set_defaults(run=_cluster_action("status"))
    csub.add_parser("down", help="stop everything `up` started").set_defaults(run=_cluster_action("down"))

    dev = sub.add_parser("dev", help="dev cluster + dev node agent (simulator) + JupyterHub on this machine")
    dev.add_argument("--profiles", help="profiles file (default: the example)")
    dev.add_argument("--port", type=int, default=8000, help="the hub's port (default 8000)")
    dev.add_argument("--nodes-per-pool", type=int, default=2)
    dev.add_argument("--users", metavar="FILE", help="YAML mapping of user name to groups, e.g. "
                     "`research-user: [research]` (default: one `<group>-user` per team and group of the "
                     "profiles file, and `admin` in all of them)")
    dev.add_argument("--activity-interval", type=_interval, metavar="DURATION",
                     help="JupyterHub's activity interval for the hub and the servers together (default 300s, "
                          "JupyterHub's), e.g. 30s to try a profile's short idle_timeout and see culling soon")
    dev.add_argument("--z2jh", action="store_true",
                     help="install the product as a platform team does: real kubelet nodes (containerd, kube-proxy, "
                          "CoreDNS) for the system pool and one GPU pool, the images of `make images` on them, "
                          "and the zero-to-jupyterhub chart with deploy/values.yaml; prints proxy-public's URL "
                          "(needs root)")
    dev.add_argument("--chart", metavar="DIR", help="with --z2jh: the z2jh 4.4.0 chart folder (default: "
                     "$GPUHUB_Z2JH_CHART, else shared/z2jh/jupyterhub beside the checkout)")
    dev.add_argument("--gpu-pool", metavar="POOL", help="with --z2jh: the GPU pool on the real node (default: the "
                     "file's first time-sliced pool)")
    dev.set_defaults(run=cmd_dev)
