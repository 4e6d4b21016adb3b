"""The day replay's loop: trace events in compressed time through the real hub, gpu-jobs/Kueue and culler,
with the autoscaler MODEL adding and removing KWOK nodes (devcluster/jupyterhub_gpu_dev/replay/autoscaler.py).

Clock: trace seconds = wall seconds since the start × speed. The real components' own latencies (a spawn,
a scheduling decision) are NOT compressed: a session's start wait is the model's provisioning time (trace
seconds, when its pod had to wait for a new node) plus the real wall seconds the hub, scheduler and dev agent
took to make the server ready. A job's queue wait is trace seconds from submit to its pod bound (Kueue's
admission latency is compressed with it, so it is an upper bound).
"""
from __future__ import annotations

import math
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests
import yaml

from jupyterhub_gpu.contract import IDEMPOTENCY_KEY_HEADER, JOBS_ACCESS_SCOPE
from jupyterhub_gpu.model.validation import parse_profiles
from jupyterhub_gpu_dev.devhub import NAMESPACE
from jupyterhub_gpu_dev.nodes import AGENTPOOL, node_manifest, node_name, with_system_pool

from . import accounting, invariants, notified
from .autoscaler import AutoscalerModel, pool_models
from .faults import Fault, FaultRunner
from .stack import Stack, scaled_profiles
from .trace import HOUR, Trace

TICK_S = 0.2  # wall seconds between observations
SAMPLE_S = 300  # trace seconds between time-series samples
NOTIFY_WAIT_S = 60.0  # wall seconds the end waits for the last jobs' notifications

#: The job's notebook: `steps` checkpointed steps of `step_s` wall seconds; resumes from its checkpoint.
JOB_NB = {"nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "cells": [{"cell_type": "code", "id": "p", "metadata": {"tags": ["parameters"]},
                     "source": "steps = 1\nstep_s = 1.0", "outputs": [], "execution_count": None},
                    {"cell_type": "code", "id": "s", "metadata": {}, "outputs": [], "execution_count": None,
                     "source": "import os, pathlib, time\nck = pathlib.Path(os.environ['CHECKPOINT_DIR']) / 'step'\n"
                               "start = int(ck.read_text()) if ck.exists() else 0\nprint('resumed at', start)\n"
                               "for i in range(start, steps):\n    time.sleep(step_s)\n    ck.write_text(str(i + 1))\n"
                               "print('done', steps)"}]}


@dataclass
class Spawn:
    user: str
    session: int
    req_sim: float
    req_wall: float
    wait: float | None = None
    node_s: float = 0.0  # of the wait: the model's provisioning of a new node (trace seconds)


@dataclass
class State:
    servers: dict[str, dict] = field(default_factory=dict)  # user → hub's server model
    spawns: list[Spawn] = field(default_factory=list)
    open_spawn: dict[str, Spawn] = field(default_factory=dict)
    served: dict[tuple[int, int], bool] = field(default_factory=dict)  # (session, period) → served
    session_ever_ready: set[int] = field(default_factory=set)
    stopped: set[int] = field(default_factory=set)
    catch_up: dict[str, tuple[float, float]] = field(default_factory=dict)  # user → (until wall, GPU util)
    jobs: dict[int, dict] = field(default_factory=dict)  # trace index → {name, submit_sim, bound_sim, state,...}
    node_wall: dict[str, float] = field(default_factory=dict)  # node → wall time it joined the cluster
    samples: list[dict] = field(default_factory=list)
    evicted: int = 0
    pods: list[dict] = field(default_factory=list)  # the last list that could be read
    seen: dict[str, dict] = field(default_factory=dict)  # uid → {ns, pod, bound, gone (wall)}: for the showback check
    step_errors: dict[str, int] = field(default_factory=dict)  # a step that failed in a fault, per step
    heard: dict[str, int] = field(default_factory=dict)  # what people were answered that was not a success
    node_fault: Future | None = None  # asked by the fault thread, done by the loop
    lost: dict[str, int] = field(default_factory=dict)  # job → its checkpoint's step when its node was lost


