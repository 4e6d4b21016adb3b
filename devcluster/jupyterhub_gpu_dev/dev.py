"""`gpuhub dev`: the whole product on this machine — dev cluster, dev node agent (simulator) and a real
JupyterHub at http://127.0.0.1:8000, with users for the groups of the admin's own profiles file.

Stopping always completes: the first Ctrl-C (or SIGTERM, SIGHUP) stops step by step and says what it
stops; later ones only make it stop faster (see stopping.py). This process is a child subreaper, so
even a proxy or pod orphaned by a killed parent stays its descendant, and the last step kills every
descendant left. Everything it starts carries the state folder's OWNER_ENV mark, so should this
process itself be killed (SIGKILL), `gpuhub cluster status` reports what is left and
`gpuhub cluster down` stops it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from . import cluster, devsetup, leftovers, procs, stopping
from .binaries import BuildError, cache_root
from .components import Layout, SetupError
from .devhub import DevHub, HubError, HubSettings, activity_lines

HUB_GRACE = 30  # s for the hub's own cleanup (its proxy, services and the users' pods)
AGENT_GRACE = 20  # s for the agent to stop the pods it runs


def _say(msg: str) -> None:
    print(f"[gpuhub dev] {msg}", file=sys.stderr, flush=True)


def state_dir() -> Path:
    return Path(os.environ.get("GPUHUB_DEV_DIR") or cache_root() / "dev")


class AgentProcess:
    """The dev node agent (SIMULATOR) as a child process, with its own log file."""

    def __init__(self, state_dir: Path, kubeconfig: Path, prefix: list[str] = (), args: list[str] = ()):
        """`prefix`/`args`: beside real nodes the agent runs in a namespace of its own (realnodes.agent_host)."""
        self.state_dir, self.kubeconfig, self.prefix, self.args = state_dir, kubeconfig, list(prefix), list(args)
        self.log_path = state_dir / "dev-agent.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "AgentProcess":
        self.state_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        self.proc = subprocess.Popen([*self.prefix, sys.executable, "-m", "jupyterhub_gpu_dev.agent", "--state-dir",
                                      str(self.state_dir), "--kubeconfig", str(self.kubeconfig), *self.args],
                                     stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        return self

    def stop(self) -> None:
        procs.stop_tree(self.proc, AGENT_GRACE)  # on SIGTERM it stops the processes it runs


class DevRun:
    """One `gpuhub dev`: what it started, so that `stop` can undo exactly that, step by step."""

    def __init__(self, profiles: Path, port: int, nodes_per_pool: int, users: dict[str, list[str]],
                 activity_interval: int | None = None):
        self.profiles, self.port, self.nodes_per_pool, self.users = profiles, port, nodes_per_pool, users
        self.activity_interval = activity_interval  # seconds; None: JupyterHub's 300
        self.root = cluster.state_dir().resolve()
        self.state = state_dir()
        self.started_cluster = False
        self.recorded = False  # dev.json is ours to remove (not another `gpuhub dev`'s)
        self.agent: AgentProcess | None = None
        self.hub: DevHub | None = None

    def start(self, cfg) -> None:
        layout = Layout(self.root)
        st = cluster.status(self.root)
        if st["busy"]:
            raise cluster.ClusterError(f"a `gpuhub cluster up` or `down` is working on {self.root}; wait for it")
        other = leftovers.dev_info(layout)
        if leftovers.dev_alive(other) and other["pid"] != os.getpid():
            raise cluster.ClusterError(f"another `gpuhub dev` (pid {other['pid']}) runs on the dev cluster in "
                                       f"{self.root}; stop it first, or set GPUHUB_CLUSTER_DIR for a second cluster")
        if st["leftovers"]:
            _say("stopping what an earlier run left running: " + "; ".join(st["leftovers"]))
            cluster.down(self.root, say=_say)
            st = cluster.status(self.root)
        os.environ.update(procs.owner_mark(self.root))  # everything started from here on carries the mark
        reuse = st["running"]
        if reuse and not st["healthy"]:
            bad = ", ".join(f"{n} {c['state']}" for n, c in st["components"].items() if c["state"] != "healthy")
            raise cluster.ClusterError(f"the dev cluster in {self.root} is not healthy ({bad}); "
                                       "stop it with `gpuhub cluster down` and run `gpuhub dev` again")
        leftovers.write_dev_info(self.root, started_cluster=not reuse, state_dir=self.state)
        self.recorded = True
        if reuse:
            _say(f"reusing the dev cluster already running in {self.root} (it stays up when you stop); "
                 "adding this file's node pools and queues")
            c = cluster.Cluster(self.root)
            cluster.populate(c, cfg, self.nodes_per_pool)
        else:
            self.started_cluster = True
            c = cluster.up(self.profiles, self.nodes_per_pool, root=self.root, say=_say)
        self.agent = AgentProcess(self.state, c.kubeconfig)
        self.agent.start()
        before = activity_lines(self.activity_interval) if self.activity_interval else ""
        self.hub = DevHub(HubSettings(state_dir=self.state, profiles=self.profiles, kubeconfig=c.kubeconfig,
                                      port=self.port, groups=self.users, before=before))
        self.hub.start()
        self._record()
        self._summary(cfg, layout)

    def _record(self) -> None:
        """Write down the hub and the agent with what they started, and the hub's ports (for
        `gpuhub cluster status`/`down` should this process be killed)."""
        tree = []
        for proc in (self.hub.proc, self.agent.proc):
            try:
                top = psutil.Process(proc.pid)
                tree += [top, *top.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue  # `wait` reports it
        pids = {p.pid for p in tree}
        ports = {f"pid {c.pid} :{c.laddr.port}": c.laddr.port for c in psutil.net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN and c.pid in pids}
        leftovers.write_dev_info(self.root, self.started_cluster, self.state, tree, ports)

    def _summary(self, cfg, layout: Layout) -> None:
        _say(f"JupyterHub is up: {self.hub.settings.url}")
        if self.activity_interval:
            _say(f"activity interval {self.activity_interval} s (the hub's and the servers'): an idle_timeout "
                 f"down to {self.activity_interval} s is accepted, so culling shows within minutes")
        for line in devsetup.login_lines(self.users):
            _say(line)
        _say("any other name logs in with no groups")
        _say("simulated nodes (KWOK; pods labelled for the dev agent SIMULATOR run as local processes):")
        for line in devsetup.node_lines(cfg, self.nodes_per_pool):
            _say(line)
        _say("team quotas (GPU slots per pool):" if cfg.teams else "no teams: no quotas")
        for line in devsetup.quota_lines(cfg):
            _say(line)
        _say(f"logs: hub {self.hub.log_path}, dev agent {self.agent.log_path}, cluster {layout.logs}")
        _say("Ctrl-C stops everything this command started (twice: faster)")

    def wait(self) -> int:
        """Until a signal (KeyboardInterrupt) or until the hub or the agent exits on its own."""
        keep = {self.hub.proc.pid, self.agent.proc.pid}
        while self.hub.proc.poll() is None and self.agent.proc.poll() is None:
            reap_orphans(keep)
            time.sleep(1)
        stopping.begin()
        who = "JupyterHub" if self.hub.proc.poll() is not None else "the dev agent"
        _say(f"{who} exited on its own; see its log. Stopping")
        return 1

    def stop(self) -> None:
        """Each step runs whatever happened before it; an error is reported and the next step still runs."""
        stopping.begin()
        if self.hub and self.hub.proc:
            self._step("stopping JupyterHub (it stops its proxy, its services and the users' servers)",
                       self.hub.stop)
        if self.agent and self.agent.proc:
            self._step("stopping the dev agent and the pods it runs", self.agent.stop)
        if self.started_cluster:
            self._step("stopping the dev cluster", self._stop_cluster)
        self._step("checking that nothing this command started still runs", self._sweep)
        if self.recorded:
            leftovers.forget_dev_info(self.root)
        os.environ.pop(procs.OWNER_ENV, None)

    def _stop_cluster(self) -> None:
        try:
            cluster.down(self.root, say=_say)
        except cluster.ClusterError as e:  # a `gpuhub cluster down` holds the lock: stop alongside it
            _say(f"  {e}; stopping its components anyway")
            layout = Layout(self.root)
            cluster.stop_in_order(procs.Record.load_all(layout.run), layout.run, _say)

    def _sweep(self) -> None:
        reap_orphans(set())
        rest = {p.pid: p for p in psutil.Process().children(recursive=True) if _live(p)}
        if self.started_cluster:  # a reused cluster's marked processes are not ours to stop
            rest.update({p.pid: p for p in procs.owned(self.root)})
        if rest:
            _say("stopping what is left: " + "; ".join(procs.describe(p) for p in rest.values()))
            procs.terminate(list(rest.values()), grace=2)
        reap_orphans(set())
        still = [p for p in rest.values() if _live(p)]
        if still:
            raise RuntimeError("could not stop " + "; ".join(procs.describe(p) for p in still))
        _say("stopped: nothing this command started is running")

    @staticmethod
    def _step(what: str, action) -> None:
        _say(what + " ...")
        try:
            action()
        except Exception as e:  # noqa: BLE001 - report, and go on with the next step
            _say(f"  {type(e).__name__}: {e}")


def _live(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def reap_orphans(keep: set[int]) -> None:
    """Collect exited orphans that became our children (we are their subreaper), except `keep`."""
    for child in psutil.Process().children():
        try:
            if child.pid not in keep and child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
        except (psutil.NoSuchProcess, ChildProcessError):
            continue


def run(profiles: str | None, port: int, nodes_per_pool: int = 2, users_file: str | None = None,
        activity_interval: int | None = None) -> int:
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

    profiles_path = Path(profiles or EXAMPLE_PROFILES).resolve()
    cfg = load_profiles(profiles_path)
    users = devsetup.load_users(users_file) if users_file else devsetup.demo_users(cfg)
    for group in devsetup.unknown_groups(users, cfg):
        _say(f"note: group {group!r} of the users file is named nowhere in {profiles_path.name}")
    saved = stopping.install(_say)
    stopping.become_subreaper()
    dev = DevRun(profiles_path, port, nodes_per_pool, users, activity_interval)
    code = 0
    try:
        try:
            dev.start(cfg)
            code = dev.wait()
        except KeyboardInterrupt:
            code = 0
        except (cluster.ClusterError, BuildError, SetupError, HubError) as e:
            stopping.begin()
            print(f"error: {e}", file=sys.stderr)
            code = 1
    except KeyboardInterrupt:  # the first signal landed in an except clause above
        pass
    finally:
        while True:  # the first signal may land before stop() marks us stopping: stop() again
            try:
                dev.stop()
                break
            except KeyboardInterrupt:
                continue
        stopping.restore(saved)
    return code
