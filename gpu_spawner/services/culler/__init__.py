"""GPU-aware idle culling: a hub service built on jupyterhub-idle-culler (see service.py, decide.py).

`culler_service()` is what `jupyterhub_config.py` calls to register it with the least scopes it needs.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from gpu_spawner.contract import CULLER_SERVICE as SERVICE_NAME
DEFAULT_PORT = 10102  # gpu-jobs uses 10101
SCOPES = ["list:users", "read:users:activity", "read:servers", "delete:servers"]

#: Environment the hub's config reads to set the culler's options (unset: the culler's defaults).
ENV_OPTIONS = {
    "GPUHUB_CULLER_PROMETHEUS_URL": "prometheus-url",
    "GPUHUB_CULLER_POLICY": "gpu-idle-policy",
    "GPUHUB_CULLER_THRESHOLD": "gpu-idle-threshold",
    "GPUHUB_CULLER_SCRAPE_INTERVAL": "scrape-interval",
    "GPUHUB_CULLER_WARN_BEFORE": "warn-before",
    "GPUHUB_CULLER_EVERY": "cull-every",
    "GPUHUB_CULLER_TIMEOUT": "timeout",
    "GPUHUB_CULLER_DRY_RUN": "dry-run",
    "GPUHUB_CULLER_EXEMPT_ADMINS": "exempt-admins",
    "GPUHUB_CULLER_NAMESPACE": "namespace",
}


def culler_service(profiles_file: str, *, name: str = SERVICE_NAME, port: int | None = None,
                   options: dict[str, Any] | None = None,
                   env: dict[str, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(service, role) for `c.JupyterHub.services` / `c.JupyterHub.load_roles`.

    The hub starts it (`python -m gpu_spawner.services.culler ...`) and proxies `/services/<name>/` to its
    warnings/metrics server on `port`. Options: GPUHUB_CULLER_* from `env` (default os.environ),
    then `options` (`{"gpu-idle-policy": "gpu", ...}`, the command-line names).
    """
    env = os.environ if env is None else env
    port = port or int(env.get("GPUHUB_CULLER_PORT", DEFAULT_PORT))
    opts: dict[str, Any] = {"profiles-file": profiles_file}
    for var, opt in ENV_OPTIONS.items():
        if env.get(var):
            opts[opt] = env[var]
    opts.update(options or {})
    command = [sys.executable, "-m", "gpu_spawner.services.culler"] + [f"--{k}={v}" for k, v in opts.items()]
    # The proxy reaches the service here: loopback when hub and proxy share a machine; in Kubernetes
    # (proxy in its own pod) set GPUHUB_CULLER_URL, e.g. http://hub:10102 (it then listens on 0.0.0.0).
    url = env.get("GPUHUB_CULLER_URL") or f"http://127.0.0.1:{port}"
    service = {"name": name, "command": command, "url": url, "display": False}
    role = {"name": f"{name}-role", "description": "GPU-aware idle culler (least privilege)",
            "scopes": list(SCOPES), "services": [name]}
    return service, role


def _as_list(value) -> list:
    """A config list that may not be set yet (traitlets hands out a LazyConfigValue for unset keys)."""
    return list(value) if isinstance(value, (list, tuple)) else []


def configure(c, profiles_file: str, **kwargs) -> None:
    """Add (or replace) the culler service and its role in a JupyterHub config object, and show each user
    their cull warnings as the banner of the hub's pages."""
    from gpu_spawner.services.culler.banner import Announcement, warnings_file

    path = warnings_file()
    kwargs["options"] = {"warnings-file": str(path), **(kwargs.get("options") or {})}
    service, role = culler_service(profiles_file, **kwargs)
    template_vars = c.JupyterHub.template_vars if isinstance(c.JupyterHub.template_vars, dict) else {}
    c.JupyterHub.template_vars = {**template_vars, "announcement": Announcement(path)}
    c.JupyterHub.services = [s for s in _as_list(c.JupyterHub.services) if s.get("name") != service["name"]] + [
        service]
    c.JupyterHub.load_roles = [r for r in _as_list(c.JupyterHub.load_roles) if r.get("name") != role["name"]] + [
        role]
