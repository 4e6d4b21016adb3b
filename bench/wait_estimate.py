"""Benchmark: the wait estimator (jupyterhub_gpu/model/wait_estimate.py) replayed over a queue's history.

    python bench/wait_estimate.py [--jobs 3000] [--slots 4] [--load 0.9] [--seed 1] [--raw] [--json]

The history is SIMULATED, not a cluster's: a ClusterQueue with `--slots` GPUs of quota admitting FIFO
(what Kueue does for one LocalQueue at one priority), Poisson arrivals at `--load` x its capacity, and
log-normal run times (median 20 min, sigma 1: a few runs take hours). Each job's creation and admission
times are then replayed in order: at each job's creation, the estimator sees only the admissions before
that moment and the job's position (1 + the jobs then waiting), exactly as gpu-jobs does; its p50 and p90
are compared with the job's real wait.

Reports, over the jobs that had to queue: how often an estimate was given (history thick enough), the
median absolute error of p50, the median error relative to the real wait, and the p90's coverage (the
share of real waits at or under it: ~0.9 is calibrated). `--raw`: the p90 without its calibration on the
queue's own past (wait_estimate.py), for the side-by-side comparison.

`--cost`: instead, the time of what gpu-jobs does per status list: estimates for 200 queued positions over
the latest 2,000 admissions of one queue (a fresh history list each round, as each list is), printed as
p50_ms/p95_ms over 30 rounds, with and without the calibration.
"""
from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyterhub_gpu.model import wait_estimate  # noqa: E402
from jupyterhub_gpu.model.wait_estimate import Admission, estimate  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def simulate(jobs: int, slots: int, load: float, seed: int) -> list[tuple[float, float]]:
    """(created, admitted) seconds for each job, FIFO on `slots` of quota."""
    rng = random.Random(seed)
    median_run, sigma = 1200.0, 1.0
    mean_run = median_run * (2.718281828 ** (sigma ** 2 / 2))
    rate = load * slots / mean_run
    t, free_at = 0.0, [0.0] * slots  # heap of when each slot frees
    out = []
    for _ in range(jobs):
        t += rng.expovariate(rate)
        start = max(t, heapq.heappop(free_at))
        heapq.heappush(free_at, start + rng.lognormvariate(0, sigma) * median_run)
        out.append((t, start))
    return out


def replay(history: list[tuple[float, float]], calibrate: bool = True) -> dict:
    adm = sorted(history, key=lambda x: x[1])
    abs_err, rel_err, covered, asked, given = [], [], 0, 0, 0
    for created, admitted in history:
        waiting = sum(1 for c, a in history if c < created < a)
        if admitted - created < 1 or waiting == 0:  # admitted at once: no ETA is shown
            continue
        asked += 1
        now = T0 + timedelta(seconds=created)
        seen = [Admission(T0 + timedelta(seconds=c), T0 + timedelta(seconds=a)) for c, a in adm if a <= created]
        e = estimate(seen, waiting + 1, now, calibrate=calibrate)
        if not e.known:
            continue
        given += 1
        wait = admitted - created
        abs_err.append(abs(e.p50_s - wait))
        rel_err.append(abs(e.p50_s - wait) / wait)
        covered += wait <= e.p90_s
    return {"queued_jobs": asked, "estimates_given": given,
            "p50_median_abs_error_min": round(statistics.median(abs_err) / 60, 1) if abs_err else None,
            "p50_median_rel_error": round(statistics.median(rel_err), 2) if rel_err else None,
            "p90_coverage": round(covered / given, 2) if given else None}


def cost(history: list[tuple[float, float]], calibrate: bool, rounds: int = 30) -> dict:
    import time

    adm = sorted(history, key=lambda x: x[1])[-2000:]
    times = []
    for _ in range(rounds):
        seen = [Admission(T0 + timedelta(seconds=c), T0 + timedelta(seconds=a)) for c, a in adm]
        wait_estimate._calibrations.clear()  # a changed history each list: the calibration is computed again
        t = time.perf_counter()
        for position in range(1, 201):
            estimate(seen, position, calibrate=calibrate)
        times.append((time.perf_counter() - t) * 1000)
    q = statistics.quantiles(times, n=20, method="inclusive")
    return {"p50_ms": round(statistics.median(times), 1), "p95_ms": round(q[18], 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--load", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--raw", action="store_true", help="the p90 without calibration")
    p.add_argument("--cost", action="store_true", help="time 200 estimates over 2,000 admissions instead")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.cost:
        hist = simulate(a.jobs, a.slots, a.load, a.seed)
        for name, cal in (("calibrated", True), ("raw", False)):
            r = cost(hist, cal)
            print(f"{name}: p50_ms {r['p50_ms']} p95_ms {r['p95_ms']}")
        return
    out = {"jobs": a.jobs, "slots": a.slots, "load": a.load, "seed": a.seed, "calibrated": not a.raw,
           **replay(simulate(a.jobs, a.slots, a.load, a.seed), calibrate=not a.raw)}
    print(json.dumps(out) if a.json else "\n".join(f"{k}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
