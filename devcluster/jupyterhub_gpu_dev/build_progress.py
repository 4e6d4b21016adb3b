"""What a cold Go build is doing and roughly how long is left, so a first run never looks hung.

Pure core (estimates and the words) plus a thin shell (`Progress`): one line per binary when the output
is a log, a live bar redrawn in place when a terminal is attached. Standard library only, like
binaries.py (`.ci/run` builds before the Python package is installed).
"""
from __future__ import annotations

import json
import math
import sys
import threading
import time
from pathlib import Path
from typing import Callable, TextIO

#: Seconds per binary on 2 cores with a cold Go build cache, in the order binaries.py builds them (so the
#: kubelet reuses the apiserver's packages and kueue KWOK's), measured on a fresh machine on 2026-12-02 with the
#: image builds running alongside (`make test`): used until this machine has built a binary itself (binaries.py
#: records each build in build-times.json).
DEFAULT_SECONDS = {"etcd": 64, "kube-apiserver": 304, "kube-scheduler": 44, "kube-controller-manager": 79,
                   "kwok": 144, "kueue": 348, "jobset": 198, "helm": 82, "kubelet": 19, "kube-proxy": 7,
                   "containerd": 54, "containerd-shim-runc-v2": 2, "ctr": 4, "coredns": 55, "gpuhub-pause": 1,
                   "gpuhub-device-plugin": 1}
#: What each binary is for, in the words a newcomer needs to see why it is built at all.
PURPOSE = {"etcd": "the cluster's database", "kube-apiserver": "the Kubernetes API",
           "kube-scheduler": "places pods on nodes", "kube-controller-manager": "Jobs, garbage collection",
           "kwok": "simulated GPU nodes", "kueue": "GPU quota queues", "jobset": "multi-node jobs",
           "helm": "the z2jh chart tests", "kubelet": "real nodes (--z2jh)", "kube-proxy": "Services on real nodes",
           "containerd": "containers on real nodes", "containerd-shim-runc-v2": "containerd's runc shim",
           "ctr": "image import", "coredns": "cluster DNS", "gpuhub-pause": "pod sandboxes",
           "gpuhub-device-plugin": "simulated GPUs on a real node"}


def family(binary: str) -> str:
    """`jobset-v0.10.1` → `jobset`: versioned names share their family's timings and words."""
    for name in DEFAULT_SECONDS:
        if binary == name or binary.startswith(name + "-v"):
            return name
    return binary


def recorded(cache: Path) -> dict[str, float]:
    """Build times this machine recorded (every bin-*/build-times.json, newest folder last), by family.
    A line that is not a JSON object of positive numbers is skipped: the file is only a hint."""
    out: dict[str, float] = {}
    files = sorted(cache.glob("bin-*/build-times.json"), key=lambda f: f.stat().st_mtime)
    for f in files:
        try:
            lines = f.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict):
                continue
            for name, secs in entry.items():
                if isinstance(secs, (int, float)) and not isinstance(secs, bool) and 0 < secs < 86400:
                    out[family(str(name))] = float(secs)
    return out


def estimates(todo: list[str], known: dict[str, float]) -> dict[str, float]:
    """Seconds each binary in `todo` should take: this machine's record, else the 2-core default."""
    return {b: known.get(family(b), DEFAULT_SECONDS.get(family(b), 120)) for b in todo}


def minutes(secs: float) -> str:
    """A duration as a person says it: "45 s", "6 min", "1 h 5 min"."""
    secs = max(0.0, secs)
    if secs < 90:
        return f"{max(5, math.ceil(secs / 5) * 5):.0f} s"
    m = round(secs / 60)
    return f"{m} min" if m < 60 else f"{m // 60} h {m % 60} min"


def clock(secs: float) -> str:
    secs = int(max(0, secs))
    return f"{secs // 60}:{secs % 60:02d}"


