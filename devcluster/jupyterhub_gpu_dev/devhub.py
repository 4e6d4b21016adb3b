"""A real JupyterHub (with configurable-http-proxy from npm) wired to the dev cluster.

Used by `gpuhub dev` and the end-to-end tests. Its config calls the same `jupyterhub_gpu.config.configure`
as the repo's `jupyterhub_config.py` and z2jh's extraConfig (so what is tested is the production wiring),
with dev settings around it: loopback ports, the DevAuthenticator, the local proxy, the dev namespace.
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from jupyterhub_gpu_dev.simulator_keys import DEV_AGENT_LABEL
from jupyterhub_gpu_dev.storage import cluster_share, ensure_datasets, ensure_home_share, home_namespaces

REPO = Path(__file__).resolve().parents[2]  # the checkout (this package is devcluster/jupyterhub_gpu_dev/)
NAMESPACE = "jhub"


class HubError(RuntimeError):
    """The hub could not start; the message names its log file."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def stable_port(state_dir: Path, name: str) -> int:
    """The loopback port of the hub's `name` (its API, the proxy's API, a service), chosen free once and kept in
    `state_dir`: a hub started again on the same state answers where it did, as behind z2jh's Services, so
    servers and services that outlived it (and their environment) still reach it. A kept port that something
    else holds now is chosen anew (a hub's restart frees its own ports before it starts again)."""
    import json

    path = state_dir / "ports.json"
    try:
        ports = json.loads(path.read_text())
    except (OSError, ValueError):
        ports = {}
    if not isinstance(ports.get(name), int) or not _bindable(ports[name]):
        ports[name] = free_port()
        state_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(ports))
    return ports[name]


def proxy_command() -> str:
    """configurable-http-proxy from the repo's node_modules (`npm ci`), else from PATH."""
    local = REPO / "node_modules" / ".bin" / "configurable-http-proxy"
    found = str(local) if local.exists() else shutil.which("configurable-http-proxy")
    if not found:
        raise HubError("configurable-http-proxy is not installed: run `npm ci` in the repo (make install does).")
    return found


@dataclass
class HubSettings:
    state_dir: Path
    profiles: Path
    kubeconfig: Path
    port: int = 8000
    groups: dict[str, list[str]] = field(default_factory=dict)
    admin_users: tuple[str, ...] = ("admin",)
    api_tokens: dict[str, str] = field(default_factory=dict)  # service name → token (tests)
    extra: str = ""  # more config lines (tests)
    before: str = ""  # config lines before `configure` (what its checks read, e.g. the day replay's intervals)
    jobs_port: int | None = None  # the gpu-jobs service (default: a free port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def activity_lines(seconds: int) -> str:
    """Config lines for JupyterHub's two activity intervals, set together (the hub's proxy poll and the
    servers' reports, 300 s each by default): the product refuses an idle_timeout shorter than either."""
    from jupyterhub_gpu.model.activity import ACTIVITY_INTERVAL_ENV

    return (f"c.JupyterHub.last_activity_interval = {int(seconds)}\n"
            f"c.Spawner.environment = {{{ACTIVITY_INTERVAL_ENV!r}: '{int(seconds)}'}}")


def loopback_lines(state_dir: Path, port: int) -> str:
    """Config lines every local hub shares: loopback only, internal ports free and kept in `state_dir`, the repo's
    proxy, and its database, cookie secret and pid file in `state_dir` (several hubs may run at once)."""
    return f'''c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {stable_port(state_dir, "hub-api")}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{stable_port(state_dir, "proxy-api")}"
c.ConfigurableHTTPProxy.command = [{proxy_command()!r}]
c.JupyterHub.db_url = "sqlite:///{state_dir / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = {str(state_dir / 'cookie_secret')!r}
c.JupyterHub.pid_file = {str(state_dir / 'jupyterhub.pid')!r}'''


#: The hub-managed services that listen (each on a port of its own, kept across the hub's restarts).
SERVICE_PORTS = ("gpu-jobs", "gpu-culler", "gpu-usage", "gpu-usage-collector", "gpu-admin")


