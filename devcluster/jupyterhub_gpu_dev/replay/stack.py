"""What a day replay runs on, started and stopped in one place: a dev cluster whose GPU pools start at their
min_nodes, the dev hub (GPUSpawner, gpu-jobs, gpu-culler with timeouts divided by the speed) with the dev
agent, and a real Prometheus scraping a SIMULATED DCGM exporter whose per-pod series the replay sets from
the trace (DCGM_FI_PROF_GR_ENGINE_ACTIVE, what the culler's GPU evidence reads).
"""
from __future__ import annotations

import json
import os
import secrets
import time
import urllib.request
from pathlib import Path
from typing import Any

from jupyterhub_gpu.contract import JOBS_SERVICE, USAGE_COLLECTOR_SERVICE
from jupyterhub_gpu.model.validation import parse_profiles
from jupyterhub_gpu.services.notify.options import ENV_DB, ENV_WEBHOOKS
from jupyterhub_gpu_dev import cluster as dc
from jupyterhub_gpu_dev import prometheus
from jupyterhub_gpu_dev.devhub import NAMESPACE, DevHub, HubSettings, activity_lines, free_port
from jupyterhub_gpu_dev.webhook_sink import WebhookSink

from . import notified
from .faults import cluster_records

SCRAPE_S = 1


