"""Faults at unlucky moments for the day replay (`bench/day_replay.py --faults SEED`): what is broken, when,
and how long until it is healthy again.

SIMULATOR side: it breaks the dev cluster's and the dev hub's processes as an OOM kill, a node failure or a
network blip would (SIGKILL, then started again as its supervisor would: the hub restarts its managed
services and its proxy itself; the control plane's components and the hub are started again here, as a
kubelet restarts a static pod or a Deployment its pod), and measures recovery from outside, as a platform
team's probes would. The schedule is pure and seeded; `FaultRunner` applies it in a thread of its own, one
fault at a time, so the replay's clock never waits for a recovery.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

from jupyterhub_gpu.contract import CULLER_SERVICE, JOBS_SERVICE, KUEUE_ADMISSION_GATE, USAGE_COLLECTOR_SERVICE
from jupyterhub_gpu_dev.devhub import NAMESPACE

from .trace import HOUR, Trace

#: Every kind of fault, in the issue's words: the hub, its services, the control plane's controllers, the API
#: server, etcd paused, the proxy, a GPU node deleted under running pods, gpu-jobs' connections to the API
#: server dropped.
KINDS = ("hub", "gpu-jobs", "gpu-culler", "usage-collector", "kueue", "jobset", "kube-apiserver", "etcd-pause",
         "proxy", "gpu-node", "gpu-jobs-connections")
SERVICES = {"gpu-jobs": JOBS_SERVICE, "gpu-culler": CULLER_SERVICE, "usage-collector": USAGE_COLLECTOR_SERVICE}
COMPONENTS = {"kueue": "kueue", "jobset": "jobset", "kube-apiserver": "kube-apiserver"}
ETCD_PAUSE_S = 20.0
RECOVERY_TIMEOUT_S = 180.0
#: Wall seconds between two faults' injections (a recovery takes 1-30 s here): each fault is measured alone.
GAP_WALL_S = 30.0
#: Trace seconds the hub's kill may wait for a server queued at Kueue's gate (whose place must survive it).
QUEUED_WAIT_S = 2 * 3600.0


@dataclass(frozen=True)
class Fault:
    what: str
    at: float  # trace seconds


def hourly_load(trace: Trace) -> list[float]:
    """Per hour of the trace: active session periods and running jobs in it (hours of work overlapping it)."""
    hours = max(1, int(trace.duration // HOUR) + 1)
    load = [0.0] * hours

    def add(a: float, b: float) -> None:
        for h in range(max(0, int(a // HOUR)), min(hours, int(b // HOUR) + 1)):
            load[h] += max(0.0, min(b, (h + 1) * HOUR) - max(a, h * HOUR)) / HOUR

    for s in trace.sessions:
        for a, b, _ in s.active:
            add(a, b)
    for j in trace.jobs:
        add(j.submit, j.submit + j.runtime)
    return load


def busiest_window(trace: Trace, hours_needed: int) -> tuple[float, float]:
    """The consecutive `hours_needed` hours with the most work (trace seconds), the earliest of equals."""
    load = hourly_load(trace)
    n = max(1, min(hours_needed, len(load)))
    best = max(range(len(load) - n + 1), key=lambda h: (sum(load[h:h + n]), -h))
    return best * HOUR, (best + n) * HOUR


def schedule(seed: int, trace: Trace, speed: float, kinds: tuple[str, ...] = KINDS,
             gap_wall_s: float = GAP_WALL_S) -> list[Fault]:
    """Each kind once, in a seeded order at seeded times in the busiest hours, at least `gap_wall_s` wall
    seconds apart where the day is long enough at this speed, else spread over the whole day (pure: the same
    seed and trace give the same schedule)."""
    rng = random.Random(seed)
    gap = min(gap_wall_s * speed, trace.duration / max(1, len(kinds)))  # a fast replay: closer, inside the day
    span_needed = gap * len(kinds)
    start, end = busiest_window(trace, int(-(-span_needed // HOUR)) + 1)
    slack = max(0.0, (end - start) - span_needed)
    offsets = sorted(rng.uniform(0, slack) for _ in kinds)
    order = list(kinds)
    rng.shuffle(order)
    return [Fault(what, round(start + offset + i * gap, 1)) for i, (what, offset) in enumerate(zip(order, offsets))]


# ---------------------------------------------------------------------------------------------- processes
def _children(pid: int) -> list[Any]:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def service_pid(hub_pid: int, service: str) -> int | None:
    """The pid of a hub-managed service (its JUPYTERHUB_SERVICE_NAME), None when it does not run."""
    import psutil

    for p in _children(hub_pid):
        try:
            if p.environ().get("JUPYTERHUB_SERVICE_NAME") == service and p.status() != psutil.STATUS_ZOMBIE:
                return p.pid
        except psutil.Error:
            continue
    return None


def proxy_pid(hub_pid: int) -> int | None:
    import psutil

    for p in _children(hub_pid):
        try:
            if any("configurable-http-proxy" in part for part in p.cmdline()):
                return p.pid
        except psutil.Error:
            continue
    return None


def kill_tree(pid: int) -> None:
    """SIGKILL a process and everything it started, as a container's end does."""
    import psutil

    for p in [*_children(pid), psutil.Process(pid)]:
        try:
            p.kill()
        except psutil.Error:
            pass


