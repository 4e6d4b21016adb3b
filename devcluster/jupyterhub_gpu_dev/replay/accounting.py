"""Pure accounting of a day replay: useful work of a trace, the one-GPU-VM-per-user baseline, the shared
strategy's summary from what the replay observed, and the checks (same work; determinism within a tolerance).

Units: "GPU-hours of useful work" = utilisation × hours × the share of a whole GPU the profile gets (a MIG
1g.10gb slice is 1/7 of an A100; a time-slice or a full GPU is the whole GPU while it runs), so a job
or session does the same useful work whatever provides the GPU.
"""
from __future__ import annotations

from typing import Any, Iterable

from jupyterhub_gpu.model.profiles import ProfilesConfig

from .trace import HOUR, Trace


class WorkMismatch(AssertionError):
    """The strategies did not complete the same useful work: the comparison would be meaningless."""


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..1); None for no values."""
    v = sorted(values)
    if not v:
        return None
    return v[min(len(v) - 1, max(0, int(-(-q * len(v) // 1)) - 1))]


def gpu_share(cfg: ProfilesConfig, slug: str) -> float:
    """The share of one physical GPU a pod of this profile gets (MIG slice: 1/slices per GPU)."""
    prof = cfg.profile(slug)
    pool = cfg.pools[prof.pool]
    layout = pool.mig_layout
    if layout:
        return 1.0 / max(1, sum(layout.values()))
    return 1.0


def session_work(cfg: ProfilesConfig, trace: Trace) -> list[float]:
    """GPU-hours of useful work per session (same order as trace.sessions)."""
    return [sum((b - a) * u for a, b, u in s.active) / HOUR * gpu_share(cfg, s.profile) for s in trace.sessions]


def job_work(cfg: ProfilesConfig, trace: Trace) -> list[float]:
    return [j.runtime * j.util / HOUR * gpu_share(cfg, j.profile) for j in trace.jobs]


def useful_gpu_hours(cfg: ProfilesConfig, trace: Trace) -> float:
    return sum(session_work(cfg, trace)) + sum(job_work(cfg, trace))


def one_vm_per_user(cfg: ProfilesConfig, trace: Trace) -> dict[str, Any]:
    """Each user has a single-GPU VM of their `vm_profile`'s pool, running (and paid) the whole trace. Their
    sessions start at once and their jobs run on it when submitted: no waits, no queue, nothing preempted."""
    hours = trace.duration / HOUR
    node_hours = len(trace.users) * hours
    dollars = sum(cfg.pools[cfg.profile(u.vm_profile).pool].cost_per_node_hour for u in trace.users) * hours
    useful = useful_gpu_hours(cfg, trace)
    return {
        "strategy": "one GPU VM per user", "gpu_node_hours": round(node_hours, 2), "dollars": round(dollars, 2),
        "gpu_hours_provisioned": round(node_hours, 2),
        "mean_gpu_utilisation": round(useful / node_hours, 4) if node_hours else 0.0,
        "sessions_served": len(trace.sessions), "jobs_finished": len(trace.jobs),
        "useful_gpu_hours": round(useful, 3), "start_wait_p50_s": 0.0, "start_wait_p90_s": 0.0,
        "sessions_waited": 0, "queue_wait_p50_s": 0.0, "queue_wait_p90_s": 0.0, "jobs_preempted": 0,
        "jobs_resumed": 0,
    }


def shared_summary(cfg: ProfilesConfig, trace: Trace, node_seconds: dict[str, float], served: list[bool],
                   jobs_done: list[bool], start_waits: list[float], queue_waits: list[float],
                   waited_threshold: float, preempted: int, resumed: int) -> dict[str, Any]:
    """The shared strategy's figures from what the replay observed. `served[i]`: every active period of
    session i had its server; `jobs_done[j]`: job j succeeded; waits in (trace) seconds."""
    gpu_pools = {name for name, p in cfg.pools.items() if p.is_gpu}
    node_hours = sum(s for p, s in node_seconds.items() if p in gpu_pools) / HOUR
    gpu_hours = sum(s * cfg.pools[p].gpu.count_per_node for p, s in node_seconds.items() if p in gpu_pools) / HOUR
    dollars = sum(s * cfg.pools[p].cost_per_node_hour for p, s in node_seconds.items() if p in gpu_pools) / HOUR
    sw, jw = session_work(cfg, trace), job_work(cfg, trace)
    useful = sum(w for w, ok in zip(sw, served) if ok) + sum(w for w, ok in zip(jw, jobs_done) if ok)
    p = lambda v, q: None if percentile(v, q) is None else round(percentile(v, q), 1)  # noqa: E731
    return {
        "strategy": "shared pools", "gpu_node_hours": round(node_hours, 2), "dollars": round(dollars, 2),
        "gpu_hours_provisioned": round(gpu_hours, 2),
        "mean_gpu_utilisation": round(useful / gpu_hours, 4) if gpu_hours else 0.0,
        "sessions_served": sum(served), "jobs_finished": sum(jobs_done), "useful_gpu_hours": round(useful, 3),
        "start_wait_p50_s": p(start_waits, 0.5), "start_wait_p90_s": p(start_waits, 0.9),
        "sessions_waited": sum(1 for w in start_waits if w > waited_threshold), "server_starts": len(start_waits),
        "queue_wait_p50_s": p(queue_waits, 0.5), "queue_wait_p90_s": p(queue_waits, 0.9),
        "jobs_preempted": preempted, "jobs_resumed": resumed,
        "node_hours_by_pool": {k: round(v / HOUR, 2) for k, v in node_seconds.items()},
    }


def check_same_work(shared: dict[str, Any], vm: dict[str, Any], tolerance: float = 1e-6) -> None:
    """Fail loudly unless both strategies served every session, finished every job and did the same GPU-hours."""
    problems = [f"{k}: shared {shared[k]} vs one-VM {vm[k]}" for k in ("sessions_served", "jobs_finished")
                if shared[k] != vm[k]]
    if abs(shared["useful_gpu_hours"] - vm["useful_gpu_hours"]) > tolerance + 1e-3:
        problems.append(f"useful_gpu_hours: shared {shared['useful_gpu_hours']} vs one-VM {vm['useful_gpu_hours']}")
    if problems:
        raise WorkMismatch("the strategies did not complete the same work: " + "; ".join(problems))


def savings(shared: dict[str, Any], vm: dict[str, Any]) -> dict[str, float]:
    return {"gpu_node_hours_saved": round(1 - shared["gpu_node_hours"] / vm["gpu_node_hours"], 4),
            "dollars_saved": round(1 - shared["dollars"] / vm["dollars"], 4) if vm["dollars"] else 0.0}


#: Figures compared between two replays of one seed, and how far apart they may be (relative).
DETERMINISM = {"gpu_node_hours": 0.10, "dollars": 0.10, "useful_gpu_hours": 0.0, "sessions_served": 0.0,
               "jobs_finished": 0.0}


def differences(a: dict[str, Any], b: dict[str, Any], tolerances: dict[str, float] = DETERMINISM) -> list[str]:
    """Figures of two runs that differ by more than their tolerance (relative to the larger one)."""
    out = []
    for key, tol in tolerances.items():
        x, y = float(a[key]), float(b[key])
        if abs(x - y) > tol * max(abs(x), abs(y)) + 1e-9:
            out.append(f"{key}: {x} vs {y} (tolerance {tol:.0%})")
    return out
