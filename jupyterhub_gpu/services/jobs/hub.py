"""The `gpu-jobs` service as JupyterHub sees it: its managed-service entry, its role and the scopes users
need to reach it. `jupyterhub_gpu.config.configure` puts them into the hub's config.

Least privilege: the service's token has no hub scopes (it asks the hub who a caller is with the caller's
own token); users' own tokens, including
the server token the kernel sees as $JUPYTERHUB_API_TOKEN, get `access:services!service=gpu-jobs`.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Mapping

from jupyterhub_gpu.contract import ENV_PROFILES, JOBS_ACCESS_SCOPE, JOBS_SERVICE_SCOPES
from jupyterhub_gpu.contract import JOBS_SERVICE as SERVICE_NAME

DEFAULT_PORT = 10101
#: The service's own role and scopes (what its token may do in the hub).
ROLE = f"{SERVICE_NAME}-service"
SCOPES = list(JOBS_SERVICE_SCOPES)  # none: identity comes from the caller's own token (services/auth.py)
#: What a user's token (and their server's token) needs to call the service.
ACCESS = JOBS_ACCESS_SCOPE

#: Where kernels reach the service: the proxy (z2jh's `proxy-public` Service) routes /services/gpu-jobs/.
DEFAULT_URL_FOR_SERVERS = "http://proxy-public/services/gpu-jobs/"
#: Hub environment read here: the service's port, its full URL when the proxy runs in another pod
#: (z2jh: http://hub:10101), and the URL the users' servers use.
ENV_PORT, ENV_URL, ENV_URL_FOR_SERVERS = "GPUHUB_JOBS_PORT", "GPUHUB_JOBS_SERVICE_URL", "GPUHUB_JOBS_PUBLIC_URL"
#: Set when gpu-jobs runs in its own Deployment under its own ServiceAccount (deploy/gpu-jobs.yaml): the
#: token it shares with the hub. The hub then registers it as an external service at $GPUHUB_JOBS_SERVICE_URL.
ENV_API_TOKEN = "GPUHUB_JOBS_API_TOKEN"
#: Managed services get a clean environment: what the service needs from the hub's to reach the cluster.
PASSTHROUGH = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG", ENV_PROFILES,
               "GPUHUB_RUNNER_IMAGE", "HOME")


def passthrough(env: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {k: env[k] for k in PASSTHROUGH if k in env}


def jobs_service(profiles_file: str, *, port: int | None = None, host: str | None = None,
                 options: Mapping[str, Any] | None = None, environment: Mapping[str, str] | None = None,
                 env: Mapping[str, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(service, role) for `c.JupyterHub.services` / `c.JupyterHub.load_roles`.

    `options`: the service's settings by their command-line names (`{"home-claim": "gpuhub-home",
    "max-timeout": "3d"}`; see options.py). `host`: where the proxy reaches the service (default loopback;
    z2jh: `hub`, and a host name makes the service listen on all interfaces). `env`: the hub's environment
    (default os.environ), read for $GPUHUB_JOBS_PORT / $GPUHUB_JOBS_SERVICE_URL and the passthrough.
    """
    env = os.environ if env is None else env
    port = port or int(env.get(ENV_PORT) or DEFAULT_PORT)
    url = f"http://{host}:{port}" if host else env.get(ENV_URL) or f"http://127.0.0.1:{port}"
    args = [f"--{k}={v}" for k, v in (options or {}).items()]
    role = {"name": ROLE, "description": "gpu-jobs service (least privilege)",
            "scopes": list(SCOPES), "services": [SERVICE_NAME]}
    if env.get(ENV_API_TOKEN):  # its own Deployment: the hub only routes to it (options: its own env)
        return {"name": SERVICE_NAME, "url": env.get(ENV_URL) or url, "api_token": env[ENV_API_TOKEN],
                "display": False, "oauth_no_confirm": True}, role
    service = {"name": SERVICE_NAME, "url": url, "display": False, "oauth_no_confirm": True,
               "command": [sys.executable, "-m", "jupyterhub_gpu.services.jobs", "--profiles", profiles_file, *args],
               "environment": {**passthrough(env), **(environment or {})}}
    return service, role
