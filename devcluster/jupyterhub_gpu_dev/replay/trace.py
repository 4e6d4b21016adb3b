"""The workload trace of a day replay (bench/day_replay.py): its YAML format and a seeded generator.

A trace is what a team of data scientists did, independent of how GPUs are provided, so the same
trace can be replayed on shared pools and costed as one GPU VM per user. All times are seconds from
the start of the trace (00:00 of the day). Format (YAML; docs/benchmarks.md shows an example):

    version: 1
    duration: 86400                      # seconds the trace covers (a day)
    users:
      - {name: ds01, groups: [data-science], vm_profile: t4-shared}   # vm_profile: their own VM's GPU
    sessions:                            # interactive servers
      - user: ds01
        profile: t4-shared
        start: 32400                     # the user asks for a server
        end: 61200                       # the user stops it (stop: false: left open for the culler)
        stop: true
        active: [[32700, 34500, 0.45]]   # [from, to, GPU utilisation 0..1]: kernel busy; between: idle gaps
    jobs:                                # batch notebooks through the gpu-jobs service (Kueue)
      - {user: ds01, profile: t4-shared, submit: 50400, runtime: 7200, checkpoint_interval: 600, nodes: 1,
         util: 0.9}
    evictions:                           # a node of the pool is taken away (spot eviction, maintenance)
      - {pool: gput4, at: 7200}
"""
from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

