"""What a crashed run left behind in a dev cluster state folder, and how to tell it is ours.

A process counts as ours only by proof: its pid record (pid + start time from /proc), the OWNER_ENV
mark every process started for the folder inherits (components, the hub and what it starts, the dev
agent and its pods), or, for a listener on a port the folder recorded, a command line equal to a
recorded one. A stranger on a recorded port is named, never killed.
"""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

import psutil

from . import procs
from .components import Layout

#: `gpuhub dev` writes who it is here (run/dev.json) while it runs on this cluster.
DEV_INFO = "dev.json"


def write_dev_info(root: Path, started_cluster: bool, state_dir: Path,
                   processes: list[psutil.Process] = (), ports: dict[str, int] | None = None) -> None:
    """`gpuhub dev` records itself and what it started (pid, start time, command line; the ports they
    listen on), so that after a crash `status` and `down` know what it left. Services the hub starts
    get a filtered environment without the OWNER_ENV mark: their record is how they are found."""
    me = os.getpid()
    recorded = []
    for p in processes:
        try:
            recorded.append({"pid": p.pid, "start_time": procs.start_time(p.pid), "argv": p.cmdline()})
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    info = {"pid": me, "start_time": procs.start_time(me), "started_cluster": started_cluster,
            "state_dir": str(state_dir), "processes": recorded, "ports": ports or {}}
    run = Layout(Path(root)).run
    run.mkdir(parents=True, exist_ok=True)
    (run / DEV_INFO).write_text(json.dumps(info, indent=1))


def forget_dev_info(root: Path) -> None:
    (Layout(Path(root)).run / DEV_INFO).unlink(missing_ok=True)


def dev_info(layout: Layout) -> dict[str, Any] | None:
    try:
        return json.loads((layout.run / DEV_INFO).read_text())
    except (OSError, ValueError):
        return None


def dev_alive(info: dict[str, Any] | None) -> bool:
    """The `gpuhub dev` that wrote `info` still runs (same pid and start time)."""
    return bool(info) and procs.running(info["pid"], info.get("start_time", ""))


def recorded_ports(layout: Layout) -> dict[int, str]:
    """Port → what used it, from the cluster's and `gpuhub dev`'s records."""
    out: dict[int, str] = {}
    try:
        ports = json.loads((layout.run / "cluster.json").read_text())["ports"]
        out.update({port: name for name, port in ports.items()})
    except (OSError, ValueError, KeyError):
        pass
    out.update({port: name for name, port in ((dev_info(layout) or {}).get("ports") or {}).items()})
    return out


def busy(layout: Layout) -> bool:
    """An `up` or `down` is working on this folder right now (it holds the lock)."""
    if not (layout.root / "lock").exists():
        return False
    with (layout.root / "lock").open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def recorded_argv_matches(pid: int, records: dict[str, procs.Record]) -> bool:
    try:
        cmd = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return any(cmd == r.argv for r in records.values())


def unrecorded(layout: Layout) -> list[psutil.Process]:
    """Ours but not a component: marked processes, processes `gpuhub dev` recorded (same pid and start
    time), and listeners on recorded ports whose command line is a recorded component's."""
    records = procs.Record.load_all(layout.run)
    recorded = {r.pid for r in records.values()}
    found = {p.pid: p for p in procs.owned(layout.root) if p.pid not in recorded}
    for entry in (dev_info(layout) or {}).get("processes") or []:
        if entry["pid"] not in found and procs.running(entry["pid"], entry["start_time"]):
            try:
                found[entry["pid"]] = psutil.Process(entry["pid"])
            except psutil.NoSuchProcess:
                continue
    for port, pid in procs.listeners(set(recorded_ports(layout))).items():
        if pid and pid not in recorded and pid not in found and recorded_argv_matches(pid, records):
            found[pid] = psutil.Process(pid)
    return list(found.values())


def find(layout: Layout) -> list[psutil.Process]:
    """What nothing running will stop: components of a start that never finished, a cluster whose
    `gpuhub dev` is gone, and whatever that `gpuhub dev` started (hub, proxy, services, agent, pods)."""
    dev = dev_info(layout)
    alive_dev = dev_alive(dev)
    complete = (layout.run / "cluster.json").exists()
    orphaned_cluster = bool(dev) and not alive_dev and bool(dev.get("started_cluster"))
    components = [r for r in procs.Record.load_all(layout.run).values() if procs.alive(r)]
    out: list[psutil.Process] = []
    if components and (orphaned_cluster or not complete):
        for r in components:
            try:
                out.append(psutil.Process(r.pid))
            except psutil.NoSuchProcess:
                continue
    serving = set() if orphaned_cluster or not complete else {p.pid for p in live_node_shims(layout)}
    for p in unrecorded(layout):
        try:
            if alive_dev and (p.pid == dev["pid"] or dev["pid"] in {a.pid for a in p.parents()}):
                continue  # a running `gpuhub dev` still owns it
        except psutil.NoSuchProcess:
            continue
        if p.pid in serving:
            continue  # a running real node's container: its containerd started the shim, which outlives nobody
        out.append(p)
    return out


def live_node_shims(layout: Layout) -> list[psutil.Process]:
    """The containerd shims of real nodes whose containerd still runs: a live node's containers (they re-parent to
    init, so no running process is their ancestor, yet they carry the owner mark containerd passed on)."""
    from .realnodes import recorded, shim_processes

    records = procs.Record.load_all(layout.run)
    live = [Path(n["root"]) for n in recorded(layout)
            if (r := records.get(f"{n['netns']}-containerd")) is not None and procs.alive(r)]
    return shim_processes(live) if live else []


def strangers_on_ports(layout: Layout, ports: dict[int, str]) -> list[str]:
    """Lines naming listeners on recorded ports that are not ours (left alone)."""
    return [f"port {port} ({ports[port]}) is in use by {'pid %s' % pid if pid else 'another program'}, "
            "which this cluster did not start: left alone"
            for port, pid in procs.listeners(set(ports)).items()]
