"""SIMULATOR, model only: the day replay's trace through the autoscaler MODEL (autoscaler.py) alone, with no cluster,
hub or Kueue, in a second instead of a quarter of an hour, for the trade-off between GPU node-hours and start waits
over many settings (warm schedules, levers, provisioning delays). bench/day_replay.py --quick runs it.

What it models, and nothing more (docs/benchmarks.md):
- a server is asked for at its session's start, and again at the next busy period after the culler stopped it
  (culled after its profile's `idle_timeout` with no busy period, or at `max_age`); stopped at the session's end
  (`stop: true`) or left open;
- admission: a server (when its profile queues servers) and a job wait for their team's quota of the pool
  (`quota` + `borrowing_limit` when the team is in a cohort; the cohort's own limit is not modelled), first come
  first served per team and pool;
- an admitted pod binds to the first Ready node of its pool with a free slot (one slot per GPU asked), else waits
  for the autoscaler model to add one; a server is ready `startup_s` after it binds (the real start-up, which the
  cluster replay measures and this one takes as given);
- a job runs `runtime` seconds once bound (no preemption, no eviction).
Wait of a start = quota (asked → admitted) + node (admitted → bound) + start-up (bound → ready).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jupyterhub_gpu.model.profiles import ProfilesConfig

from . import accounting
from .autoscaler import AutoscalerModel, pool_models
from .trace import HOUR, Trace

WORK_HOURS = (8 * HOUR, 18 * HOUR)  # the targets' "during working hours": starts asked for in this window


@dataclass
class Pod:
    kind: str  # "server" | "job"
    index: int  # session or job index in the trace
    pool: str
    team: str | None
    slots: int
    asked: float
    queued: bool  # waits for quota
    admitted: float | None = None
    bound: float | None = None
    node: str | None = None
    ready: float | None = None
    done: float | None = None  # job end, or server stop


@dataclass
class Start:
    session: int
    pool: str
    asked: float
    quota_s: float
    node_s: float
    startup_s: float

    @property
    def wait(self) -> float:
        return self.quota_s + self.node_s + self.startup_s


@dataclass
class QuickResult:
    node_seconds: dict[str, float]
    starts: list[Start]
    job_waits: list[float]
    samples: list[dict[str, Any]] = field(default_factory=list)


class QuickReplay:
    def __init__(self, cfg: ProfilesConfig, trace: Trace, provision_delay: float = 240, scale_down_after: float = 600,
                 startup_s: float = 30, culling: bool = True, weekday: int = 0, tick: float = 10):
        self.cfg, self.trace, self.startup_s, self.culling, self.tick = cfg, trace, startup_s, culling, tick
        self.model = AutoscalerModel(pool_models(cfg, weekday), provision_delay, scale_down_after)
        self.pods: list[Pod] = []
        self.used: dict[tuple[str, str], int] = {}  # (team, pool) → slots admitted and not done

    # ------------------------------------------------------------------ facts
    def _team(self, user: str) -> str | None:
        found = self.cfg.team_for(self.trace.user(user).groups)
        return found[0] if found else None

    def _limit(self, team: str | None, pool: str) -> float:
        t = self.cfg.teams.get(team) if team else None
        if t is None:
            return float("inf")
        return t.quota.get(pool, 0) + ((t.borrowing_limit or 0) if t.cohort else 0)

    def _pod(self, kind: str, index: int, user: str, slug: str, now: float) -> Pod | None:
        prof = self.cfg.profile(slug)
        pool = prof.pool
        if pool not in self.model.pools:  # a CPU profile: no GPU node to wait for
            return None
        queued = prof.queue_servers if prof.queue_servers is not None else self.cfg.pools[pool].queue_servers
        queued = True if kind == "job" else (queued if queued is not None else True)
        pod = Pod(kind, index, pool, self._team(user), prof.gpu.count if prof.gpu else 1, now, queued)
        self.pods.append(pod)
        return pod

    # ------------------------------------------------------------------ one tick
    def _admit(self, now: float) -> None:
        for pod in self.pods:  # in asking order: first come, first served
            if pod.admitted is not None or pod.done is not None:
                continue
            key = (pod.team or "", pod.pool)
            if not pod.queued or self.used.get(key, 0) + pod.slots <= self._limit(pod.team, pod.pool):
                pod.admitted = now
                if pod.queued:
                    self.used[key] = self.used.get(key, 0) + pod.slots

    def _bind(self, now: float) -> None:
        on = self._pods_on()
        for pod in self.pods:
            if pod.admitted is None or pod.bound is not None or pod.done is not None:
                continue
            m = self.model.pools[pod.pool]
            node = next((n for n, rec in self.model.nodes.items() if rec["pool"] == pod.pool and rec["created"]
                         and on.get(n, 0) + pod.slots <= m.pods_per_node), None)
            if node:
                pod.bound, pod.node = now, node
                on[node] = on.get(node, 0) + pod.slots
                pod.ready = now + (self.startup_s if pod.kind == "server" else 0.0)

    def _pods_on(self) -> dict[str, int]:
        on: dict[str, int] = {}
        for p in self.pods:
            if p.node and p.done is None:
                on[p.node] = on.get(p.node, 0) + p.slots
        return on

    def _finish(self, pod: Pod, now: float) -> None:
        pod.done = now
        if pod.queued and pod.admitted is not None:
            key = (pod.team or "", pod.pool)
            self.used[key] -= pod.slots

    def run(self) -> QuickResult:
        tr = self.trace
        self.model.start(0.0)
        for rec in self.model.nodes.values():
            rec["created"] = True
        server: dict[int, Pod | None] = {}  # session → its current server pod
        idle_since: dict[int, float] = {}
        jobs: dict[int, Pod] = {}
        starts: list[Start] = []
        recorded: set[int] = set()
        end = tr.duration + 6 * HOUR
        now, samples, next_sample = 0.0, [], 0.0
        while now <= end:
            for i, s in enumerate(tr.sessions):
                pod = server.get(i)
                prof = self.cfg.profile(s.profile)
                busy = any(a <= now < b for a, b, _ in s.active)
                if pod is None and s.start <= now < s.end and (i not in server or busy):
                    server[i] = self._pod("server", i, s.user, s.profile, now)
                    idle_since[i] = now
                    continue
                if pod is None or pod.done is not None:
                    continue
                if busy:
                    idle_since[i] = now
                over = now >= s.end and s.stop
                culled = self.culling and pod.ready is not None and now >= pod.ready and not busy and (
                    (prof.idle_timeout and now - idle_since[i] >= prof.idle_timeout)
                    or (prof.max_age and now - pod.ready >= prof.max_age))
                if over or culled:
                    self._finish(pod, now)
                    server[i] = None
                elif pod.ready is not None and pod.ready <= now and id(pod) not in recorded:
                    recorded.add(id(pod))
                    starts.append(Start(i, pod.pool, pod.asked, pod.admitted - pod.asked, pod.bound - pod.admitted,
                                        pod.ready - pod.bound))
            for j, job in enumerate(tr.jobs):
                if j not in jobs and job.submit <= now:
                    jobs[j] = self._pod("job", j, job.user, job.profile, now)
                pod = jobs.get(j)
                if pod and pod.bound is not None and pod.done is None and now >= pod.bound + job.runtime:
                    self._finish(pod, now)
            self._admit(now)
            pending: dict[str, int] = {}
            for p in self.pods:
                if p.admitted is not None and p.bound is None and p.done is None:
                    pending[p.pool] = pending.get(p.pool, 0) + p.slots
            d = self.model.step(now, pending, self._pods_on())  # nodes due join now, then the pods bind
            for name in d.remove:
                assert not any(p.node == name and p.done is None for p in self.pods)
            self._bind(now)
            if now >= next_sample:
                samples.append({"t": now, "nodes": {p: self.model.count(p) for p in self.model.pools}})
                next_sample += 300
            if now >= tr.duration and len(jobs) == len(tr.jobs) and all(p is None or p.done is not None
                                                                      for p in jobs.values()):
                break
            now += self.tick
        waits = [p.bound - p.asked for p in jobs.values() if p and p.bound is not None]
        return QuickResult(self.model.node_seconds(now), starts, waits, samples)


def summary(cfg: ProfilesConfig, trace: Trace, result: QuickResult) -> dict[str, Any]:
    """GPU node-hours (per pool too) and start waits: all starts and those asked for in working hours, each split
    into quota, node and start-up; the pool whose starts waited longest (p90) in working hours."""
    p = accounting.percentile
    gpu = {k: v / HOUR for k, v in result.node_seconds.items()}
    work = [s for s in result.starts if WORK_HOURS[0] <= s.asked < WORK_HOURS[1]]

    def split(starts: list[Start]) -> dict[str, Any]:
        return {"starts": len(starts), "p50_s": _r(p([s.wait for s in starts], 0.5)),
                "p90_s": _r(p([s.wait for s in starts], 0.9)),
                "node_p50_s": _r(p([s.node_s for s in starts], 0.5)),
                "node_p90_s": _r(p([s.node_s for s in starts], 0.9)),
                "quota_p50_s": _r(p([s.quota_s for s in starts], 0.5)),
                "quota_p90_s": _r(p([s.quota_s for s in starts], 0.9)),
                "startup_s": _r(p([s.startup_s for s in starts], 0.5))}

    by_pool = {pool: _r(p([s.wait for s in work if s.pool == pool], 0.9)) for pool in sorted({s.pool for s in work})}
    worst = max(by_pool, key=lambda k: by_pool[k] or 0, default=None)
    vm = accounting.one_vm_per_user(cfg, trace)
    total = sum(gpu.values())
    return {"gpu_node_hours": round(total, 2), "by_pool_node_hours": {k: round(v, 2) for k, v in gpu.items() if v},
            "one_vm_node_hours": vm["gpu_node_hours"],
            "saved": round(1 - total / vm["gpu_node_hours"], 3) if vm["gpu_node_hours"] else None,
            "all": split(result.starts), "work_hours": split(work), "work_p90_by_pool_s": by_pool,
            "worst_pool": worst, "job_wait_p50_s": _r(p(result.job_waits, 0.5))}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 1)
