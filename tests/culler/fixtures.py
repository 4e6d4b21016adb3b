"""Shared by tests/culler and tests/security/test_culler_*: a real JupyterHub (configurable-http-proxy from npm,
local-process single-user servers), a real Prometheus (Debian's package) scraping a small DCGM-format exporter,
and the culler run against them.

The pattern is jupyterhub-idle-culler's own test suite: `jupyterhub` as a subprocess with a generated
config (services with api_tokens, load_roles). Servers are real `jupyterhub-singleuser` processes
(SimpleLocalProcessSpawner) started through the REST API with `{"profile": ...}` as user_options.
The hub only moves last_activity forward, so "idle for X" means really idle for X: the test profiles
have timeouts of seconds.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
import yaml

from jupyterhub_gpu.services.culler import SCOPES, culler_service
from jupyterhub_gpu_dev.devhub import free_port, loopback_lines

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "jhub"
SCRAPE = 1  # seconds
GPU_IDLE = 10  # seconds: the GPU test profiles' idle_timeout (also the GPU window)

TAINT = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
#: Test profiles with idle timeouts of seconds: a whole T4 (`t4`) and a MIG slice (`mig`), whose DCGM series are
#: their own evidence; a time-sliced T4 (`t4-shared`, `short-life`), whose series are the shared device's and
#: never evidence; a CPU profile of an hour.
PROFILES = {
    "pools": {
        "system": {"node_selector": {"agentpool": "system"}, "instance_type": "Standard_D8s_v5",
                   "cost_per_node_hour": 0.384},
        "gput4": {"node_selector": {"agentpool": "gput4"}, "gpu": {"model": "T4"}, "taints": [TAINT],
                  "sharing": {"strategy": "time-slicing", "replicas": 4}, "cost_per_node_hour": 0.526,
                  "instance_type": "Standard_NC4as_T4_v3"},
        "gput4full": {"node_selector": {"agentpool": "gput4full"}, "gpu": {"model": "T4"}, "taints": [TAINT],
                      "cost_per_node_hour": 0.526, "instance_type": "Standard_NC4as_T4_v3"},
        "gpumig": {"node_selector": {"agentpool": "gpumig"}, "gpu": {"model": "A100-80GB"}, "taints": [TAINT],
                   "sharing": {"strategy": "mig", "layout": "all-1g.10gb"}, "cost_per_node_hour": 3.67},
    },
    "profiles": [
        {"slug": "cpu", "display_name": "CPU", "pool": "system", "idle_timeout": "1h", "default": True},
        {"slug": "t4", "display_name": "T4", "pool": "gput4full", "gpu": {"kind": "full"},
         "idle_timeout": f"{GPU_IDLE}s"},
        {"slug": "t4-shared", "display_name": "Shared T4", "pool": "gput4", "gpu": {"kind": "time-sliced"},
         "idle_timeout": f"{GPU_IDLE}s"},
        {"slug": "mig", "display_name": "MIG", "pool": "gpumig", "gpu": {"kind": "mig", "profile": "1g.10gb"},
         "idle_timeout": f"{GPU_IDLE}s"},
        {"slug": "short-life", "display_name": "T4 with max_age", "pool": "gput4",
         "gpu": {"kind": "time-sliced"}, "idle_timeout": "1h", "max_age": "12s"},
    ],
}


def _wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer at {url} within {timeout:.0f} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


# ------------------------------------------------------------------ DCGM exporter


def serve_metrics(render: Callable[[], str]) -> ThreadingHTTPServer:
    """A scrape target on a free loopback port answering every GET with `render()` in Prometheus' text format;
    served from a daemon thread until `shutdown()`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Exporter:
    """Serves DCGM-exporter-format metrics; tests set per-pod values."""

    def __init__(self) -> None:
        self.series: dict[str, tuple[str, dict[str, str], float]] = {}
        self.lock = threading.Lock()
        self.server = serve_metrics(self.render)
        self.port = self.server.server_address[1]

    def set_gpu(self, pod: str, activity: float | None = None, util: float | None = None, gpu: int = 0,
                mig: tuple[str, str] | None = None) -> None:
        """A pod's GPU: PROF_GR_ENGINE_ACTIVE (0..1) and/or DEV_GPU_UTIL (0..100); MIG: (GPU_I_ID, profile)."""
        labels = {"gpu": str(gpu), "UUID": f"GPU-{pod}-{gpu}", "device": f"nvidia{gpu}", "modelName": "NVIDIA T4",
                  "Hostname": "node-1", "container": "notebook", "namespace": NAMESPACE, "pod": pod}
        if mig:
            labels.update(GPU_I_ID=mig[0], GPU_I_PROFILE=mig[1], modelName="NVIDIA A100 80GB PCIe")
        with self.lock:
            key = f"{pod}/{gpu}/{mig}"
            if activity is not None:
                self.series[key + "/prof"] = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, activity)
            if util is not None:
                self.series[key + "/util"] = ("DCGM_FI_DEV_GPU_UTIL", labels, util)

    def render(self) -> str:
        lines = ["# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.",
                 "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge",
                 "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
        with self.lock:
            for name, labels, value in self.series.values():
                lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
                lines.append(f"{name}{{{lab}}} {value}")
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture(scope="session")
def exporter():
    e = Exporter()
    yield e
    e.close()


@pytest.fixture(scope="session")
def prometheus(exporter, tmp_path_factory):
    """Debian's prometheus scraping the exporter every second. The static `pod` label plays the part of
    Kubernetes service discovery's: the exporter's own `pod` label becomes `exported_pod`, as in a cluster."""
    from jupyterhub_gpu_dev import prometheus as prom

    try:
        proc, url = prom.start(tmp_path_factory.mktemp("prometheus"), exporter.port, SCRAPE)
    except prom.PrometheusMissing as e:
        pytest.skip(str(e))
    try:
        yield url
    finally:
        prom.stop(proc)


# ------------------------------------------------------------------ hub


@dataclass
class Hub:
    url: str
    admin_token: str
    culler_token: str
    profiles: Path
    state: Path
    service_port: int
    log: Path
    started: list[str] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return f"{self.url}/hub/api"

    def api(self, method: str, path: str, token: str | None = None, **kw) -> requests.Response:
        kw.setdefault("timeout", 30)
        return requests.request(method, f"{self.api_url}{path}",
                                headers={"Authorization": f"token {token or self.admin_token}"}, **kw)

    @staticmethod
    def user_path(user: str) -> str:
        """`/users/<name>` with the name as one path segment (test users have `?`, `#`, `%` in their names)."""
        return f"/users/{quote(user, safe='')}"

    def server(self, user: str) -> dict | None:
        r = self.api("GET", self.user_path(user))
        return r.json()["servers"].get("") if r.ok else None

    def start(self, users: dict[str, str], timeout: float = 90) -> None:
        """Start one default server per user with user_options {"profile": slug}; wait until all are ready."""
        r = self.api("POST", "/users", json={"usernames": [
            u for u in users if self.api("GET", self.user_path(u)).status_code == 404]})
        assert r.status_code in (201, 400, 409), r.text
        for user, profile in users.items():
            r = self.api("POST", f"{self.user_path(user)}/server", json={"profile": profile})
            assert r.status_code in (201, 202), (user, r.status_code, r.text)
            self.started.append(user)
        deadline = time.monotonic() + timeout
        waiting = set(users)
        while waiting and time.monotonic() < deadline:
            waiting = {u for u in waiting if not (self.server(u) or {}).get("ready")}
            time.sleep(0.3)
        assert not waiting, f"servers not ready: {waiting}; hub log {self.log}"

    def touch(self, *users: str, at: datetime | None = None) -> None:
        """Report activity now (or `at`), as a busy kernel's server does."""
        now = (at or datetime.now(timezone.utc)).isoformat()
        for u in users:
            r = self.api("POST", f"{self.user_path(u)}/activity", json={"last_activity": now,
                                                                "servers": {"": {"last_activity": now}}})
            assert r.ok, r.text

    def stop_all(self) -> None:
        for u in self.started:
            self.api("DELETE", f"{self.user_path(u)}/server")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(self.server(u) for u in self.started):
            time.sleep(0.3)
        self.started.clear()

    def user_token(self, user: str) -> str:
        r = self.api("POST", f"{self.user_path(user)}/tokens", json={"note": "culler test", "expires_in": 3600})
        assert r.status_code == 201, r.text
        return r.json()["token"]

    def cull(self, *args: str, prometheus: str | None = None, timeout: float = 120) -> "CullRun":
        """One cycle of `python -m jupyterhub_gpu.services.culler --once` with the culler service's (least-scope)
        token."""
        cmd = [sys.executable, "-m", "jupyterhub_gpu.services.culler", "--once", f"--url={self.api_url}",
               f"--profiles-file={self.profiles}", f"--namespace={NAMESPACE}", f"--scrape-interval={SCRAPE}",
               "--warn-before=3", "--timeout=3600", *args]
        if prometheus:
            cmd.append(f"--prometheus-url={prometheus}")
        env = dict(os.environ, JUPYTERHUB_API_TOKEN=self.culler_token)
        env.pop("JUPYTERHUB_SERVICE_URL", None)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=self.state)
        assert p.returncode == 0, p.stderr[-3000:]
        return CullRun(p.stdout, p.stderr)


