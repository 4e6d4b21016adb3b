"""GPU-aware idle culling: a hub service built on jupyterhub-idle-culler (see service.py, decide.py).

`culler_service()` is the service's entry and its least-privilege role; `jupyterhub_gpu.config.configure`
puts them into the hub's config.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Mapping

from jupyterhub_gpu.contract import CULLER_SERVICE as SERVICE_NAME
from jupyterhub_gpu.contract import JOBS_ACCESS_SCOPE

DEFAULT_PORT = 10102  # gpu-jobs uses 10101
#: The culler's role and its scopes: exactly what culling (and forwarding its warnings) needs.
ROLE = f"{SERVICE_NAME}-role"
SCOPES = ["list:users", "read:users:activity", "read:servers", "delete:servers",
          JOBS_ACCESS_SCOPE]  # to hand new warnings to gpu-jobs, which notifies users who opted in
#: Hub environment read here: the warnings/metrics server's port, and its full URL when the proxy runs in
#: another pod (e.g. http://hub:10102; a host name makes the culler listen on all interfaces).
ENV_PORT, ENV_URL = "GPUHUB_CULLER_PORT", "GPUHUB_CULLER_URL"

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
                   host: str | None = None, options: Mapping[str, Any] | None = None,
                   environment: Mapping[str, str] | None = None,
                   env: Mapping[str, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(service, role) for `c.JupyterHub.services` / `c.JupyterHub.load_roles`.

    The hub starts it (`python -m jupyterhub_gpu.services.culler ...`) and proxies `/services/<name>/` to its
    warnings/metrics server on `port`. Options: GPUHUB_CULLER_* from `env` (default os.environ),
    then `options` (`{"gpu-idle-policy": "gpu", ...}`, the command-line names). `host`: where the proxy
    reaches it (default loopback, or $GPUHUB_CULLER_URL). `environment`: extra env of the service process.
    """
    env = os.environ if env is None else env
    port = port or int(env.get(ENV_PORT) or DEFAULT_PORT)
    opts: dict[str, Any] = {"profiles-file": profiles_file}
    for var, opt in ENV_OPTIONS.items():
        if env.get(var):
            opts[opt] = env[var]
    opts.update(options or {})
    command = [sys.executable, "-m", "jupyterhub_gpu.services.culler"] + [f"--{k}={v}" for k, v in opts.items()]
    url = f"http://{host}:{port}" if host else env.get(ENV_URL) or f"http://127.0.0.1:{port}"
    service = {"name": name, "command": command, "url": url, "display": False}
    if environment:
        service["environment"] = dict(environment)
    role = {"name": f"{name}-role", "description": "GPU-aware idle culler (least privilege)",
            "scopes": list(SCOPES), "services": [name]}
    return service, role
