"""A running job's training throughput from the notebook's own reports (jupyterhub_gpu/reports.py): samples/s, time per
step and the job's ETA, so a user can tell "GPU busy but slow" from "GPU idle" (pure; gpu-jobs serves it in the
job's status and as Prometheus series).

Rates are taken over the newest run of reports (a resumed pod, or a loop started again, counts from where its
counters went back) and at most WINDOW_S of it: recent speed, smoothed over the runner's few-second prints.
"""
from __future__ import annotations

from typing import Any

#: Rates come from the reports of the last this many seconds (before the newest one).
WINDOW_S = 300.0
#: Two reports closer than this give no rate (the runner prints every few seconds; closer ones are noise, or forged).
MIN_SPAN_S = 1.0
#: The counters whose going back starts a new run.
_COUNTERS = ("step", "samples")


def _continues(before: dict, after: dict) -> bool:
    """`after` follows `before` in one run: later, and no counter went back."""
    if after["t"] <= before["t"]:
        return False
    return all(after[k] >= before[k] for k in _COUNTERS if k in before and k in after)


def _rate(first: dict, last: dict, key: str) -> float | None:
    if key in first and key in last and last["t"] - first["t"] >= MIN_SPAN_S:
        return (last[key] - first[key]) / (last["t"] - first["t"])
    return None


def throughput(reports: list[dict[str, Any]], window_s: float = WINDOW_S) -> dict[str, Any] | None:
    """The status's `throughput` from reports oldest first (None: no report): the newest report's step, total_steps,
    samples and loss, `reported_at` (its Unix time), and, when the run has two reports far enough apart,
    samples_per_s, step_s (seconds per step) and eta_s (the steps left at that pace; needs total_steps)."""
    if not reports:
        return None
    last = reports[-1]
    start = len(reports) - 1
    while start > 0 and _continues(reports[start - 1], reports[start]) and last["t"] - reports[start - 1]["t"] \
            <= window_s:
        start -= 1
    first = reports[start]
    out: dict[str, Any] = {"step": last.get("step"), "total_steps": last.get("total_steps"),
                           "samples": last.get("samples"), "loss": last.get("loss"), "reported_at": last["t"],
                           "samples_per_s": None, "step_s": None, "eta_s": None}
    if (rate := _rate(first, last, "samples")) is not None:
        out["samples_per_s"] = round(rate, 3)
    if (steps := _rate(first, last, "step")) is not None and steps > 0:
        out["step_s"] = round(1 / steps, 4)
        if last.get("total_steps") is not None and "step" in last:
            out["eta_s"] = round(max(0, last["total_steps"] - last["step"]) / steps, 1)
    return out