DAY = 86400
HOUR = 3600


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class User(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")
    groups: list[str] = []
    vm_profile: str = Field(description="The profile whose GPU this user would get as a VM of their own.")


class Session(_Strict):
    user: str
    profile: str
    start: float = Field(ge=0)
    end: float
    stop: bool = True
    active: list[tuple[float, float, float]] = []

    @model_validator(mode="after")
    def _periods(self) -> "Session":
        if self.end <= self.start:
            raise ValueError(f"session of {self.user}: end {self.end} is not after start {self.start}")
        last = self.start
        for a, b, util in self.active:
            if not (last <= a < b <= self.end):
                raise ValueError(f"session of {self.user}: active period [{a}, {b}] is out of order or outside "
                                 f"[{self.start}, {self.end}]")
            if not 0 <= util <= 1:
                raise ValueError(f"session of {self.user}: utilisation {util} is not within 0..1")
            last = b
        return self


class Job(_Strict):
    user: str
    profile: str
    submit: float = Field(ge=0)
    runtime: float = Field(gt=0)
    checkpoint_interval: float = Field(gt=0)
    nodes: int = Field(1, ge=1, le=1, description="Pods of the job; the replay runs single-pod jobs.")
    util: float = Field(0.9, ge=0, le=1)


class Eviction(_Strict):
    pool: str
    at: float = Field(ge=0)


class Trace(_Strict):
    version: int = 1
    duration: float = Field(DAY, gt=0)
    users: list[User]
    sessions: list[Session] = []
    jobs: list[Job] = []
    evictions: list[Eviction] = []

    @model_validator(mode="after")
    def _refs(self) -> "Trace":
        names = [u.name for u in self.users]
        if len(set(names)) != len(names):
            raise ValueError("user names repeat")
        for item in [*self.sessions, *self.jobs]:
            if item.user not in names:
                raise ValueError(f"{type(item).__name__.lower()} of unknown user {item.user!r}")
        for s in self.sessions:
            if s.end > self.duration:
                raise ValueError(f"session of {s.user} ends at {s.end}, after the trace ({self.duration})")
        by_user: dict[str, list[Session]] = {}
        for s in self.sessions:
            by_user.setdefault(s.user, []).append(s)
        for user, sessions in by_user.items():  # one default server per user: sessions must not overlap
            sessions.sort(key=lambda s: s.start)
            for a, b in zip(sessions, sessions[1:]):
                if b.start < a.end:
                    raise ValueError(f"sessions of {user} overlap at {b.start}")
        return self

    def user(self, name: str) -> User:
        return next(u for u in self.users if u.name == name)


def load(path: str | Path) -> Trace:
    return Trace.model_validate(yaml.safe_load(Path(path).read_text()))


def dump(trace: Trace, path: str | Path | None = None) -> str:
    text = yaml.safe_dump(trace.model_dump(mode="json"), sort_keys=False, default_flow_style=None, width=120)
    if path:
        Path(path).write_text(text)
    return text


def scaled(trace: Trace, hours: float) -> Trace:
    """The first `hours` of the trace (a short trace for tests): later sessions/jobs dropped, the rest clipped."""
    end = hours * HOUR
    sessions = []
    for s in trace.sessions:
        if s.start >= end:
            continue
        active = [(a, min(b, end), u) for a, b, u in s.active if a < end]
        sessions.append(s.model_copy(update={"end": min(s.end, end), "active": active}))
    jobs = [j for j in trace.jobs if j.submit + j.runtime <= end]
    return Trace(duration=end, users=trace.users, sessions=sessions, jobs=jobs,
                 evictions=[e for e in trace.evictions if e.at < end])


# ---------------------------------------------------------------------------------------------- generator

#: The generator's parameters (docs/benchmarks.md lists them): times in hours of the day unless named _min.
DEFAULTS: dict[str, Any] = {
    "users": 12, "hours": 24.0, "arrive": 9.0, "arrive_sd": 0.75, "leave": 17.5, "leave_sd": 0.75,
    "lunch": 12.5, "lunch_min": 50, "active_min": 25, "idle_min": 15, "meeting_share": 0.15, "meeting_min": 75,
    "util_low": 0.15, "util_high": 0.8, "left_open_share": 0.35, "mig_share": 0.3, "jobs_per_user": 0.8,
    "job_hours": (1.0, 4.0), "checkpoint_min": 10, "evictions": 1, "eviction_pool": "gput4",
    "profiles": {"shared": "t4-shared", "mig": "a100-mig-1g10gb"}, "group": "data-science",
}


def _clip(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def _periods(rng: random.Random, start: float, end: float, p: dict[str, Any]) -> list[tuple[float, float, float]]:
    """Active periods between start and end: exponential bursts of work and idle gaps, some long gaps
    (meetings) and a lunch break, all longer than a profile's idle timeout would allow to keep."""
    out, t = [], start + rng.uniform(2, 10) * 60
    lunch_a = p["lunch"] * HOUR + rng.uniform(-20, 20) * 60
    lunch_b = lunch_a + p["lunch_min"] * 60
    while t < end - 5 * 60:
        length = _clip(rng.expovariate(1 / (p["active_min"] * 60)), 5 * 60, 3 * HOUR)
        b = min(end, t + length)
        if t < lunch_a < b:
            b = lunch_a
        if b - t >= 60:
            out.append((round(t), round(b), round(rng.uniform(p["util_low"], p["util_high"]), 2)))
        gap = (p["meeting_min"] * 60 * rng.uniform(0.8, 1.3) if rng.random() < p["meeting_share"]
               else rng.expovariate(1 / (p["idle_min"] * 60)))
        t = b + max(60.0, gap)
        if lunch_a <= t < lunch_b or (b == lunch_a):
            t = max(t, lunch_b)
    return out


def generate(seed: int = 1, **overrides: Any) -> Trace:
    """N data scientists over a working day and a night: arrive ~9:00, leave ~17:30, work in bursts with
    idle gaps, lunch and meetings; some leave their server open overnight; some submit batch jobs in
    the afternoon that run into the evening; `evictions` nodes lost at night. Same seed, same trace."""
    p = {**DEFAULTS, **overrides}
    unknown = set(overrides) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown generator parameters: {sorted(unknown)}")
    rng = random.Random(seed)
    duration = float(round(p["hours"] * HOUR))
    users, sessions, jobs = [], [], []
    for i in range(p["users"]):
        name = f"ds{i + 1:02d}"
        profile = p["profiles"]["mig"] if rng.random() < p["mig_share"] else p["profiles"]["shared"]
        users.append(User(name=name, groups=[p["group"]], vm_profile=profile))
        arrive = _clip(rng.gauss(p["arrive"], p["arrive_sd"]), 0, p["hours"] - 1) * HOUR
        leave = _clip(rng.gauss(p["leave"], p["leave_sd"]), arrive / HOUR + 1, p["hours"]) * HOUR
        arrive, leave = round(arrive), round(min(leave, duration))
        if leave - arrive < HOUR:
            continue
        active = _periods(rng, arrive, leave, p)
        left_open = rng.random() < p["left_open_share"]
        end = round(min(duration, leave + (6 * HOUR if left_open else 0)))
        sessions.append(Session(user=name, profile=profile, start=arrive, end=end, stop=not left_open,
                                active=active))
        n_jobs = math.floor(p["jobs_per_user"] + rng.random())
        for _ in range(n_jobs):
            submit = round(rng.uniform(arrive + HOUR, leave))
            runtime = round(rng.uniform(*p["job_hours"]) * HOUR)
            if submit + runtime > duration:
                continue
            jobs.append(Job(user=name, profile=profile, submit=submit, runtime=runtime,
                            checkpoint_interval=p["checkpoint_min"] * 60, util=round(rng.uniform(0.7, 1.0), 2)))
    night = [round(rng.uniform(19, 23) * HOUR) for _ in range(p["evictions"])]
    evictions = [Eviction(pool=p["eviction_pool"], at=t) for t in sorted(night) if t < duration]
    jobs.sort(key=lambda j: j.submit)
    return Trace(duration=duration, users=users, sessions=sessions, jobs=jobs, evictions=evictions)



#: A trace whose users spread over more pools than they share: four GPU pools of the example file, all
#: `min_nodes: 0` (the T4 time-sliced and MPS pools, the H100 and the spot A100), one user in two on a pool
#: alone most of the day. (profile, the JupyterHub group that may use it).
SPREAD = (("t4-shared", "data-science"), ("t4-mps", "teaching"), ("h100-full", "ml-research"),
          ("a100-spot", "ml-research"))


def spread(trace: Trace, assignments: tuple[tuple[str, str], ...] = SPREAD) -> Trace:
    """The same people and times, user i on assignments[i mod n] (profile, group) for their sessions, jobs and VM;
    evictions move to the spot pool of the assignments if any (pool names are the example file's)."""
    pick = {u.name: assignments[i % len(assignments)] for i, u in enumerate(trace.users)}
    users = [u.model_copy(update={"groups": [pick[u.name][1]], "vm_profile": pick[u.name][0]}) for u in trace.users]
    sessions = [s.model_copy(update={"profile": pick[s.user][0]}) for s in trace.sessions]
    jobs = [j.model_copy(update={"profile": pick[j.user][0]}) for j in trace.jobs]
    spot = "spota100" if any(p == "a100-spot" for p, _ in assignments) else None
    evictions = [e.model_copy(update={"pool": spot}) for e in trace.evictions] if spot else []
    return Trace(duration=trace.duration, users=users, sessions=sessions, jobs=jobs, evictions=evictions)