class Replay:
    def __init__(self, trace: Trace, profiles: dict[str, Any], speed: float, root: Path, culling: bool = True,
                 provision_delay: float = 240, scale_down_after: float = 600, say=print, weekday: int = 0,
                 faults: list[Fault] | None = None):
        self.trace, self.speed, self.root, self.say, self.faults = trace, speed, root, say, faults
        self.fault_runner: FaultRunner | None = None
        self.data = scaled_profiles(profiles, speed)
        self.cfg = parse_profiles(profiles)  # unscaled: costs, pools, slots
        self.path = root / "profiles.yaml"
        root.mkdir(parents=True, exist_ok=True)
        self.path.write_text(yaml.safe_dump(self.data, sort_keys=False))
        self.model = AutoscalerModel(pool_models(self.cfg, weekday), provision_delay, scale_down_after, name=node_name)
        nodes = {n: (self.model.pools[n].minimum(0.0) if n in self.model.pools else max(1, p.min_nodes))
                 for n, p in with_system_pool(self.cfg).items()}
        groups = {u.name: u.groups for u in trace.users}
        self.stack = Stack(root, self.path, nodes, groups, speed, culling, say)
        self.st = State()
        self.tokens: dict[str, str] = {}
        self.calls = ThreadPoolExecutor(8)  # hub and gpu-jobs calls must not hold the clock up

    # ------------------------------------------------------------------ plumbing
    def now(self) -> float:
        return (time.monotonic() - self.t0) * self.speed

    def api(self, method: str, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", 60)
        return requests.request(method, f"{self.stack.hub_url}/hub/api{path}",
                                headers={"Authorization": f"token {self.stack.token}"}, **kw)

    def user_token(self, user: str) -> str:
        if user not in self.tokens:
            r = self.api("POST", f"/users/{quote(user)}/tokens", json={"scopes": [JOBS_ACCESS_SCOPE], "note": "replay"})
            r.raise_for_status()
            self.tokens[user] = r.json()["token"]
        return self.tokens[user]

    # ------------------------------------------------------------------ run
    def run(self) -> dict[str, Any]:
        try:
            self.stack.up()
            r = self.api("POST", "/users", json={"usernames": [u.name for u in self.trace.users]})
            assert r.status_code in (201, 409), r.text
            for u in self.trace.users:  # logged in once: the DevAuthenticator gives their groups
                from jupyterhub_gpu_dev.devhub import login
                login(self.stack.hub_url, u.name)
                self.user_token(u.name)
            for user in sorted({j.user for j in self.trace.jobs}):  # they want to hear about their jobs
                notified.opt_in(f"{self.stack.hub_url}/services/gpu-jobs", self.user_token(user))
            for pool, name in self.model.start(0.0):
                self.st.node_wall[name] = time.monotonic()
            self.say(f"replaying {self.trace.duration / HOUR:.1f} h at ×{self.speed:g} "
                     f"(≈ {self.trace.duration / self.speed / 60:.1f} min)")
            return self._loop()
        finally:
            if self.fault_runner:
                self.fault_runner.close()
            self.calls.shutdown(wait=False, cancel_futures=True)
            self.stack.down()

    def _loop(self) -> dict[str, Any]:
        tr, st = self.trace, self.st
        self.t0 = time.monotonic()
        next_sample, next_poll, next_activity = 0.0, 0.0, 0.0
        evictions = sorted(tr.evictions, key=lambda e: e.at)
        drain_until = tr.duration + 4 * HOUR  # jobs still running at the end may finish (costs keep counting)
        if self.faults:
            self.fault_runner = FaultRunner(self.faults, self.stack, self.now, self._ask_node_fault, self.say).start()
        while True:
            now, wall = self.now(), time.monotonic()
            pods = self._guarded(self._pods)
            pods = self.st.pods if pods is None else pods
            self.st.pods = pods
            self._guarded(self._autoscale, now, pods)
            while evictions and evictions[0].at <= now:
                self._guarded(self._evict, evictions.pop(0).pool, now, pods)
            if self.st.node_fault is not None:
                self._node_fault(now, pods)
            if wall >= next_poll:
                self._guarded(self._poll_servers, now)
                next_poll = wall + 0.5
            self._guarded(self._sessions, now)
            self._guarded(self._jobs, now, pods)
            self._guarded(self._dcgm, now, pods)
            if wall >= next_activity:
                self._guarded(self._activity, now)
                next_activity = wall + 2.0
            if now >= next_sample:
                self._sample(now, pods)
                next_sample += SAMPLE_S
            done = all(j.get("state") in ("Succeeded", "Failed") for j in st.jobs.values()) \
                and len(st.jobs) == len(tr.jobs) and not st.open_spawn and all(
                    i in st.stopped for i, s in enumerate(tr.sessions) if s.stop)
            if now >= tr.duration and (done or now >= drain_until) and not self._faults_pending():
                break
            time.sleep(TICK_S)
        return self._summary(now)

    # ------------------------------------------------------------------ observation
    def _pods(self) -> list[dict]:
        namespaces = {NAMESPACE, *self._team_namespaces()}
        out = [p for p in self.stack.kube.list("v1", "Pod") if p["metadata"]["namespace"] in namespaces]
        alive = [p for p in out if not p["metadata"].get("deletionTimestamp")
                 and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        invariants.record_pods(self.st.seen, alive, time.monotonic())
        return alive

    def _guarded(self, step, *args):
        """A step of the loop; in a faulted replay a failed one (the hub, gpu-jobs or the API server away) is
        counted and tried again at the next tick, as a person would retry."""
        if not self.faults:
            return step(*args)
        try:
            return step(*args)
        except Exception:  # noqa: BLE001 (whatever the outage raises: counted, retried)
            self.st.step_errors[step.__name__] = self.st.step_errors.get(step.__name__, 0) + 1
            return None

    def _faults_pending(self) -> bool:
        runner = self.fault_runner
        return bool(runner and runner.thread.is_alive() and len(runner.results) < len(runner.faults))

    def _ask_node_fault(self):
        """From the fault thread: the loop deletes a GPU node with pods at its next tick (the model's state is
        the loop's); returns the check that what ran there runs again."""
        self.st.node_fault = Future()
        return self.st.node_fault.result(timeout=60)

    def _node_fault(self, now: float, pods: list[dict]) -> None:
        asked, self.st.node_fault = self.st.node_fault, None
        try:
            asked.set_result(self._delete_busy_node(now, pods))
        except Exception as e:  # noqa: BLE001 (the fault thread reports it)
            asked.set_exception(e)

    def _delete_busy_node(self, now: float, pods: list[dict]):
        """Delete the GPU node running the most servers and jobs, with its pods (a node lost under them)."""
        on: dict[str, list[dict]] = {}
        for p in pods:
            rec = self.model.nodes.get(p["spec"].get("nodeName") or "")
            if rec and rec["created"]:
                on.setdefault(p["spec"]["nodeName"], []).append(p)
        if not on:
            return None
        name = max(sorted(on), key=lambda n: len(on[n]))
        jobs = {p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") for p in on[name]} - {None}
        users = {p["metadata"]["name"].removeprefix("jupyter-") for p in on[name]
                 if p["metadata"]["namespace"] == NAMESPACE}
        for job in jobs:  # the step each job's checkpoint had reached: its rerun must resume there or later
            user = next((self.trace.jobs[j].user for j, rec in self.st.jobs.items() if rec.get("name") == job), None)
            if user:
                self.st.lost[job] = invariants.checkpoint_step(self.stack.hub.share, user, job)
        for p in on[name]:
            self.stack.kube.delete({"apiVersion": "v1", "kind": "Pod", "metadata": p["metadata"]})
        self.stack.kube.delete({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        self.model.evict(name, now)
        self.st.evicted += 1
        self.say(f"[{now / HOUR:5.2f} h] fault: deleted node {name} under {len(on[name])} pods")
        return lambda: invariants.node_recovered(name, jobs, users, self.st, self.trace, self.now())

    def _team_namespaces(self) -> list[str]:
        return sorted({t.namespace for t in self.cfg.teams.values()})

    def _pool_of(self, pod: dict) -> str | None:
        return (pod["spec"].get("nodeSelector") or {}).get(AGENTPOOL)

    def _autoscale(self, now: float, pods: list[dict]) -> None:
        pending: dict[str, int] = {}
        pods_on: dict[str, int] = {}
        for p in pods:
            node = p["spec"].get("nodeName")
            if node:
                pods_on[node] = pods_on.get(node, 0) + 1
            elif self._pool_of(p) in self.model.pools:
                pending[self._pool_of(p)] = pending.get(self._pool_of(p), 0) + 1
        d = self.model.step(now, pending, pods_on)
        for pool, name in d.create:
            index = int(name.rsplit("vmss", 1)[1])
            self.stack.kube.create(node_manifest(pool, self.cfg.pools[pool], index))
            self.st.node_wall[name] = time.monotonic()
        for name in d.remove:
            self.stack.kube.delete({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})

    def _evict(self, pool: str, now: float, pods: list[dict]) -> None:
        """A node of `pool` is taken away with its pods (the one running a job if any)."""
        nodes = [n for n, rec in self.model.nodes.items() if rec["pool"] == pool and rec["created"]]
        if not nodes:
            return
        busy = [p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName") in nodes
                and p["metadata"]["namespace"] != NAMESPACE]
        name = busy[0] if busy else nodes[0]
        for p in pods:
            if p["spec"].get("nodeName") == name:
                self.stack.kube.delete({"apiVersion": "v1", "kind": "Pod", "metadata": p["metadata"]})
        self.stack.kube.delete({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        self.model.evict(name, now)
        self.st.evicted += 1
        self.say(f"[{now / HOUR:5.2f} h] evicted node {name}")

    def _poll_servers(self, now: float) -> None:
        r = self.api("GET", "/users", params={"state": "active", "limit": 500})
        if not r.ok:
            invariants.heard(self.st.heard, "the hub's server list", r)
            return
        items = r.json()
        items = items["items"] if isinstance(items, dict) else items
        self.st.servers = {u["name"]: u["servers"][""] for u in items if "" in (u.get("servers") or {})}
        for user, sp in list(self.st.open_spawn.items()):
            server = self.st.servers.get(user)
            if server and server.get("ready"):
                sp.wait = self._start_wait(sp, user)
                del self.st.open_spawn[user]
                self.st.session_ever_ready.add(sp.session)
                self._catch_up(sp, now)
            elif not server and time.monotonic() - sp.req_wall > 30:  # the spawn failed or was stopped
                del self.st.open_spawn[user]

    def _catch_up(self, sp: Spawn, now: float) -> None:
        """The user did not stop working while the server started: the busy time that passed in the meantime
        (trace seconds, more than in reality since the real start-up is not compressed) is done now, late,
        with activity reports and a busy GPU, so that neither work nor the culler's view is distorted."""
        s = self.trace.sessions[sp.session]
        missed = [(max(a, sp.req_sim), min(b, now), u) for a, b, u in s.active if a < now and b > sp.req_sim]
        busy = sum(b - a for a, b, _ in missed)
        if busy > 0:
            self.st.catch_up[sp.user] = (time.monotonic() + busy / self.speed, max(u for *_, u in missed))

    def _catching_up(self, user: str) -> float | None:
        until, util = self.st.catch_up.get(user, (0.0, 0.0))
        return util if time.monotonic() < until else None

    def _start_wait(self, sp: Spawn, user: str) -> float:
        """Provisioning the model made the pod wait (trace s) + the real components' wall seconds after it."""
        pod = next((p for p in self._pods() if p["metadata"]["name"] == f"jupyter-{user}"), None)
        node = pod and pod["spec"].get("nodeName")
        rec = self.model.nodes.get(node) if node else None
        ready_wall = time.monotonic()
        if rec and rec["asked"] >= sp.req_sim - 1e-6:
            sp.node_s = rec["ready_at"] - sp.req_sim
            return sp.node_s + max(0.0, ready_wall - self.st.node_wall.get(node, sp.req_wall))
        return ready_wall - sp.req_wall

    # ------------------------------------------------------------------ the trace's people
    def _sessions(self, now: float) -> None:
        st = self.st
        for i, s in enumerate(self.trace.sessions):
            if now < s.start or i in st.stopped:
                continue
            user = s.user
            server = st.servers.get(user)
            if server and server.get("ready"):  # periods that began are served (late, if it took long to start)
                for k, (a, _, _) in enumerate(s.active):
                    if a <= now:
                        st.served.setdefault((i, k), True)
            nxt = next((t.start for t in self.trace.sessions if t.user == user and t.start > s.start), math.inf)
            unfinished = user in st.open_spawn or self._catching_up(user) is not None  # the user stays until done
            if now >= s.end and (s.stop or now >= nxt) and not unfinished:
                if s.stop:
                    self.calls.submit(self._stop_server, user)
                st.stopped.add(i)
                continue
            if now >= s.end:  # left open: the culler's business
                continue
            first = i not in st.session_ever_ready and user not in st.open_spawn
            in_period = any(a <= now < b for a, b, _ in s.active)
            if not server and user not in st.open_spawn and (first or in_period):
                self.calls.submit(self.api, "POST", f"/users/{quote(user)}/server", json={"profile": s.profile})
                sp = Spawn(user, i, now, time.monotonic())  # a refused spawn is dropped by _poll_servers
                st.spawns.append(sp)
                st.open_spawn[user] = sp
                st.servers[user] = {"ready": False}

    def _stop_server(self, user: str, patience_s: float = 180) -> None:
        """The user stops their server, and tries again while the hub is away (restarting, its proxy gone)."""
        deadline = time.monotonic() + patience_s
        while True:
            try:
                r = self.api("DELETE", f"/users/{quote(user)}/server")
            except requests.RequestException as e:
                r = e
            if not invariants.transient(r) or time.monotonic() > deadline:
                return
            invariants.heard(self.st.heard, "stop", r)
            time.sleep(1.0)

    def _activity(self, now: float) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        for s in self.trace.sessions:
            if not (self.st.servers.get(s.user) or {}).get("ready") and s.user not in self.st.open_spawn:
                continue
            if s.start <= now < s.end and any(a <= now < b for a, b, _ in s.active) \
                    or self._catching_up(s.user) is not None or s.user in self.st.open_spawn:
                self.calls.submit(self.api, "POST", f"/users/{quote(s.user)}/activity",
                                  json={"last_activity": stamp, "servers": {"": {"last_activity": stamp}}})

    def _jobs(self, now: float, pods: list[dict]) -> None:
        st = self.st
        for j, job in enumerate(self.trace.jobs):
            if j not in st.jobs and job.submit <= now:
                st.jobs[j] = {"name": None, "submit": now, "bound": None, "state": "Queued", "checked": 0.0,
                              "preempted": 0, "future": self._submit(j), "names": set(), "tries": 1}
        for j, rec in st.jobs.items():
            if rec["name"] is None:
                if rec.get("refused") or not rec["future"].done():
                    continue
                r = rec["future"].result()
                if isinstance(r, Exception) or r.status_code not in (200, 201):
                    invariants.heard(st.heard, "submit", r)
                    if not self.faults:
                        raise RuntimeError(f"gpu-jobs refused job {j}: {r!r} {getattr(r, 'text', '')}")
                    if not invariants.transient(r):  # reported as a job not finished, not retried
                        rec.update(state="Failed", refused=f"{getattr(r, 'status_code', r)}")
                        continue
                    rec["future"] = self.calls.submit(self._post_job, j, 1.0)  # the same request, the same key
                    rec["tries"] += 1
                    continue
                rec["name"] = r.json()["name"]
                rec["names"].add(rec["name"])
            if rec["bound"] is None and any(p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name")
                                            == rec["name"] and p["spec"].get("nodeName") for p in pods):
                rec["bound"] = now
            if rec["state"] not in ("Succeeded", "Failed") and time.monotonic() - rec["checked"] > 1.0:
                rec["checked"] = time.monotonic()
                user = self.trace.jobs[j].user
                r = requests.get(f"{self.stack.hub_url}/services/gpu-jobs/jobs/{rec['name']}", timeout=60,
                                 headers={"Authorization": f"token {self.user_token(user)}"})
                if r.ok:
                    s = r.json()
                    rec["state"], rec["preempted"] = s["state"], int(s.get("preempted") or 0)
                else:
                    invariants.heard(st.heard, "a job's status", r)

    def _submit(self, j: int) -> Future:
        return self.calls.submit(self._post_job, j, 0.0)

    def _post_job(self, j: int, after: float):
        """POST /jobs under the job's Idempotency-Key (a retry after a lost answer gets the same job); the
        exception instead of raising, for the loop to decide."""
        time.sleep(after)
        job = self.trace.jobs[j]
        steps = max(1, math.ceil(job.runtime / job.checkpoint_interval))
        body = {"profile": job.profile, "notebook_path": f"work/replay-{j}.ipynb", "notebook": JOB_NB,
                "parameters": {"steps": steps, "step_s": job.runtime / steps / self.speed}}
        try:
            return requests.post(f"{self.stack.hub_url}/services/gpu-jobs/jobs", json=body, timeout=60,
                                 headers={"Authorization": f"token {self.user_token(job.user)}",
                                          IDEMPOTENCY_KEY_HEADER: f"replay-job-{j:04d}"})
        except requests.RequestException as e:
            return e

    def _dcgm(self, now: float, pods: list[dict]) -> None:
        """SIMULATED DCGM: a session pod's GPU is busy at the trace's level in active periods; a job's while it runs."""
        alive = set()
        util_of_job = {rec["name"]: self.trace.jobs[j].util for j, rec in self.st.jobs.items()}
        for p in pods:
            ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
            if not p["spec"].get("nodeName"):
                continue
            alive.add((ns, name))
            if ns == NAMESPACE:
                user = name.removeprefix("jupyter-")
                busy = [u for s in self.trace.sessions if s.user == user for a, b, u in s.active if a <= now < b]
                late = self._catching_up(user)
                self.stack.dcgm.set(ns, name, max(busy + [late or 0.0, 0.01]))
            else:
                job = p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name")
                self.stack.dcgm.set(ns, name, util_of_job.get(job, 0.0))
        self.stack.dcgm.keep_only(alive)

    def _sample(self, now: float, pods: list[dict]) -> None:
        counts = {pool: self.model.count(pool) for pool in self.model.pools}
        gpus = sum(self.model.count(p) * self.cfg.pools[p].gpu.count_per_node for p in self.model.pools)
        demand = 0.0
        for s in self.trace.sessions:
            if (self.st.servers.get(s.user) or {}).get("ready"):
                busy = sum(u for a, b, u in s.active if a <= now < b) or (self._catching_up(s.user) or 0.0)
                demand += busy * accounting.gpu_share(self.cfg, s.profile)
        for j, rec in self.st.jobs.items():
            if rec["bound"] is not None and rec["state"] not in ("Succeeded", "Failed"):
                job = self.trace.jobs[j]
                demand += job.util * accounting.gpu_share(self.cfg, job.profile)
        self.st.samples.append({"t": round(now), "nodes": counts, "gpus": gpus, "gpu_demand": round(demand, 3),
                                "servers": sum(1 for v in self.st.servers.values() if v.get("ready")),
                                "pods": len(pods)})

    # ------------------------------------------------------------------ result
    def job_records(self) -> list[dict[str, Any]]:
        """Each submitted job as the notification check reads it: name, owner, last state, bound, preempted."""
        return [{"name": rec.get("name"), "user": self.trace.jobs[j].user, "state": rec.get("state"),
                 "bound": rec.get("bound"), "preempted": rec.get("preempted")} for j, rec in self.st.jobs.items()]

    def _summary(self, end: float) -> dict[str, Any]:
        tr, st = self.trace, self.st
        served = [all(st.served.get((i, k)) for k in range(len(s.active))) if s.active else i in st.session_ever_ready
                  for i, s in enumerate(tr.sessions)]
        jobs_done = [st.jobs.get(j, {}).get("state") == "Succeeded" for j in range(len(tr.jobs))]
        waits = [sp.wait for sp in st.spawns if sp.wait is not None]
        qwaits = [rec["bound"] - rec["submit"] for rec in st.jobs.values() if rec["bound"] is not None]
        preempted = sum(1 for rec in st.jobs.values() if rec["preempted"])
        resumed = sum(1 for rec in st.jobs.values() if rec["preempted"] and rec["state"] == "Succeeded")
        shared = accounting.shared_summary(self.cfg, tr, self.model.node_seconds(end), served, jobs_done, waits,
                                           qwaits, waited_threshold=60, preempted=preempted, resumed=resumed)
        shared["replay_end_h"] = round(end / HOUR, 2)
        node_waits = [sp.node_s for sp in st.spawns if sp.wait is not None]
        shared["start_wait_node_p50_s"] = accounting.percentile(node_waits, 0.5)
        shared["start_wait_node_p90_s"] = accounting.percentile(node_waits, 0.9)
        shared["nodes_evicted"] = st.evicted
        shared["spawns_unfinished"] = len(st.open_spawn)
        log = self.stack.hub.log_path.read_text(errors="replace") if self.stack.hub else ""
        shared["servers_culled"] = len(re.findall(r"DELETE /hub/api/users/[^/]+/server \(gpu-culler@", log))
        if self.fault_runner is not None or self.faults is not None:
            shared["faults"] = self.fault_runner.results if self.fault_runner else []
        notified.await_delivered(self.job_records, self.stack.webhooks, NOTIFY_WAIT_S)
        shared["invariants"] = invariants.gather(self, served)
        shared["step_errors"] = dict(st.step_errors)
        shared["answers_heard"] = dict(sorted(st.heard.items(), key=lambda kv: -kv[1]))

        return {"shared": shared, "samples": st.samples,
                "start_waits_s": [round(w, 1) for w in waits], "queue_waits_s": [round(w, 1) for w in qwaits]}
