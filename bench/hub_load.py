"""The pure parts of bench/hub_users.py's load driver: its argument checks, who spawns, the EventSource
parser for JupyterHub's spawn-progress stream, and the statistics of a run (tested in tests/unit, fast).

Kept apart from the driver so that the numbers it reports (ratio per round, median and min–max, p95) are
computed by code that is tested without starting a hub.
"""
from __future__ import annotations

import argparse
import json
import statistics

from bench.spawn_bound import percentile as nearest_rank

#: Bounds on the load (the driver must never become a flood on a shared machine).
MAX_USERS = 5000
MAX_CONCURRENCY = 200
MAX_SPAWN_CONCURRENCY = 50
MAX_WINDOW_S = 120.0


def p95(values: list[float]) -> float | None:
    """The 95th percentile by bench/spawn_bound.py's nearest-rank rule, rounded; None for no values."""
    return round(nearest_rank(values, 0.95), 1) if values else None


def parse_sizes(text: str) -> list[int]:
    """`--users 300,1000` → [300, 1000]; each N from 1 to MAX_USERS, no repeats."""
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--users: comma-separated whole numbers, not {text!r}") from None
    if not sizes or len(set(sizes)) != len(sizes) or not all(1 <= n <= MAX_USERS for n in sizes):
        raise argparse.ArgumentTypeError(f"--users: distinct N from 1 to {MAX_USERS}, not {text!r}")
    return sizes


def check_args(args: argparse.Namespace) -> None:
    """Refuse a load that is unbounded or meaningless; ArgumentTypeError says which option and why."""
    rules = [
        (args.rounds >= 1, "--rounds must be at least 1"),
        (args.cycles >= 1, "--cycles must be at least 1"),
        (args.polls >= 0 and args.job_polls >= 0, "--polls and --job-polls cannot be negative"),
        (1 <= args.concurrency <= MAX_CONCURRENCY, f"--concurrency must be 1..{MAX_CONCURRENCY}"),
        (0.0 <= args.progress_share <= 1.0, "--progress-share is a share of the users, 0..1"),
        (1 <= args.spawn_concurrency <= MAX_SPAWN_CONCURRENCY,
         f"--spawn-concurrency must be 1..{MAX_SPAWN_CONCURRENCY}"),
        (0 < args.progress_window <= MAX_WINDOW_S, f"--progress-window must be in (0, {MAX_WINDOW_S:.0f}] s"),
    ]
    for ok, why in rules:
        if not ok:
            raise argparse.ArgumentTypeError(why)


def spawning(names: list[str], share: float) -> set[str]:
    """The users who spawn: floor(N * share) of them, spread evenly over the list (not the first ones, so
    spawns run through the whole load)."""
    return {name for i, name in enumerate(names) if int((i + 1) * share) > int(i * share)}


class EventStream:
    """Incremental parser of a `text/event-stream` body: `feed(bytes)` returns the events completed so far.

    JupyterHub's progress handler writes `data: <json>\\n\\n` per event and a bare `\\n\\n` every 8 s as a
    keepalive; a block without a data line is no event. A data value that is not JSON is kept as
    {"message": text}, so a broken event is counted, not lost."""

    def __init__(self) -> None:
        self._buf = ""
        self._dec = None

    def feed(self, chunk: bytes) -> list[dict]:
        import codecs

        if self._dec is None:
            self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf += self._dec.decode(chunk).replace("\r\n", "\n")
        *blocks, self._buf = self._buf.split("\n\n")
        events = []
        for block in blocks:
            data = [line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")]
            if not data:
                continue
            text = "\n".join(data)
            try:
                event = json.loads(text)
            except ValueError:
                event = {"message": text}
            events.append(event if isinstance(event, dict) else {"message": text})
        return events


def spread(values: list[float]) -> dict | None:
    """Median, min and max of a figure over rounds (None when no round measured it)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "values": [round(v, 3) for v in values]}


#: Per-hub figures the summary gives median and min–max of, package and plain side by side.
SUMMARY_KEYS = ("cpu_ms_per_user", "spawn_page_p95_ms", "rss_mib_after", "progress_first_p95_ms",
                "progress_ready_p95_ms", "spawn_stop_p95_ms", "errors")


def summarize(runs: list[dict], sizes: list[int]) -> dict:
    """Per N: the ratio package / plain of CPU per user WITHIN each round (rounds alternate which hub goes
    first), its median and min–max over rounds, and each SUMMARY_KEYS figure per hub. A round where one hub
    is missing (a run stopped early) gives no ratio."""
    out = {}
    for n in sizes:
        by_round: dict[int, dict[str, dict]] = {}
        for run in runs:
            if run["users"] == n:
                by_round.setdefault(run["round"], {})[run["hub"]] = run
        pairs = [r for _, r in sorted(by_round.items()) if {"package", "plain"} <= r.keys()]
        entry = {"rounds": len(pairs),
                 "ratio": spread([r["package"]["cpu_ms_per_user"] / max(r["plain"]["cpu_ms_per_user"], 1e-6)
                                  for r in pairs])}
        for key in SUMMARY_KEYS:
            for hub in ("package", "plain"):
                entry[f"{hub}_{key}"] = spread([r[hub].get(key) for r in pairs])
        out[n] = entry
    return out


# ---------------------------------------------------------------------------------------------- profiles
def profile_groups(path: str) -> list[str]:
    """Every group a profile names: the seeded users are in all of them, so both hubs list every profile."""
    from jupyterhub_gpu.model.profiles_file import load_profiles

    return sorted({g for p in load_profiles(path).profiles for g in (p.groups or [])})


def plain_profile_list(path: str) -> list[dict]:
    """The profiles as a plain KubeSpawner `profile_list`: slug, name, description, default, and as
    `kubespawner_override` the pod settings GPUSpawner gives the same user (builders/pods.py
    `spawner_overrides`, env values that are not strings left out, as bench/spawn_bound.py does), so a
    spawn creates the same pod in both hubs."""
    from jupyterhub_gpu.builders import pods as podspec
    from jupyterhub_gpu.model.profiles_file import load_profiles

    cfg, groups = load_profiles(path), profile_groups(path)
    out = []
    for p in cfg.profiles:
        override = json.loads(json.dumps(podspec.spawner_overrides(cfg, p, groups=groups), default=str))
        override["environment"] = {k: v for k, v in override.get("environment", {}).items() if isinstance(v, str)}
        entry = {"slug": p.slug, "display_name": p.display_name or p.slug, "description": p.description or "",
                 "kubespawner_override": override}
        if p.default:
            entry["default"] = True
        out.append(entry)
    return out
