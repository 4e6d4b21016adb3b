"""Detached component processes, recorded by pid so that only what we started is ever stopped.

Each process gets its own session (and process group), so it outlives the `gpuhub cluster up`
that started it and ignores the terminal's Ctrl-C. A record holds the pid and the process start
time from /proc, so a recycled pid is never mistaken for ours.
"""
from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from . import stopping

#: Environment a component must not inherit: it would make client-go use in-cluster config.
_DROP_ENV = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG")
#: Every process started for a state folder carries its path here (children inherit it), so `down`
#: can tell ours from a stranger's after a crash lost a pid record.
OWNER_ENV = "GPUHUB_DEVCLUSTER_ROOT"


def owner_mark(root: Path | str) -> dict[str, str]:
    """The environment entry that marks a process as started for the state folder `root`."""
    return {OWNER_ENV: str(Path(root).resolve())}


@dataclass
class Record:
    name: str
    pid: int
    start_time: str
    argv: list[str]
    log: str
    health_url: str

    def save(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / f"{self.name}.pid.json").write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load_all(cls, run_dir: Path) -> dict[str, "Record"]:
        out = {}
        for f in sorted(run_dir.glob("*.pid.json")):
            try:
                r = cls(**json.loads(f.read_text()))
            except (ValueError, TypeError):
                continue
            out[r.name] = r
        return out

    def forget(self, run_dir: Path) -> None:
        (run_dir / f"{self.name}.pid.json").unlink(missing_ok=True)


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state is [0], start time is [19])."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()


def start_time(pid: int) -> str:
    fields = _stat(pid)
    return fields[19] if fields else ""


def alive(rec: Record) -> bool:
    """The recorded process still runs (not a zombie, not a recycled pid)."""
    return running(rec.pid, rec.start_time)


def running(pid: int, started: str) -> bool:
    """Process `pid` runs and started at `started` (so it is not a recycled pid); zombies are reaped."""
    fields = _stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        _reap(pid)
        return False
    return fields[19] == started


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def probe(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 2.0) -> bool:
    """True when a health endpoint answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx if url.startswith("https") else None) as r:
            return r.status == 200
    except (OSError, ValueError):
        return False


def spawn(name: str, argv: list[str], log: Path, cwd: Path, health_url: str,
          run_dir: Path | None = None) -> tuple[Record, subprocess.Popen]:
    """Start a component in its own session, marked with OWNER_ENV=cwd; its record is saved in `run_dir`
    before a Ctrl-C can interrupt (see stopping.critical)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
    env.update(owner_mark(cwd))
    with log.open("ab") as out:
        out.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} started by gpuhub devcluster:\n# {' '.join(argv)}\n"
                  .encode())
        out.flush()
        with stopping.critical():
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd,
                                    env=env, start_new_session=True)
            rec = Record(name, proc.pid, start_time(proc.pid), argv, str(log), health_url)
            if run_dir is not None:
                rec.save(run_dir)
    return rec, proc


def stop(records: list[Record], run_dir: Path | None = None, grace: float = 10.0) -> list[str]:
    """SIGTERM each process group (in the order given), wait, SIGKILL what is left; forget the records."""
    targets = [r for r in records if alive(r)]
    for r in targets:
        _signal(r, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and not stopping.hurry.is_set() and any(alive(r) for r in targets):
        time.sleep(0.05)
    for r in targets:
        if alive(r):
            _signal(r, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(r) for r in targets):
        time.sleep(0.05)
    if run_dir is not None:
        for r in records:
            r.forget(run_dir)
    return [r.name for r in targets]


def _signal(rec: Record, sig: int) -> None:
    try:
        if os.getpgid(rec.pid) == rec.pid:
            os.killpg(rec.pid, sig)  # its own group: start_new_session made pgid == pid
        else:
            os.kill(rec.pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(rec.pid, sig)


# ---------------------------------------------------------------------------------------------- sweeping
def owned(root: Path | str) -> list[psutil.Process]:
    """Live processes marked OWNER_ENV=root, except this process and its ancestors."""
    me = psutil.Process()
    skip = {me.pid, *(p.pid for p in me.parents())}
    mark = owner_mark(root)[OWNER_ENV]
    out = []
    for p in psutil.process_iter():
        if p.pid in skip:
            continue
        try:
            if p.environ().get(OWNER_ENV) == mark and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def describe(p: psutil.Process) -> str:
    try:
        cmd = " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        cmd = "?"
    return f"pid {p.pid} ({cmd[:80]})"


def terminate(processes: list[psutil.Process], grace: float = 5.0) -> list[psutil.Process]:
    """SIGTERM, wait up to `grace` (none once stopping.hurry is set), SIGKILL the rest; reaps our
    children. Returns those that were still running."""
    targets = []
    for p in processes:
        try:
            p.terminate()
            targets.append(p)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        except psutil.AccessDenied:
            continue
    deadline = time.monotonic() + grace
    alive_ = targets
    while alive_ and time.monotonic() < deadline and not stopping.hurry.is_set():
        _, alive_ = psutil.wait_procs(alive_, timeout=0.2)
    for p in alive_:
        try:
            p.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    psutil.wait_procs(alive_, timeout=5)
    return targets


def stop_tree(proc: subprocess.Popen | None, grace: float) -> None:
    """SIGTERM a child we started, give it `grace` seconds (less once hurried) to stop what it started
    itself, then SIGKILL it, its process group and every descendant it had."""
    if proc is None:
        return
    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    if proc.poll() is None:
        proc.terminate()
        deadline = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < deadline and not stopping.hurry.is_set():
            time.sleep(0.1)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: its group is its pid
    except (ProcessLookupError, PermissionError):
        pass
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    terminate([p for p in tree if p.is_running()], grace=2.0)


def listeners(ports: set[int]) -> dict[int, int | None]:
    """Port → pid of the process listening on it (None: a listener we may not inspect), for `ports`."""
    out: dict[int, int | None] = {}
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in ports:
            out[c.laddr.port] = c.pid
    return out
