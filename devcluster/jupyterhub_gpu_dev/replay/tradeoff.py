"""The trade-off between GPU node-hours and start waits (bench/day_replay.py --quick): each lever setting × each warm
schedule, on a trace, through the model-only replay (quick.py); a table and a frontier plot (node-hours against the
working-hours start wait p90).

Warm schedules (applied to the profiles dict, pure), on the GPU pools the trace uses:
- `none`: no pool keeps nodes warm (every `warm` removed);
- `file`: the profiles file's own schedules;
- `workday`: one node Mon-Fri 08:00-18:00;
- `arrivals`: one node Mon-Fri 07:45-10:30, while people arrive (a node in use then stays while it is in use).
A pool whose `min_nodes` already keeps that many nodes is left as it is.
"""
from __future__ import annotations

import copy
from typing import Any

from jupyterhub_gpu.model.validation import parse_profiles

from . import levers, quick
from .trace import Trace

WARM = {"none": None, "file": "file",
        "workday": [{"days": "Mon-Fri", "from": "08:00", "to": "18:00", "nodes": 1}],
        "arrivals": [{"days": "Mon-Fri", "from": "07:45", "to": "10:30", "nodes": 1}]}
#: Targets of issue 33, working hours: start wait p50 ≤ 60 s and p90 ≤ 5 min, node-hours ≥ 70 % below one VM each.
TARGET_P50_S, TARGET_P90_S, TARGET_SAVED = 60, 300, 0.70


def used_pools(data: dict[str, Any], trace: Trace) -> set[str]:
    slugs = {s.profile for s in trace.sessions} | {j.profile for j in trace.jobs}
    return {p["pool"] for p in data["profiles"] if p["slug"] in slugs and p.get("pool")
            and data["pools"][p["pool"]].get("gpu")}


def with_warm(data: dict[str, Any], trace: Trace, setting: str, idle_pools_at_zero: bool = False) -> dict[str, Any]:
    """The profiles dict with warm schedule `setting` on the pools the trace uses; `idle_pools_at_zero`: GPU pools
    it never uses keep no node (as a file without them would)."""
    if setting not in WARM:
        raise ValueError(f"unknown warm setting {setting!r}; one of {', '.join(WARM)}")
    out = copy.deepcopy(data)
    used = used_pools(out, trace)
    for name, pool in out["pools"].items():
        if not pool.get("gpu"):
            continue
        if idle_pools_at_zero and name not in used:
            pool["min_nodes"] = 0
            pool.pop("warm", None)
            continue
        if WARM[setting] != "file":
            pool.pop("warm", None)
        if isinstance(WARM[setting], list) and name in used:  # a pool already keeping as many all week: as is
            pool["warm"] = [w for w in WARM[setting] if w["nodes"] > pool.get("min_nodes", 0)]
        if pool.get("min_nodes", 0) >= (pool.get("max_nodes") or 0):  # static (autoscaling off): nothing to warm
            pool.pop("warm", None)
    return out


def matrix(data: dict[str, Any], trace: Trace, settings: list[str], lever_names: list[str | None], *,
           provision_delay: float, scale_down_after: float, startup_s: float, weekday: int = 0,
           idle_pools_at_zero: bool = False) -> list[dict[str, Any]]:
    """One row per (lever off, warm setting): the model-only replay's summary."""
    rows = []
    for lever in lever_names:
        base, tr, culling = levers.apply(lever, data, trace)
        for setting in settings:
            d = with_warm(base, tr, setting, idle_pools_at_zero)
            cfg = parse_profiles(d)
            result = quick.QuickReplay(cfg, tr, provision_delay, scale_down_after, startup_s, culling, weekday).run()
            row = quick.summary(cfg, tr, result)
            row.update(lever_off=lever, warm=setting, meets=meets(row))
            rows.append(row)
    return rows


def meets(row: dict[str, Any]) -> bool:
    w = row["work_hours"]
    return bool(w["p50_s"] is not None and w["p50_s"] <= TARGET_P50_S and w["p90_s"] <= TARGET_P90_S
                and row["saved"] is not None and row["saved"] >= TARGET_SAVED)


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| levers | warm | GPU node-h (saved vs one VM) | start wait p50 / p90 s, working hours | "
            "node p50 / p90 | quota p50 / p90 | start-up | all day p50 / p90 | worst pool (p90 s) | targets |")
    out = [head, "|" + "---|" * 10]
    for r in rows:
        w, a = r["work_hours"], r["all"]
        worst = f"{r['worst_pool']} ({r['work_p90_by_pool_s'].get(r['worst_pool'])})" if r["worst_pool"] else "—"
        out.append(f"| {'all on' if r['lever_off'] is None else r['lever_off'] + ' off'} | {r['warm']} "
                   f"| {r['gpu_node_hours']} ({r['saved']:.1%}) | {w['p50_s']} / {w['p90_s']} "
                   f"| {w['node_p50_s']} / {w['node_p90_s']} | {w['quota_p50_s']} / {w['quota_p90_s']} "
                   f"| {w['startup_s']} | {a['p50_s']} / {a['p90_s']} | {worst} "
                   f"| {'met' if r['meets'] else 'missed'} |")
    return "\n".join(out)


def plot(runs: dict[str, list[dict[str, Any]]], path) -> None:
    """Frontier: GPU node-hours against the working-hours start wait p90, one panel per trace."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(2, len(runs))
    rows_n = -(-len(runs) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(7 * cols, 4.5 * rows_n), squeeze=False)
    for ax, (name, rows) in zip(axes.flat, runs.items()):
        for r in rows:
            x, y = r["gpu_node_hours"], r["work_hours"]["p90_s"] or 0
            label = f"{r['warm']}" + ("" if r["lever_off"] is None else f", {r['lever_off']} off")
            ax.scatter([x], [y], marker="o" if r["lever_off"] is None else "x")
            ax.annotate(label, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        vm = rows[0]["one_vm_node_hours"]
        ax.axvline(vm * (1 - TARGET_SAVED), color="grey", ls="--", lw=0.8, label="70 % below one VM each")
        ax.axhline(TARGET_P90_S, color="red", ls=":", lw=0.8, label="p90 5 min")
        ax.set_xscale("log")
        ax.set_xlabel("GPU node-hours (log)")
        ax.set_ylabel("start wait p90, working hours (s)")
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
