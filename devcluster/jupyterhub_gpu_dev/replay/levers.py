"""Switching off one lever of the shared strategy at a time (pure: profiles dict and trace in, changed copies out).

- `sharing` (time-slicing, MPS and MIG): every GPU pool hands out whole GPUs; GPU profiles ask for a full GPU.
- `culling`: no idle timeouts or max ages; the culler stays off; servers left open run to the trace's end.
- `queueing`: no gpu-jobs/Kueue; each batch job runs in its owner's notebook server instead, which stays
  busy (and holds its GPU) for the job's runtime, as people do when there is no queue.
- `autoscaling` (scale-to-zero): GPU pools are static, `min_nodes = max_nodes` all day (no warm schedule).
Pools' max_nodes are raised where a lever needs more room, so every session and job is still served.
"""
from __future__ import annotations

import copy
from typing import Any

from .trace import Session, Trace

LEVERS = ("sharing", "culling", "queueing", "autoscaling")


def apply(lever: str | None, profiles: dict[str, Any], trace: Trace) -> tuple[dict[str, Any], Trace, bool]:
    """(profiles, trace, culler on) with `lever` switched off; None: everything on."""
    data = copy.deepcopy(profiles)
    if lever is None:
        return data, trace, True
    if lever not in LEVERS:
        raise ValueError(f"unknown lever {lever!r}; one of {', '.join(LEVERS)}")
    gpu_pools = {n for n, p in data["pools"].items() if p.get("gpu")}
    if lever == "sharing":
        for name in gpu_pools:
            data["pools"][name]["sharing"] = {"strategy": "none"}
            data["pools"][name]["max_nodes"] = max(data["pools"][name].get("max_nodes") or 0, len(trace.users) * 2)
        for prof in data["profiles"]:
            if prof.get("gpu"):
                prof["gpu"] = {"kind": "full", "count": 1}
        return data, trace, True
    if lever == "culling":
        for prof in data["profiles"]:
            prof.pop("idle_timeout", None)
            prof.pop("max_age", None)
        return data, trace, False
    if lever == "queueing":
        for name in gpu_pools:
            data["pools"][name]["max_nodes"] = max(data["pools"][name].get("max_nodes") or 0, len(trace.users))
        return data, jobs_in_sessions(trace), True
    for name in gpu_pools:  # autoscaling
        pool = data["pools"][name]
        pool["min_nodes"] = pool.get("max_nodes") or max(pool.get("min_nodes", 0), 1)
        pool.pop("warm", None)  # static all day: nothing to keep warm
    return data, trace, True


def _merge(periods: list[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    """Union of active periods; where they overlap, the busier utilisation."""
    out: list[list[float]] = []
    for a, b, u in sorted(periods):
        if out and a <= out[-1][1]:
            last = out[-1]
            if b > last[1]:
                out.append([last[1], b, u])
            last[2] = max(last[2], u)
        else:
            out.append([a, b, u])
    return [(a, b, u) for a, b, u in out if b > a]


def jobs_in_sessions(trace: Trace) -> Trace:
    """Every job becomes busy time in its owner's server: a session of its own, or its owner's session grown
    to cover it (one default server per user). Queue-less teams do this."""
    sessions = [s.model_copy(deep=True) for s in trace.sessions]
    for job in trace.jobs:
        a, b = job.submit, min(trace.duration, job.submit + job.runtime)
        period = (a, b, job.util)
        own = [s for s in sessions if s.user == job.user and s.start <= b and a <= s.end]
        if not own:
            sessions.append(Session(user=job.user, profile=job.profile, start=a, end=b, active=[period]))
            continue
        merged = own[0]
        for other in own[1:]:
            sessions.remove(other)
        start = min(a, *(s.start for s in own))
        end = max(b, *(s.end for s in own))
        periods = _merge([p for s in own for p in s.active] + [period])
        sessions[sessions.index(merged)] = Session(user=job.user, profile=merged.profile, start=start, end=end,
                                                   stop=all(s.stop for s in own), active=periods)
    sessions.sort(key=lambda s: (s.start, s.user))
    return Trace(duration=trace.duration, users=trace.users, sessions=sessions, jobs=[], evictions=trace.evictions)
