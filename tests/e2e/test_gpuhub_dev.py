"""`gpuhub dev` as a person runs it (the real command as a subprocess): users for the groups of the
admin's own profiles file, and a stop that leaves no process and no listening port behind, whether it
is interrupted once or twice (SIGINT or SIGTERM), during start, with a server running, during the
shutdown itself, or killed outright and cleaned up by `gpuhub cluster down`."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu_dev import procs
from jupyterhub_gpu_dev.devhub import free_port, login, xsrf_token

pytestmark = pytest.mark.cluster

START = 240  # s: a cold start on a busy machine
#: The example file with its teams and groups renamed: nothing here is called data-science or ml-research.
RENAMED = {"data-science": "vision", "ml-research": "research"}


class Dev:
    """A running `gpuhub dev`: its output read on a thread; what it started, snapshotted on demand."""

    def __init__(self, tmp: Path, *args: str):
        self.port = free_port()
        self.root = (tmp / "cluster").resolve()
        self.env = dict(os.environ, GPUHUB_CLUSTER_DIR=str(self.root), GPUHUB_DEV_DIR=str(tmp / "dev"))
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(["gpuhub", "dev", "--port", str(self.port), "--nodes-per-pool", "1", *args],
                                     env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.seen: dict[int, psutil.Process] = {}
        self.ports: set[int] = set()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def out(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = START) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.out:
            assert self.proc.poll() is None, f"gpuhub dev exited before {text!r}:\n{self.out}"
            assert time.monotonic() < deadline, f"no {text!r} within {timeout} s:\n{self.out}"
            time.sleep(0.05)

    def snapshot(self) -> None:
        """Remember every process it started (descendants and the state folder's marked processes) and
        the ports they listen on."""
        try:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        self.seen.update({p.pid: p for p in tree + procs.owned(self.root)})
        self.ports |= {c.laddr.port for c in psutil.net_connections(kind="tcp")
                       if c.status == psutil.CONN_LISTEN and c.pid in self.seen}

    def signal(self, sig: int) -> None:
        self.snapshot()
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = 150) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"gpuhub dev did not exit within {timeout} s:\n{self.out}") from None

    def kill(self) -> None:
        """Last resort for a failed test: this command, then what it left."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        subprocess.run(["gpuhub", "cluster", "down"], env=self.env, capture_output=True, timeout=120)

    def assert_nothing_left(self) -> None:
        """No process it started runs, nothing carries its state folder's mark or names its folders,
        and nothing answers on a port they listened on."""
        time.sleep(0.5)
        running = [procs.describe(p) for p in self.seen.values()
                   if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        marked = [procs.describe(p) for p in procs.owned(self.root)]
        named = [procs.describe(p) for p in psutil.process_iter()
                 if p.pid != os.getpid() and _mentions(p, str(self.root.parent))]
        assert not running and not marked and not named, (running, marked, named, self.out)
        assert len(self.seen) >= 2 and self.ports, "the snapshot saw nothing: the test would prove nothing"
        answering = []
        for port in sorted(self.ports | {self.port}):
            with socket.socket() as s:
                s.settimeout(1)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    answering.append(port)
        # a port that answers is a failure unless another program (another test's cluster) took it since
        listeners = {c.laddr.port: c.pid for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
        ours = [port for port in answering if listeners.get(port) is None or listeners[port] in self.seen
                or _pid_mentions(listeners[port], str(self.root.parent))]
        assert not ours, f"ports still answering: {ours}\n{self.out}"


def _mentions(p: psutil.Process, text: str) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE and text in " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def _pid_mentions(pid: int, text: str) -> bool:
    try:
        return _mentions(psutil.Process(pid), text)
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def dev_cmd(tmp_path):
    started: list[Dev] = []

    def start(*args: str) -> Dev:
        started.append(Dev(tmp_path, *args))
        return started[-1]

    yield start
    for d in started:
        d.kill()


@pytest.mark.parametrize("sig, when", [(signal.SIGINT, "kube-apiserver healthy"),
                                       (signal.SIGTERM, "node pools and Kueue objects ready")],
                         ids=["SIGINT-cluster-starting", "SIGTERM-hub-starting"])
def test_twice_interrupted_during_start_leaves_nothing(dev_cmd, sig, when):
    dev = dev_cmd()
    dev.wait_for(when)
    dev.signal(sig)
    time.sleep(0.3)
    dev.signal(sig)
    assert dev.wait_exit() == 0, dev.out
    dev.assert_nothing_left()
    assert f"{sig.name}: stopping everything" in dev.out and f"{sig.name} again: stopping faster" in dev.out
    assert "stopped: nothing this command started is running" in dev.out


def renamed_profiles(tmp_path: Path) -> Path:
    text = EXAMPLE_PROFILES.read_text()
    for old, new in RENAMED.items():
        text = text.replace(old, new)
    path = tmp_path / "own-profiles.yaml"
    path.write_text(text)
    return path


def offered(url: str, user: str) -> list[str]:
    page = login(url, user).get(f"{url}/hub/spawn", timeout=30).text
    return re.findall(r'name="profile" id="profile-item-([^"]+)"', page)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_own_groups_then_a_server_then_twice_interrupted(dev_cmd, tmp_path, sig):
    profiles = renamed_profiles(tmp_path)
    # a 1-minute idle timeout, which a hub at JupyterHub's 5-minute activity interval refuses to start with
    profiles.write_text(profiles.read_text().replace("idle_timeout: 30m", "idle_timeout: 1m", 1))
    cfg = load_profiles(profiles)
    assert cfg.by_slug["t4-shared"].idle_timeout == 60
    dev = dev_cmd("--profiles", str(profiles), "--activity-interval", "30s")
    dev.wait_for("Ctrl-C stops everything")
    assert "activity interval 30 s (the hub's and the servers')" in dev.out
    for group in RENAMED.values():
        assert f"log in as `{group}-user` (groups: {group})" in dev.out
    # each group's user is offered exactly the profiles of its group, in the real picker
    for group in RENAMED.values():
        want = [p.slug for p in cfg.profiles_for([group])]
        assert offered(dev.url, f"{group}-user") == want
    assert offered(dev.url, "admin") == [p.slug for p in cfg.profiles]
    assert offered(dev.url, "guest") == [p.slug for p in cfg.profiles_for([])]
    assert [p.slug for p in cfg.profiles_for(["vision"])] != [p.slug for p in cfg.profiles_for(["research"])]
    # a GPU server runs (a local process of the dev agent SIMULATOR)
    s = login(dev.url, "vision-user")
    form = s.get(f"{dev.url}/hub/spawn", timeout=30).text
    assert s.post(f"{dev.url}/hub/spawn", data={"profile": "t4-shared", "_xsrf": xsrf_token(s, form)},
                  timeout=60).ok
    deadline = time.monotonic() + 180
    while True:
        lab = s.get(f"{dev.url}/user/vision-user/lab", timeout=60)
        if lab.status_code == 200 and "JupyterLab" in lab.text:
            break
        assert time.monotonic() < deadline, lab.text[:300] + dev.out
        time.sleep(1)
    dev.snapshot()
    servers = [p for p in dev.seen.values() if _mentions(p, "jupyterhub-singleuser")]
    assert servers, "no server process seen"
    assert {p.environ().get("JUPYTERHUB_ACTIVITY_INTERVAL") for p in servers} == {"30"}  # it reports every 30 s
    # the second signal arrives while the hub is stopping the server
    dev.signal(sig)
    dev.wait_for("stopping JupyterHub", timeout=30)
    dev.signal(sig)
    assert dev.wait_exit() == 0, dev.out
    dev.assert_nothing_left()
    assert f"{sig.name} again: stopping faster" in dev.out
    assert "stopped: nothing this command started is running" in dev.out


def test_killed_outright_status_names_leftovers_and_down_stops_them(dev_cmd):
    dev = dev_cmd()
    dev.wait_for("Ctrl-C stops everything")
    dev.snapshot()
    dev.proc.kill()  # SIGKILL: no cleanup at all
    dev.proc.wait()
    status = subprocess.run(["gpuhub", "cluster", "status"], env=dev.env, capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 1, status.stdout + status.stderr
    assert "left over from a run that ended without stopping them" in status.stdout
    listed = {int(m) for m in re.findall(r"^  pid (\d+) ", status.stdout, re.M)}
    hub = next(p.pid for p in dev.seen.values() if _mentions(p, "-m jupyterhub"))
    assert hub in listed and listed <= set(dev.seen), status.stdout
    down = subprocess.run(["gpuhub", "cluster", "down"], env=dev.env, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    dev.assert_nothing_left()
    status = subprocess.run(["gpuhub", "cluster", "status"], env=dev.env, capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 3 and "left over" not in status.stdout, status.stdout
