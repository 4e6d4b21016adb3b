"""`gpuhub dev`: the whole product on this machine — dev cluster, dev node agent (simulator) and a real
JupyterHub at http://127.0.0.1:8000. Ctrl-C stops everything this command started.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import cluster
from .binaries import cache_root
from .devhub import DevHub, HubSettings

#: Who is in which group when you log in to the dev hub (any other name logs in with no groups).
DEMO_GROUPS = {
    "alice": ["data-science"],
    "rita": ["ml-research"],
    "admin": ["data-science", "ml-research"],
}


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _say(msg: str) -> None:
    print(f"[gpuhub dev] {msg}", file=sys.stderr, flush=True)


class AgentProcess:
    """The dev node agent (SIMULATOR) as a child process, with its own log file."""

    def __init__(self, state_dir: Path, kubeconfig: Path):
        self.state_dir, self.kubeconfig = state_dir, kubeconfig
        self.log_path = state_dir / "dev-agent.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "AgentProcess":
        self.state_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        self.proc = subprocess.Popen([sys.executable, "-m", "devcluster.agent", "--state-dir", str(self.state_dir),
                                      "--kubeconfig", str(self.kubeconfig)], stdout=log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        log.close()
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # it stops the processes it runs
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def run(profiles: str | None, port: int, nodes_per_pool: int = 2) -> int:
    from gpu_spawner.model.profiles_file import EXAMPLE_PROFILES

    profiles_path = Path(profiles or EXAMPLE_PROFILES).resolve()
    state = Path(os.environ.get("GPUHUB_DEV_DIR") or cache_root() / "dev")
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops everything too, like Ctrl-C
    started_cluster = False
    agent = hub = None
    try:
        if cluster.status()["running"]:
            _say("reusing the dev cluster that is already running (it stays up when you stop)")
            c = cluster.Cluster(cluster.state_dir())
        else:
            c = cluster.up(profiles_path, nodes_per_pool, say=_say)
            started_cluster = True
        agent = AgentProcess(state, c.kubeconfig).start()
        hub = DevHub(HubSettings(state_dir=state, profiles=profiles_path, kubeconfig=c.kubeconfig, port=port,
                                 groups=DEMO_GROUPS)).start()
        _say(f"JupyterHub is up: {hub.settings.url}")
        _say("log in with any name: alice (data-science), rita (ml-research), admin (both, hub admin)")
        _say(f"pods on simulated GPU nodes run as local processes (dev agent SIMULATOR, log {agent.log_path})")
        _say(f"hub log: {hub.log_path}; Ctrl-C stops everything this command started")
        while hub.proc.poll() is None and agent.proc.poll() is None:
            time.sleep(1)
        _say("the hub or the dev agent exited; stopping")
        return 1
    except KeyboardInterrupt:
        _say("stopping")
        return 0
    finally:
        if hub:
            hub.stop()
        if agent:
            agent.stop()
        if started_cluster:
            cluster.down()
