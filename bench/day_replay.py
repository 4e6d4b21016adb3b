"""Benchmark: replay a day of a data-science team on shared GPU pools, side by side with one GPU VM per user.

    python bench/day_replay.py [--trace FILE | --users 12 --seed 1 --hours 24 [--spread]] [--speed 120]
                               [--warm none|file|workday|arrivals] [--levers] [--repeat 2] [--out bench/results]
                               [--faults SEED [--fault-kinds hub,kueue,...] [--fault-gap 30] [--plain-from JSON]]
    python bench/day_replay.py --quick [--provision-delay 240 480] [--startup-s 30]   # the trade-off, model only

The trace (format: devcluster/jupyterhub_gpu_dev/replay/trace.py; the default is generated from --seed) is replayed in
compressed time on a fresh dev cluster through the real hub (spawns/stops through its REST API, activity
reports), gpu-jobs and Kueue (batch jobs), and the culler (timeouts divided by --speed) with a real
Prometheus scraping SIMULATED DCGM series; GPU node pools follow an autoscaler MODEL
(devcluster/jupyterhub_gpu_dev/replay/autoscaler.py), since no cluster autoscaler runs in the dev cluster. One GPU VM
per user is costed on the same trace (devcluster/jupyterhub_gpu_dev/replay/accounting.py). Fails (exit 1) when the two
did not complete the same work, or when --repeat runs differ beyond the stated tolerance.
Writes bench/results/day_replay.json, day_replay_trace.yaml and day_replay.png (node count and GPU
utilisation over the day). --levers: one more replay per lever switched off
(devcluster/jupyterhub_gpu_dev/replay/levers.py). --spread: the trace's users spread over four GPU pools
(devcluster/jupyterhub_gpu_dev/replay/trace.py SPREAD). --warm: the pools' warm schedules
(devcluster/jupyterhub_gpu_dev/replay/tradeoff.py). --quick: no cluster; every lever setting × warm schedule on the
default and the spread trace through the autoscaler model alone (devcluster/jupyterhub_gpu_dev/replay/quick.py), for
each --provision-delay; writes {name}_tradeoff.json, .md and .png (GPU node-hours against start-wait p90). --faults
SEED: after the plain replay, the same trace again with faults at seeded times in its busiest hours
(devcluster/jupyterhub_gpu_dev/replay/faults.py: the hub, its services, Kueue, JobSet, the API server killed and started
again, etcd paused, the proxy killed, a GPU node deleted under its pods, gpu-jobs' API connections dropped), each with
how long the piece took to be healthy again (`faulted.faults`), and what must hold checked on both
(devcluster/jupyterhub_gpu_dev/replay/invariants.py: sessions served, jobs exactly once, outputs, checkpoints, showback,
node-hours within 5 %); exit 1 when one does not hold.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES  # noqa: E402
from jupyterhub_gpu.model.validation import parse_profiles  # noqa: E402
from jupyterhub_gpu_dev.replay import accounting, faults, invariants, levers, tradeoff  # noqa: E402
from jupyterhub_gpu_dev.replay import trace as traces
from jupyterhub_gpu_dev.replay.driver import Replay  # noqa: E402

COLUMNS = [("gpu_node_hours", "GPU node-h"), ("dollars", "$"), ("mean_gpu_utilisation", "mean GPU util"),
           ("sessions_served", "sessions"), ("jobs_finished", "jobs"), ("useful_gpu_hours", "useful GPU-h"),
           ("start_wait_p50_s", "start wait p50 s"), ("start_wait_p90_s", "p90 s"), ("sessions_waited", "waited"),
           ("queue_wait_p50_s", "queue p50 s"), ("queue_wait_p90_s", "p90 s"), ("jobs_preempted", "preempted"),
           ("jobs_resumed", "resumed")]


def table(rows: list[dict]) -> str:
    head = "| strategy | " + " | ".join(c[1] for c in COLUMNS) + " |"
    out = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    for r in rows:
        out.append(f"| {r['strategy']} | " + " | ".join(str(r.get(k)) for k, _ in COLUMNS) + " |")
    return "\n".join(out)


def replay_once(tr: traces.Trace, profiles: dict, args, lever: str | None = None,
                fault_list: list[faults.Fault] | None = None) -> dict:
    data, tr2, culling = levers.apply(lever, profiles, tr)
    data = tradeoff.with_warm(data, tr2, args.warm, idle_pools_at_zero=args.spread)
    root = Path(tempfile.mkdtemp(prefix="day-replay-"))
    result = Replay(tr2, data, args.speed, root, culling=culling, provision_delay=args.provision_delay[0],
                    scale_down_after=args.scale_down_after, weekday=args.weekday, faults=fault_list,
                    say=lambda m: print(f"[replay{' -' + lever if lever else ''}{' faulted' if fault_list else ''}] "
                                        f"{m}", file=sys.stderr)).run()
    cfg = parse_profiles(data)
    result["one_vm"] = accounting.one_vm_per_user(cfg, tr2)
    result["lever_off"] = lever
    return result


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    hours = [s["t"] / 3600 for s in samples]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    pools = [p for p in (samples[0]["nodes"] if samples else {}) if any(s["nodes"][p] for s in samples)]
    ax1.stackplot(hours, *[[s["nodes"][p] for s in samples] for p in pools], step="post",
                  labels=[f"shared: {p} nodes" for p in pools], alpha=0.7)
    ax1.axhline(result["one_vm"]["gpu_node_hours"] / max(1e-9, result["trace_hours"]), color="grey", ls="--",
                label="one VM per user")
    ax1.set_ylabel("GPU nodes")
    ax1.legend(fontsize=8)
    util = [min(1.0, s["gpu_demand"] / s["gpus"]) if s["gpus"] else 0 for s in samples]
    n_vm = result["one_vm"]["gpu_node_hours"] / max(1e-9, result["trace_hours"])
    ax2.plot(hours, util, label="shared pools")
    ax2.plot(hours, [s["gpu_demand"] / n_vm for s in samples], label="one VM per user")
    ax2.set_ylabel("GPU utilisation")
    ax2.set_xlabel("hour of the day")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def quick_tradeoff(tr: traces.Trace, profiles: dict, args, out: Path) -> int:
    """Every lever setting × warm schedule, model only, on the trace and on its spread variant (--users 6 of the
    same seed unless --trace), per --provision-delay: JSON, a Markdown table and the frontier PNG."""
    spread = traces.spread(tr if args.trace else traces.generate(args.seed, users=6, hours=args.hours))
    t0 = time.monotonic()
    result: dict = {"startup_s": args.startup_s, "scale_down_after_s": args.scale_down_after, "runs": {}}
    md = []
    for delay in args.provision_delay:
        for name, trace, idle in ((f"default ({len(tr.users)} users)", tr, False),
                                  (f"spread ({len(spread.users)} users, 4 pools)", spread, True)):
            rows = tradeoff.matrix(profiles, trace, list(tradeoff.WARM), [None, *levers.LEVERS],
                                   provision_delay=delay, scale_down_after=args.scale_down_after,
                                   startup_s=args.startup_s, weekday=args.weekday, idle_pools_at_zero=idle)
            key = f"{name}, {delay:g} s to add a node"
            result["runs"][key] = rows
            md += [f"### {key}", "", tradeoff.table(rows), ""]
    result["wall_s"] = round(time.monotonic() - t0, 1)
    (out / f"{args.name}_tradeoff.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / f"{args.name}_tradeoff.md").write_text("\n".join(md))
    tradeoff.plot(result["runs"], out / f"{args.name}_tradeoff.png")
    print("\n".join(md))
    print(f"wall {result['wall_s']} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", help="a trace file (YAML); default: generated from --seed/--users/--hours")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--users", type=int, default=traces.DEFAULTS["users"])
    ap.add_argument("--hours", type=float, default=traces.DEFAULTS["hours"])
    ap.add_argument("--speed", type=float, default=120, help="trace seconds per wall second")
    ap.add_argument("--profiles", default=str(EXAMPLE_PROFILES), help="profiles file (pools, min/max nodes, costs)")
    ap.add_argument("--provision-delay", type=float, nargs="+", default=[240],
                    help="model: seconds to add a GPU node (--quick: one trade-off table per value)")
    ap.add_argument("--spread", action="store_true", help="users spread over four GPU pools (trace.SPREAD); GPU "
                                                          "pools the trace never uses keep no node")
    ap.add_argument("--warm", default="file", choices=list(tradeoff.WARM), help="warm schedules (default: the file's)")
    ap.add_argument("--weekday", type=int, default=0, choices=range(7), help="the trace's day (Monday = 0)")
    ap.add_argument("--quick", action="store_true", help="model only: the node-hours / start-wait trade-off")
    ap.add_argument("--startup-s", type=float, default=30, help="--quick: a server's real start-up, seconds")
    ap.add_argument("--scale-down-after", type=float, default=600, help="model: empty seconds before removal")
    ap.add_argument("--levers", action="store_true", help="also replay with each lever switched off")
    ap.add_argument("--repeat", type=int, default=1, help="replay N times; fail beyond the determinism tolerance")
    ap.add_argument("--faults", type=int, metavar="SEED", help="also replay with faults at seeded times")
    ap.add_argument("--fault-kinds", default=",".join(faults.KINDS), help="which faults (comma-separated)")
    ap.add_argument("--fault-gap", type=float, default=faults.GAP_WALL_S,
                    help="wall seconds between two faults (a faster replay needs less to keep them in its busiest "
                         "hours; each still waits for the last one's recovery)")
    ap.add_argument("--plain-from", help="--faults: take the plain replay from this earlier result JSON of the same "
                                          "trace and speed instead of replaying it again")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    ap.add_argument("--name", default="day_replay", help="file name stem in --out")
    args = ap.parse_args(argv)

    profiles = yaml.safe_load(Path(args.profiles).read_text())
    if args.trace:
        tr = traces.load(args.trace)
    else:
        tr = traces.generate(args.seed, users=args.users, hours=args.hours)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.quick:
        return quick_tradeoff(tr, profiles, args, out)
    if args.spread:
        tr = traces.spread(tr)
    traces.dump(tr, out / f"{args.name}_trace.yaml")
    t0 = time.monotonic()
    if args.plain_from:  # the plain replay of this very trace, from an earlier run (a second fault seed's baseline)
        earlier = json.loads(Path(args.plain_from).read_text())
        if earlier.get("speed") != args.speed or traces.load(Path(args.plain_from).with_name(
                Path(args.plain_from).stem + "_trace.yaml")) != tr:
            ap.error(f"{args.plain_from} is not a replay of this trace at x{args.speed:g}")
        runs = [{k: earlier[k] for k in ("shared", "samples", "start_waits_s", "queue_waits_s", "one_vm")}]
    else:
        runs = [replay_once(tr, profiles, args) for _ in range(args.repeat)]
    result = runs[0]
    result.update(trace_hours=tr.duration / 3600, users=len(tr.users), speed=args.speed, warm=args.warm,
                  spread=args.spread,
                  seed=None if args.trace else args.seed, trace=args.trace or "generated",
                  model={"provision_delay_s": args.provision_delay[0], "scale_down_after_s": args.scale_down_after},
                  savings=accounting.savings(result["shared"], result["one_vm"]))
    problems = []
    try:
        accounting.check_same_work(result["shared"], result["one_vm"])
    except accounting.WorkMismatch as e:
        problems.append(str(e))
    if len(runs) > 1:
        result["repeats"] = [r["shared"] for r in runs]
        for other in runs[1:]:
            diff = accounting.differences(result["shared"], other["shared"])
            if diff:
                problems.append("not deterministic within tolerance: " + "; ".join(diff))
    problems += [f"unfaulted: {v}" for v in invariants.violations(result["shared"]["invariants"])]
    rows = [result["shared"], result["one_vm"]]
    if args.faults is not None:
        kinds = tuple(k for k in args.fault_kinds.split(",") if k)
        unknown = set(kinds) - set(faults.KINDS)
        if unknown:
            ap.error(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(faults.KINDS)}")
        plan = faults.schedule(args.faults, tr, args.speed, kinds, gap_wall_s=args.fault_gap)
        r = replay_once(tr, profiles, args, fault_list=plan)
        r["shared"]["strategy"] = f"shared, faults seed {args.faults}"
        result["faulted"] = {"seed": args.faults, "shared": r["shared"], "faults": r["shared"].pop("faults"),
                             "savings": accounting.savings(r["shared"], r["one_vm"])}
        rows.append(r["shared"])
        problems += [f"faulted: {v}" for v in invariants.violations(r["shared"]["invariants"])]
        problems += invariants.compare(result["shared"], r["shared"], result["faulted"]["faults"])
    if args.levers:
        result["levers"] = {}
        for lever in levers.LEVERS:
            r = replay_once(tr, profiles, args, lever)
            r["shared"]["strategy"] = f"shared, {lever} off"
            result["levers"][lever] = {"shared": r["shared"], "one_vm": r["one_vm"],
                                       "savings": accounting.savings(r["shared"], r["one_vm"])}
            rows.append(r["shared"])
            (out / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")  # so far
            print(table(rows[-1:]), file=sys.stderr)
    result["wall_s"] = round(time.monotonic() - t0, 1)
    result["problems"] = problems
    (out / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out / f"{args.name}.png")
    print(table(rows))
    s = result["savings"]
    print(f"GPU node-hours saved: {s['gpu_node_hours_saved']:.1%}, $ saved: {s['dollars_saved']:.1%}; "
          f"median start wait {result['shared']['start_wait_p50_s']} s; wall {result['wall_s']} s")
    for p in problems:
        print(f"FAILED: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