def plan(todo: list[str], est: dict[str, float], known: dict[str, float], dest: Path) -> str:
    """Said once, before a build starts: what, how long in all, and why (first run only)."""
    total = sum(est.values())
    basis = ("from this machine's earlier builds" if all(family(b) in known for b in todo)
             else "as measured on 2 cores; less with more cores")
    parts = "\n".join(f"  {b}: {PURPOSE.get(family(b), 'dev cluster')}, ~{minutes(est[b])}" for b in todo)
    return (f"building {len(todo)} dev-cluster binar{'y' if len(todo) == 1 else 'ies'} from Go modules into "
            f"{dest}: about {minutes(total)} in all ({basis}). This happens once: the dev cluster is a real "
            f"Kubernetes control plane built from source, and later runs reuse it.\n{parts}")


def left(order: list[str], est: dict[str, float], current: int, elapsed: float) -> float:
    """Seconds left in all: the rest of the current binary (never below 5 s while it runs) and all after it."""
    rest = sum(est[b] for b in order[current + 1:])
    return rest + max(5.0, est[order[current]] - elapsed)


def bar_line(order: list[str], est: dict[str, float], current: int, elapsed: float, width: int = 24) -> str:
    """One redrawn terminal line: [3/8] kube-apiserver [#####-----] 2:10 / ~6:00, about 18 min left."""
    name = order[current]
    frac = min(1.0, elapsed / est[name]) if est[name] else 1.0
    filled = int(frac * width)
    return (f"[{current + 1}/{len(order)}] {name} [{'#' * filled}{'-' * (width - filled)}] "
            f"{clock(elapsed)} / ~{clock(est[name])}, about {minutes(left(order, est, current, elapsed))} left")


def start_line(order: list[str], est: dict[str, float], current: int) -> str:
    """The line a log gets when a binary starts (no redraws in a log)."""
    name = order[current]
    return (f"[{current + 1}/{len(order)}] building {name} ({PURPOSE.get(family(name), 'dev cluster')}): "
            f"~{minutes(est[name])}, about {minutes(left(order, est, current, 0))} left in all")


class Progress:
    """Reports a build as it goes: `step(i)` before binary i, `done(i, secs)` after it. On a terminal a
    thread redraws the bar every second; elsewhere only the start and end lines are written."""

    def __init__(self, order: list[str], est: dict[str, float], out: TextIO | None = None,
                 tty: bool | None = None, clock_fn: Callable[[], float] = time.monotonic, every: float = 1.0):
        self.order, self.est, self.out = order, est, out or sys.stderr
        self.tty = self.out.isatty() if tty is None else tty
        self.now, self.every = clock_fn, every
        self.current, self.started = 0, self.now()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._building = False  # a bar is on screen (no newline after it yet)
        self._thread: threading.Thread | None = None

    def _write(self, text: str, redraw: bool = False, building: bool | None = None) -> None:
        """Under the lock, so the ticking thread never redraws a bar over a finished binary's line."""
        with self._lock:
            if building is not None:
                self._building = building
            elif redraw and not self._building:
                return
            self.out.write(("\r\033[K" + text) if redraw else (("\r\033[K" if self.tty else "") + text + "\n"))
            self.out.flush()

    def step(self, i: int) -> None:
        self.current, self.started = i, self.now()
        if self.tty:
            self._write(bar_line(self.order, self.est, i, 0), redraw=True, building=True)
            if self._thread is None:
                self._thread = threading.Thread(target=self._tick, daemon=True, name="build-progress")
                self._thread.start()
        else:
            self._write("[devcluster] " + start_line(self.order, self.est, i))

    def done(self, i: int, secs: float) -> None:
        name = self.order[i]
        self._write(f"[devcluster] [{i + 1}/{len(self.order)}] built {name} in {clock(secs)} "
                    f"(estimated ~{clock(self.est[name])})", building=False)

    def close(self) -> None:
        """Stop redrawing; a bar left half-way (the build failed) gets its newline before the error."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self.tty and self._building:
            self._write("", building=False)

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            self._write(bar_line(self.order, self.est, self.current, self.now() - self.started), redraw=True)
