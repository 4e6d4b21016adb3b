"""Wire the `gpu-jobs` service into a JupyterHub config (used by jupyterhub_config.py and the dev hub).

Least privilege: the service's token may read users (groups, admin flag); users' own tokens, including
the server token the kernel sees as $JUPYTERHUB_API_TOKEN, get `access:services!service=gpu-jobs`.
"""
from __future__ import annotations

import os
import sys

from gpu_spawner.contract import ENV_JOBS_URL, ENV_PROFILES, JOBS_SERVICE as SERVICE_NAME

DEFAULT_PORT = 10101
ACCESS = f"access:services!service={SERVICE_NAME}"


def passthrough() -> dict[str, str]:
    """Managed services get a clean environment: pass on what the service needs to reach the cluster."""
    keep = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG", ENV_PROFILES,
            "GPUHUB_RUNNER_IMAGE", "GPUHUB_JOBS_STORAGE_CLASS", "HOME")
    return {k: os.environ[k] for k in keep if k in os.environ}


def _current(c, name: str) -> list:
    """A list setting of c.JupyterHub as set so far (unset reads as a lazy value, not a list)."""
    value = c.JupyterHub[name] if name in c.JupyterHub else []
    return list(value) if isinstance(value, (list, tuple)) else []


#: Where kernels reach the service: the proxy (z2jh's `proxy-public` Service) routes /services/gpu-jobs/.
DEFAULT_URL_FOR_SERVERS = "http://proxy-public/services/gpu-jobs/"


def configure(c, profiles_file: str, port: int = DEFAULT_PORT, environment: dict | None = None,
              args: list[str] | None = None, url_for_servers: str | None = None,
              options: dict | None = None) -> None:
    """Add (or replace) the managed service, its role, and the users' access to it; tell servers
    ($GPUHUB_JOBS_URL) where to reach it. `options`: the service's settings by their command-line names
    (`{"storage-class": "azurefile-csi-retain", "max-timeout": "3d"}`; see jobs_service/options.py)."""
    args = [*(args or []), *(f"--{k}={v}" for k, v in (options or {}).items())]
    # $GPUHUB_JOBS_SERVICE_URL: where the proxy reaches the service when it runs in another pod (z2jh: http://hub:10101)
    url = os.environ.get("GPUHUB_JOBS_SERVICE_URL") or f"http://127.0.0.1:{port}"
    service = {"name": SERVICE_NAME, "url": url, "display": False,
               "oauth_no_confirm": True,
               "command": [sys.executable, "-m", "gpu_spawner.services.jobs", "--profiles", profiles_file, *args],
               "environment": {**passthrough(), **(environment or {})}}
    services = [s for s in _current(c, "services") if s.get("name") != SERVICE_NAME]
    c.JupyterHub.services = services + [service]
    roles = [r for r in _current(c, "load_roles") if r.get("name") not in (f"{SERVICE_NAME}-service", "user")]
    roles.append({"name": f"{SERVICE_NAME}-service", "scopes": ["read:users"], "services": [SERVICE_NAME]})
    roles.append({"name": "user", "scopes": ["self", ACCESS]})
    c.JupyterHub.load_roles = roles
    env = c.GPUSpawner["environment"] if "environment" in c.GPUSpawner else {}
    env = dict(env) if isinstance(env, dict) else {}
    env[ENV_JOBS_URL] = url_for_servers or os.environ.get("GPUHUB_JOBS_PUBLIC_URL", DEFAULT_URL_FOR_SERVERS)
    c.GPUSpawner.environment = env
    c.Spawner.server_token_scopes = ["access:servers!server", "users:activity!user", ACCESS]
