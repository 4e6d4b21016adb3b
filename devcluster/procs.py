"""Detached component processes, recorded by pid so that only what we started is ever stopped.

Each process gets its own session (and process group), so it outlives the `gpuhub cluster up`
that started it and ignores the terminal's Ctrl-C. A record holds the pid and the process start
time from /proc, so a recycled pid is never mistaken for ours.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

#: Environment a component must not inherit: it would make client-go use in-cluster config.
_DROP_ENV = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG")


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
    fields = _stat(rec.pid)
    if fields is None or fields[0] in ("Z", "X"):
        _reap(rec.pid)
        return False
    return fields[19] == rec.start_time


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def spawn(name: str, argv: list[str], log: Path, cwd: Path, health_url: str) -> tuple[Record, subprocess.Popen]:
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
    with log.open("ab") as out:
        out.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} started by gpuhub devcluster:\n# {' '.join(argv)}\n"
                  .encode())
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd,
                                env=env, start_new_session=True)
    rec = Record(name, proc.pid, start_time(proc.pid), argv, str(log), health_url)
    return rec, proc


def stop(records: list[Record], run_dir: Path | None = None, grace: float = 10.0) -> list[str]:
    """SIGTERM each process group (in the order given), wait, SIGKILL what is left; forget the records."""
    targets = [r for r in records if alive(r)]
    for r in targets:
        _signal(r, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(r) for r in targets):
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
        os.killpg(rec.pid, sig)  # its own group: start_new_session made pgid == pid
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(rec.pid, sig)
