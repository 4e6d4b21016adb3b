"""`gpuhub cluster up|status|down` and `python -m jupyterhub_gpu_dev up|status|down`.

Contract: `up` starts everything in the background, returns once it is ready and prints
`KUBECONFIG=<path>` as its last stdout line; progress and errors go to stderr; failures exit 1.
"""
from __future__ import annotations

import argparse
import sys
import time

EXIT_FAILED = 1
EXIT_NOT_RUNNING = 3


def _say(msg: str) -> None:
    print(f"[devcluster] {msg}", file=sys.stderr, flush=True)


def _up(args) -> int:
    from . import cluster

    t0 = time.monotonic()
    c = cluster.up(getattr(args, "profiles", None), getattr(args, "nodes_per_pool", 2), say=_say)
    _say(f"ready in {time.monotonic() - t0:.1f} s; logs in {c.logs}; stop it with `gpuhub cluster down`")
    print(f"KUBECONFIG={c.kubeconfig}", flush=True)
    return 0


def _status(_args) -> int:
    from . import cluster

    st = cluster.status()
    comps = st["components"]
    width = max(map(len, comps))
    for name, c in comps.items():
        pid = f"pid {c['pid']}" if "pid" in c else ""
        print(f"{name:<{width}}  {pid:<12} {c['state']}")
    print(f"logs: {st['logs']}")
    if st["busy"]:
        print("a `gpuhub cluster up` or `down` (or `gpuhub dev`) is starting or stopping it right now")
    if st["leftovers"]:
        print("left over from a run that ended without stopping them (stop them with `gpuhub cluster down`):")
        for line in st["leftovers"]:
            print(f"  {line}")
        return EXIT_FAILED
    if not st["running"]:
        print(f"no dev cluster is running in {st['state_dir']}")
        return EXIT_NOT_RUNNING
    print(f"KUBECONFIG={st['kubeconfig']}")
    return 0 if st["healthy"] else EXIT_FAILED


def _down(_args) -> int:
    from . import cluster

    stopped = cluster.down(say=_say)
    if stopped:
        print("stopped: " + ", ".join(stopped))
    else:
        print(f"no dev cluster was running in {cluster.state_dir()}")
    return 0


ACTIONS = {"up": _up, "status": _status, "down": _down}


def run(action: str, args: argparse.Namespace) -> int:
    """Entry point shared by `gpuhub cluster ACTION` and `python -m jupyterhub_gpu_dev ACTION`."""
    from jupyterhub_gpu.model.validation import ProfilesError

    from . import stopping
    from .binaries import BuildError
    from .cluster import ClusterError
    from .components import SetupError

    saved = stopping.install(_say)  # a second Ctrl-C hurries the cleanup instead of aborting it
    if action == "down":
        stopping.begin()  # already stopping: a signal only hurries it
    try:
        return ACTIONS[action](args)
    except ProfilesError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (ClusterError, BuildError, SetupError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted; everything this command started was stopped", file=sys.stderr)
        return 130
    finally:
        stopping.restore(saved)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jupyterhub_gpu_dev", description="The jupyterhub-gpu dev cluster: "
                                "real control plane, Kueue and KWOK GPU node pools, in the background.")
    sub = p.add_subparsers(dest="action", required=True)
    u = sub.add_parser("up", help="start it; prints KUBECONFIG=<path> last")
    u.add_argument("--profiles", help="profiles file whose pools become nodes (default: the example)")
    u.add_argument("--nodes-per-pool", type=int, default=2)
    sub.add_parser("status", help="each component with its pid and health, and the kubeconfig")
    sub.add_parser("down", help="stop everything `up` started")
    args = p.parse_args(argv)
    return run(args.action, args)
