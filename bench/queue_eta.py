"""Benchmark: the queue ETA estimator (gpu_spawner/services/usage/eta.py) replayed over a queue's history.

    python bench/queue_eta.py [--jobs 3000] [--slots 4] [--load 0.9] [--seed 1] [--json]

The history is SIMULATED, not a cluster's: a ClusterQueue with `--slots` GPUs of quota admitting FIFO
(what Kueue does for one LocalQueue at one priority), Poisson arrivals at `--load` x its capacity, and
log-normal run times (median 20 min, sigma 1: a few runs take hours). Each job's creation and admission
times are then replayed in order: at each job's creation, the estimator sees only the admissions before
that moment and the job's position (1 + the jobs then waiting), exactly as gpu-jobs does; its p50 and p90
are compared with the job's real wait.

Reports, over the jobs that had to queue: how often an estimate was given (history thick enough), the
median absolute error of p50, the median error relative to the real wait, and the p90's coverage (the
share of real waits at or under it: ~0.9 is calibrated).
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

from gpu_spawner.services.usage.eta import Admission, estimate  # noqa: E402

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


def replay(history: list[tuple[float, float]]) -> dict:
    adm = sorted(history, key=lambda x: x[1])
    abs_err, rel_err, covered, asked, given = [], [], 0, 0, 0
    for created, admitted in history:
        waiting = sum(1 for c, a in history if c < created < a)
        if admitted - created < 1 or waiting == 0:  # admitted at once: no ETA is shown
            continue
        asked += 1
        now = T0 + timedelta(seconds=created)
        seen = [Admission(T0 + timedelta(seconds=c), T0 + timedelta(seconds=a)) for c, a in adm if a <= created]
        e = estimate(seen, waiting + 1, now)
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--load", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    out = {"jobs": a.jobs, "slots": a.slots, "load": a.load, "seed": a.seed,
           **replay(simulate(a.jobs, a.slots, a.load, a.seed))}
    print(json.dumps(out) if a.json else "\n".join(f"{k}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