class SimulatedDCGM:
    """SIMULATOR: a DCGM-exporter-format endpoint (prometheus_client); `set(namespace, pod, activity)` per pod,
    `keep_only` the pods that still run."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Gauge, start_http_server

        self.registry = CollectorRegistry()
        self.gauge = Gauge("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active (simulated).",
                           ["gpu", "UUID", "container", "namespace", "pod"], registry=self.registry)
        self.server, _ = start_http_server(0, addr="127.0.0.1", registry=self.registry)
        self.port = self.server.server_port
        self.pods: set[tuple[str, str]] = set()

    def _labels(self, namespace: str, pod: str) -> tuple[str, ...]:
        return ("0", f"GPU-sim-{namespace}-{pod}", "notebook", namespace, pod)

    def set(self, namespace: str, pod: str, activity: float) -> None:
        self.gauge.labels(*self._labels(namespace, pod)).set(activity)
        self.pods.add((namespace, pod))

    def keep_only(self, alive: set[tuple[str, str]]) -> None:
        for key in self.pods - alive:
            self.gauge.remove(*self._labels(*key))
        self.pods &= alive

    def close(self) -> None:
        self.server.shutdown()


def scaled_profiles(data: dict[str, Any], speed: float) -> dict[str, Any]:
    """The profiles file with idle_timeout and max_age divided by the speed (whole seconds, at least 2)."""
    cfg = parse_profiles(data)
    out = json.loads(json.dumps(data))
    for prof, model in zip(out["profiles"], cfg.profiles):
        for key in ("idle_timeout", "max_age"):
            value = getattr(model, key)
            if value:
                prof[key] = f"{max(2, round(value / speed))}s"
    return out


def culler_env(speed: float, prometheus_url: str, culling: bool) -> dict[str, str]:
    """The hub's GPUHUB_CULLER_* settings: cycles and warnings compressed by the replay's speed."""
    every = max(1, round(60 / speed))
    return {"GPUHUB_CULLER_EVERY": str(every), "GPUHUB_CULLER_WARN_BEFORE": str(max(every + 1, round(600 / speed))),
            "GPUHUB_CULLER_PROMETHEUS_URL": prometheus_url, "GPUHUB_CULLER_POLICY": "both",
            "GPUHUB_CULLER_SCRAPE_INTERVAL": str(SCRAPE_S), "GPUHUB_CULLER_NAMESPACE": NAMESPACE,
            "GPUHUB_CULLER_TIMEOUT": str(max(2, round(3600 / speed))),
            "GPUHUB_CULLER_DRY_RUN": "false" if culling else "true"}


def collector_cycle_config(speed: float) -> str:
    """The usage collector's cycle (60 s by default) compressed like the culler's: at x120 a 60 s cycle is two
    trace hours, and a server stopped within one is never listed, so it would be missing from showback."""
    every = max(1, round(60 / speed))
    return ("for _service in c.JupyterHub.services:\n"
            f"    if _service.get('name') == {USAGE_COLLECTOR_SERVICE!r}:  # argparse keeps the last --every\n"
            f"        _service['command'] = list(_service['command']) + ['--every={every}']")


def notify_config(webhook_url: str, db: Path) -> str:
    """gpu-jobs' notifications: the replay's one webhook (on loopback) and its outbox's file in the hub's state,
    so a restarted gpu-jobs finds what it had not sent yet."""
    env = {ENV_WEBHOOKS: json.dumps(notified.webhooks(webhook_url)), ENV_DB: str(db)}
    return ("for _service in c.JupyterHub.services:\n"
            f"    if _service.get('name') == {JOBS_SERVICE!r}:\n"
            f"        _service['environment'] = {{**_service.get('environment', {{}}), **{env!r}}}\n")


def activity_config(speed: float) -> str:
    """JupyterHub's activity intervals (300 s by default: servers' reports, the hub's proxy poll) compressed
    like the idle timeouts, which the product refuses to set shorter than them."""
    return activity_lines(max(1, round(300 / speed)))


class Stack:
    """Start with `up()`, always `down()`; `hub_url`, `token` (the replay's admin service), `kube`."""

    def __init__(self, root: Path, profiles: Path, nodes: dict[str, int], groups: dict[str, list[str]],
                 speed: float, culling: bool, say=print):
        self.root, self.profiles, self.nodes, self.groups = root, profiles, nodes, groups
        self.speed, self.culling, self.say = speed, culling, say
        self.token = secrets.token_hex(16)
        self.procs: list[Any] = []
        self.hub = self.agent = self.prom = self.dcgm = self.webhooks = None

    def up(self) -> "Stack":
        from jupyterhub_gpu_dev.dev import AgentProcess

        self.say("dev cluster up")
        dc.up(self.profiles, self.nodes, root=self.root / "cluster", say=lambda m: None)
        self.kubeconfig = dc.Cluster(self.root / "cluster").kubeconfig
        self.dcgm = SimulatedDCGM()
        self.prom, prom_url = prometheus.start(self.root / "prometheus", self.dcgm.port, SCRAPE_S,
                                                 exporter_pod="nvidia-dcgm-exporter-sim")
        self.say("dev hub up")
        state = self.root / "hub"
        self.webhooks = WebhookSink().__enter__()
        self.agent = AgentProcess(state, self.kubeconfig).start()
        extra = ('c.JupyterHub.load_roles = list(c.JupyterHub.load_roles) + [{"name": "replay-tokens", '
                 '"scopes": ["tokens", "admin:users", "admin:servers", "users:activity"], "services": ["replay"]}]\n'
                 'c.JupyterHub.concurrent_spawn_limit = 0\n'
                 'c.JupyterHub.slow_spawn_timeout = 0\nc.JupyterHub.slow_stop_timeout = 0\n'
                 + collector_cycle_config(self.speed) + "\n"
                 + notify_config(self.webhooks.url, state / "notify.sqlite"))
        self.settings = HubSettings(state_dir=state, profiles=self.profiles, kubeconfig=self.kubeconfig,
                                    port=free_port(), groups=self.groups, api_tokens={"replay": self.token},
                                    extra=extra, before=activity_config(self.speed))
        self.prom_url = prom_url
        self._start_hub()
        self.hub_url = self.hub.settings.url
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{self.hub_url}/services/gpu-jobs/health", timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("gpu-jobs did not come up:\n" + self.hub.log_tail(40)) from None
                time.sleep(0.5)
        self.kube = dc.Cluster(self.root / "cluster").kube()
        self.kube_server = dc.Cluster(self.root / "cluster").server
        return self

    def _start_hub(self) -> None:
        """The dev hub with the culler's settings compressed by the speed (in its environment only)."""
        saved = {k: os.environ.get(k) for k in culler_env(1, "", True)}
        os.environ.update(culler_env(self.speed, self.prom_url, self.culling))
        try:
            self.hub = DevHub(self.settings).start()
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)

    # ------------------------------------------------------- faults (devcluster/jupyterhub_gpu_dev/replay/faults.py)
    def restart_hub(self) -> None:
        """SIGKILL the hub and every process it started (its proxy and services), as a hub pod's end; start it
        again on the same database and state."""
        from .faults import kill_tree

        kill_tree(self.hub.proc.pid)
        self.hub.proc.wait(timeout=30)
        self._start_hub()

    def component_pid(self, name: str) -> int:
        return cluster_records(self.root / "cluster")[name].pid

    def restart_component(self, name: str) -> None:
        """SIGKILL a control-plane component's process group, then start it exactly as `up` did (same flags,
        ports, log), as a kubelet restarts a static pod."""
        import signal

        from jupyterhub_gpu_dev import procs
        from jupyterhub_gpu_dev.components import Layout

        from .faults import wait_port_free

        rec = cluster_records(self.root / "cluster")[name]
        os.killpg(rec.pid, signal.SIGKILL)
        layout = Layout(self.root / "cluster")
        comp = dc.Cluster(self.root / "cluster").info["components"][name]
        # the old process gone and its port released first: started at once, the API server found its port in use
        wait_port_free(lambda: procs.alive(rec), comp["health_url"])
        procs.spawn(name, comp["argv"], Path(comp["log"]), layout.root, comp["health_url"], layout.run)

    def component_healthy(self, name: str) -> bool:
        from jupyterhub_gpu_dev.components import Layout
        from jupyterhub_gpu_dev.pki import PKI

        comp = dc.Cluster(self.root / "cluster").info["components"][name]
        return dc.probe(comp["health_url"], dc._ssl_context(PKI(Layout(self.root / "cluster").pki_dir)))

    def down(self) -> None:
        for step in (lambda: self.hub and self.hub.stop(), lambda: self.agent and self.agent.stop(),
                     lambda: self.prom and prometheus.stop(self.prom), lambda: self.dcgm and self.dcgm.close(),
                     lambda: self.webhooks and self.webhooks.__exit__(None, None, None),
                     lambda: dc.down(self.root / "cluster")):
            try:
                step()
            except Exception as e:  # keep stopping the rest
                self.say(f"while stopping: {e!r}")