def write_config(s: HubSettings) -> Path:
    """The dev layer: loopback only, DevAuthenticator, local proxy; then the repo's own config."""
    import yaml

    s.state_dir.mkdir(parents=True, exist_ok=True)
    groups = s.state_dir / "groups.yaml"
    groups.write_text(yaml.safe_dump(s.groups))
    services = [{"name": name, "api_token": tok} for name, tok in s.api_tokens.items()]
    roles = [{"name": f"{name}-role", "scopes": ["admin:users", "admin:servers", "read:metrics", "list:users",
                                                "read:users", "access:servers"], "services": [name]}
             for name in s.api_tokens]
    ports = {name: stable_port(s.state_dir, name) for name in SERVICE_PORTS}
    if s.jobs_port:
        ports["gpu-jobs"] = s.jobs_port
    path = s.state_dir / "jupyterhub_dev_config.py"
    path.write_text(f'''# Generated by devcluster/jupyterhub_gpu_dev/devhub.py for `gpuhub dev` / tests: DEV ONLY.
c = get_config()  # noqa: F821
{s.before}
# the production wiring (spawner, gpu-jobs, culler, roles), on free ports: several dev hubs may run at once
from jupyterhub_gpu.config import configure
configure(c, {str(s.profiles)!r},
          ports={ports!r},
          environment={{"gpu-jobs": {{"KUBECONFIG": {str(s.kubeconfig)!r}, "GPUHUB_PROFILES": {str(s.profiles)!r}}}}},
          # DEV ONLY: gpu-jobs reads Job pods' logs from the dev agent's (SIMULATOR) files
          options={{"gpu-jobs": {{"GPUJobs.log_source_class": "jupyterhub_gpu_dev.agent_logs.AgentLogs",
                                 "AgentLogs.state_dir": {str(s.state_dir)!r},
                                 "GPUJobs.pod_labels": "{DEV_AGENT_LABEL}=run"}}}},
          jobs_url_for_servers={s.url + "/services/gpu-jobs/"!r})
{loopback_lines(s.state_dir, s.port)}
c.JupyterHub.authenticator_class = "jupyterhub_gpu_dev.devauth.DevAuthenticator"
c.DevAuthenticator.groups_file = {str(groups)!r}
c.Authenticator.admin_users = {set(s.admin_users)!r}
c.JupyterHub.authenticate_prometheus = False
c.JupyterHub.services = list(c.JupyterHub.services) + {services!r}  # the repo's services stay
c.JupyterHub.load_roles = list(c.JupyterHub.load_roles) + {roles!r}
c.GPUSpawner.namespace = {NAMESPACE!r}
c.GPUSpawner.cmd = ["gpuhub-singleuser"]
c.GPUSpawner.image = "jupyterhub-gpu/singleuser:dev-simulated"
c.GPUSpawner.default_url = "/lab"
c.GPUSpawner.start_timeout = 180
c.GPUSpawner.http_timeout = 120
c.GPUSpawner.events_enabled = True
# pods the dev node agent (SIMULATOR) runs as local processes; KWOK leaves their status to it
c.GPUSpawner.extra_labels = {{{DEV_AGENT_LABEL!r}: "run"}}
c.GPUSpawner.args = ["--allow-root"] if __import__("os").geteuid() == 0 else []
# homes on the dev home share (devcluster/jupyterhub_gpu_dev/storage.py), mounted as z2jh's
# `singleuser.storage.type: static` does
from jupyterhub_gpu.builders.storage import spawner_settings as _home
for _k, _v in _home().items():
    setattr(c.GPUSpawner, _k, _v)
{s.extra}
''')
    return path


def ensure_namespace(kubeconfig: Path) -> None:
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    try:
        api.create_namespace({"metadata": {"name": NAMESPACE}})
    except client.ApiException as e:
        if e.status != 409:
            raise


def xsrf_token(session, page: str) -> str:
    """The form's _xsrf value (JupyterHub also sets it as a cookie)."""
    import re

    m = re.search(r'name="_xsrf" value="([^"]+)"', page)
    return m.group(1) if m else session.cookies.get("_xsrf", "")


def login(url: str, name: str):
    """A requests.Session logged in to a dev hub as `name` (the DevAuthenticator gives the groups)."""
    import requests

    s = requests.Session()
    page = s.get(f"{url}/hub/login", timeout=30)
    r = s.post(f"{url}/hub/login?next=", data={"username": name, "password": "", "_xsrf": xsrf_token(s, page.text)},
               timeout=30)
    r.raise_for_status()
    return s


class DevHub:
    """The hub process: start, wait until it answers, stop (with the proxy it started)."""

    def __init__(self, settings: HubSettings):
        self.settings = settings
        self.log_path = settings.state_dir / "jupyterhub.log"
        #: the dev cluster's home share: every user's home is its {username} folder (its PVs point here)
        self.share = cluster_share(settings.kubeconfig)
        self.proc: subprocess.Popen | None = None

    def cookie_secret(self) -> str:
        """Made once per state: kept across restarts, as z2jh keeps it in the hub's Secret, so logins stay valid."""
        secret = self.settings.state_dir / "cookie_secret"
        if not secret.is_file():
            secret.parent.mkdir(parents=True, exist_ok=True)
            secret.write_text(secrets.token_hex(32))
        secret.chmod(0o600)
        return secret.read_text()

    def start(self, timeout: float = 90) -> "DevHub":
        s = self.settings
        self.cookie_secret()
        ensure_namespace(s.kubeconfig)
        from jupyterhub_gpu.model.profiles_file import load_profiles

        cfg = load_profiles(s.profiles)
        ensure_home_share(s.kubeconfig, home_namespaces(cfg, NAMESPACE), self.share)
        ensure_datasets(s.kubeconfig, cfg, NAMESPACE)
        config_path = write_config(s)
        env = dict(os.environ, KUBECONFIG=str(s.kubeconfig), GPUHUB_PROFILES=str(s.profiles))
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config_path)],
                                     cwd=s.state_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HubError(f"JupyterHub exited with {self.proc.returncode}; log: {self.log_path}\n"
                               + self.log_tail())
            try:
                urllib.request.urlopen(f"{s.url}/hub/api/", timeout=2).read()
                return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise HubError(f"JupyterHub did not answer at {s.url} within {timeout:.0f} s; log: {self.log_path}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 30) -> None:
        """SIGTERM: the hub stops its proxy, its services and (cleanup_servers) the users' pods; after
        `grace` (sooner once stopping.hurry is set) it and every process it started are killed: the
        proxy and services run in sessions of their own, so its process group alone would miss them."""
        from jupyterhub_gpu_dev import procs

        procs.stop_tree(self.proc, grace)