def connections_to(pid: int, port: int) -> list[tuple[str, int]]:
    """The process's established TCP connections to `port`: (local address, local port)."""
    import psutil

    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return []
    return [(c.laddr.ip, c.laddr.port) for c in conns
            if c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr.port == port]


def drop_connections(pid: int, port: int) -> int:
    """Abort the process's connections to `port` (`ss -K`: the kernel ends them, ECONNABORTED on its side)."""
    dropped = 0
    for ip, local in connections_to(pid, port):
        r = subprocess.run(["ss", "-K", "src", ip, "sport", "=", f":{local}", "dport", "=", f":{port}"],
                           capture_output=True, text=True, timeout=10)
        dropped += r.returncode == 0
    return dropped


def wait_port_free(alive: Callable[[], bool], url: str, timeout: float = 15.0) -> None:
    """Until a killed process is gone and the port of `url` can be bound again (or `timeout`)."""
    import socket

    parsed = urlparse(url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((parsed.hostname or "127.0.0.1", parsed.port or 443))
                    return
                except OSError:
                    pass
        time.sleep(0.1)


def queued_servers(pods: list[dict]) -> dict[str, str]:
    """Server pods waiting at Kueue's admission gate in the hub namespace: pod name → uid."""
    return {p["metadata"]["name"]: p["metadata"].get("uid", "") for p in pods
            if p["metadata"].get("namespace") == NAMESPACE and not p["metadata"].get("deletionTimestamp")
            and any(g.get("name") == KUEUE_ADMISSION_GATE for g in p["spec"].get("schedulingGates") or [])}


def answers(url: str, timeout: float = 3.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------- runner
class FaultRunner:
    """Applies `faults` in a thread: waits for each one's trace time (and for the previous one's recovery),
    breaks the piece, polls until it is healthy again. `results`: {what, at, at_h, recovered_after_s, ...}.

    `stack` is the replay's Stack (hub, cluster root, kube); `node_fault()` is the driver's: it deletes a GPU
    node with its pods and returns a check that is true once what ran there runs again (or has ended)."""

    def __init__(self, faults: list[Fault], stack: Any, now: Callable[[], float],
                 node_fault: Callable[[], Callable[[], bool] | None], say=print):
        self.faults, self.stack, self.now, self.node_fault, self.say = faults, stack, now, node_fault, say
        self.results: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="faults", daemon=True)

    def start(self) -> "FaultRunner":
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=ETCD_PAUSE_S + 5)

    def _run(self) -> None:
        for fault in self.faults:
            while self.now() < fault.at:
                if self.stop.wait(0.2):
                    return
            queued = self._queued_before_hub() if fault.what == "hub" else None
            at = self.now()
            t0 = time.monotonic()
            try:
                check, detail = self.inject(fault.what)
                if queued is not None:
                    detail = {**detail, "queued_servers": queued}
            except Exception as e:  # noqa: BLE001 (a fault that could not be applied is reported, not raised)
                self.results.append({"what": fault.what, "at": round(at), "at_h": round(at / HOUR, 2),
                                     "recovered_after_s": None, "error": f"not applied: {e!r}"[:300]})
                continue
            paused = detail.get("paused_s", 0.0)  # etcd's pause is the fault itself, not its recovery
            recovered = None
            while not self.stop.is_set() and time.monotonic() - t0 < RECOVERY_TIMEOUT_S:
                try:
                    ok = check()
                except Exception:  # noqa: BLE001 (not yet)
                    ok = False
                if ok:  # from the kill (a restart done here counts), less a pause that was the fault
                    recovered = round(time.monotonic() - t0 - paused, 1)
                    break
                time.sleep(0.25)
            self.results.append({"what": fault.what, "at": round(at), "at_h": round(at / HOUR, 2),
                                 "recovered_after_s": recovered, **detail})
            self.say(f"[{at / HOUR:5.2f} h] fault {fault.what}: "
                     + (f"healthy again after {recovered} s" if recovered is not None else
                        f"NOT healthy within {RECOVERY_TIMEOUT_S:.0f} s") + (f" ({detail})" if detail else ""))

    def _queued_before_hub(self) -> dict[str, str]:
        """The hub is killed while a server waits in its team's queue where the trace has one within
        QUEUED_WAIT_S: the servers queued at the kill (pod → uid), whose place must survive the restart."""
        deadline = self.now() + QUEUED_WAIT_S
        while True:
            try:
                queued = queued_servers(self.stack.kube.list("v1", "Pod", NAMESPACE))
            except Exception:  # noqa: BLE001 (another fault's outage: look again)
                queued = {}
            if queued or self.now() >= deadline or self.stop.wait(0.2):
                return queued

    # ------------------------------------------------------------------ the faults
    def hub_ok(self) -> bool:
        url = self.stack.hub_url
        return answers(f"{url}/hub/api/") and answers(f"{url}/services/gpu-jobs/health")

    def inject(self, what: str) -> tuple[Callable[[], bool], dict[str, Any]]:
        """Break `what`; return the check that says it is healthy again, and what was done."""
        hub_pid = self.stack.hub.proc.pid
        if what == "hub":
            self.stack.restart_hub()  # SIGKILL of the hub and all it started, then started again (blocks)
            return self.hub_ok, {}
        if what in SERVICES:
            pid = service_pid(hub_pid, SERVICES[what])
            if pid is None:
                raise RuntimeError(f"{SERVICES[what]} is not running")
            os.kill(pid, signal.SIGKILL)

            def back() -> bool:
                new = service_pid(self.stack.hub.proc.pid, SERVICES[what])
                return new is not None and new != pid and self.hub_ok()
            return back, {"pid": pid}
        if what == "proxy":
            pid = proxy_pid(hub_pid)
            if pid is None:
                raise RuntimeError("the proxy is not the hub's child")
            os.kill(pid, signal.SIGKILL)
            return self.hub_ok, {"pid": pid}
        if what in COMPONENTS:
            self.stack.restart_component(COMPONENTS[what])
            return lambda: self.stack.component_healthy(COMPONENTS[what]) and self.hub_ok(), {}
        if what == "etcd-pause":
            pgid = self.stack.component_pid("etcd")
            os.killpg(pgid, signal.SIGSTOP)
            try:
                self.stop.wait(ETCD_PAUSE_S)
            finally:
                os.killpg(pgid, signal.SIGCONT)
            return lambda: self.stack.component_healthy("kube-apiserver") and self.hub_ok(), {"paused_s": ETCD_PAUSE_S}
        if what == "gpu-jobs-connections":
            pid = service_pid(hub_pid, JOBS_SERVICE)
            port = urlparse(self.stack.kube_server).port
            if pid is None or port is None:
                raise RuntimeError("gpu-jobs or the API server's port not found")
            dropped = drop_connections(pid, port)
            return lambda: bool(connections_to(pid, port)) and self.hub_ok(), {"connections_dropped": dropped}
        if what == "gpu-node":
            check = self.node_fault()
            if check is None:
                raise RuntimeError("no GPU node with pods to delete")
            return check, {}
        raise ValueError(f"unknown fault {what!r}")


def cluster_records(root: Path) -> dict[str, Any]:
    from jupyterhub_gpu_dev import procs
    from jupyterhub_gpu_dev.components import Layout

    return procs.Record.load_all(Layout(root).run)