@dataclass
class CullRun:
    stdout: str
    stderr: str

    @property
    def events(self) -> list[dict]:
        out = []
        for line in self.stdout.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def decision(self, user: str) -> dict:
        found = [e for e in self.events if e.get("event") == "cull-decision" and e.get("user") == user]
        assert found, f"no decision for {user}:\n{self.stdout}\n{self.stderr[-2000:]}"
        return found[-1]


def write_hub_config(state: Path, port: int, profiles: Path, admin_token: str, culler_token: str,
                     service_port: int) -> Path:
    service, role = culler_service(str(profiles), port=service_port, env={}, options={
        "dry-run": "true", "cull-every": "1", "warn-before": "8", "namespace": NAMESPACE,
        "timeout": "3600", "scrape-interval": str(SCRAPE), "warnings-file": str(state / "warnings.json")})
    service["api_token"] = culler_token
    service["environment"] = {"GPUHUB_CULLER_IP": "127.0.0.1"}
    assert sorted(role["scopes"]) == sorted(SCOPES)
    tester = {"name": "tester", "api_token": admin_token}
    tester_role = {"name": "tester-role", "services": ["tester"],
                   "scopes": ["admin:users", "admin:servers", "users:activity", "tokens", "read:users"]}
    path = state / "jupyterhub_config.py"
    path.write_text(f"""# generated by tests/culler/fixtures.py
c = get_config()  # noqa: F821
{loopback_lines(state, port)}
c.JupyterHub.template_vars = {{"announcement": __import__("jupyterhub_gpu.services.culler.banner", \
fromlist=["x"]).Announcement(
    {str(state / "warnings.json")!r})}}
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {{"boss"}}
c.JupyterHub.allow_named_servers = True
c.JupyterHub.spawner_class = "simple"
c.Spawner.args = ["--allow-root"] if __import__("os").geteuid() == 0 else []
c.Spawner.default_url = "/api"
# where the lab's culling route finds the culler: configured, never guessed from a request's Host header
c.Spawner.environment = {{"GPUHUB_CULLER_URL": "http://127.0.0.1:{port}/services/gpu-culler/"}}
c.Spawner.start_timeout = 90
c.Spawner.http_timeout = 90
c.SimpleLocalProcessSpawner.home_dir_template = {str(state / 'homes' / '{username}')!r}
c.JupyterHub.services = {[service, tester]!r}
c.JupyterHub.load_roles = {[role, tester_role]!r}
""")
    return path


@pytest.fixture(scope="session")
def hub(tmp_path_factory):
    state = tmp_path_factory.mktemp("hub")
    profiles = state / "profiles.yaml"
    profiles.write_text(yaml.safe_dump(PROFILES, sort_keys=False))
    port, service_port = free_port(), free_port()
    admin_token, culler_token = secrets.token_hex(16), secrets.token_hex(16)
    config = write_hub_config(state, port, profiles, admin_token, culler_token, service_port)
    log_path = state / "jupyterhub.log"
    log = log_path.open("wb")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=state, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    h = Hub(url, admin_token, culler_token, profiles, state, service_port, log_path)
    try:
        _wait_http(f"{url}/hub/api/", 90, proc, f"jupyterhub (log {log_path})")
        yield h
    finally:
        try:
            h.stop_all()
        finally:
            _stop(proc)


@pytest.fixture
def fresh(hub):
    """Each test starts its own servers and leaves none behind (a cull cycle sees every server)."""
    yield hub
    hub.stop_all()
