"""The admin console as a hub-managed service: `admin_service()` gives its `c.JupyterHub.services` entry and its
role; `jupyterhub_gpu.config.configure` puts them into the hub's config (on by default; `configure(c, admin=False)`
or GPUHUB_ADMIN_CONSOLE=off turns it off).

Only admins open it: JupyterHub's `admin` role has `access:services`, users' roles get no access to it (the hub
answers them 403), and the page itself refuses any caller whose hub model is not an admin's. Its own token may
list users and read their servers (`SCOPES`), to name the servers whose profile a new file would remove. It
runs inside the hub pod and reads the cluster with the hub's service account (deploy/rbac.yaml), so the API
server's address (or $KUBECONFIG) is passed on.
"""
from __future__ import annotations

import sys
from typing import Any, Mapping

from jupyterhub_gpu.contract import ADMIN_PORT
from jupyterhub_gpu.services.hub_entry import KUBE_ENV, switched_on

SERVICE = "gpu-admin"
PORT = ADMIN_PORT  # gpu-jobs 10101, the culler 10102, the showback page 10103
ROLE = f"{SERVICE}-service"
#: The page's own token: the users and their servers (the profile each one was started with).
SCOPES = ["list:users", "read:users:name", "read:servers"]
#: Hub environment read here.
ENV_ENABLED = "GPUHUB_ADMIN_CONSOLE"
ENV_PAGE_URL = "GPUHUB_ADMIN_URL"  # the page's full URL when the proxy runs in another pod (z2jh: http://hub:10104)


def admin_enabled(value: bool | None, env: Mapping[str, str]) -> bool:
    """configure()'s `admin` argument, else $GPUHUB_ADMIN_CONSOLE (off/false/0/no: off), else on."""
    return switched_on(value, env, ENV_ENABLED)


def admin_service(profiles_file: str, *, env: Mapping[str, str], host: str | None = None, port: int | None = None,
                  options: Mapping[str, Any] | None = None, environment: Mapping[str, str] | None = None,
                  activity_interval: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the page's service entry, its role).

    Where the proxy reaches it: `port` (default 10104) on `host` (z2jh: "hub"), else $GPUHUB_ADMIN_URL, else
    on loopback. `options`: by command-line name (`{"hub-namespace": "jhub"}`).
    """
    opts: dict[str, Any] = {"profiles-file": profiles_file, "hub-namespace": env.get("POD_NAMESPACE") or "jhub"}
    if activity_interval:
        opts["activity-interval"] = int(activity_interval)  # the idle-timeout check of `gpuhub validate`
    opts.update(options or {})
    if host:
        url = f"http://{host}:{port or PORT}"
    elif env.get(ENV_PAGE_URL) and port is None:
        url = env[ENV_PAGE_URL]
    else:
        url = f"http://127.0.0.1:{port or PORT}"
    kube = {k: env[k] for k in KUBE_ENV if env.get(k)}
    service = {"name": SERVICE, "url": url, "oauth_no_confirm": True, "display": True,
               "command": [sys.executable, "-m", "jupyterhub_gpu.services.admin.web"]
               + [f"--{k}={v}" for k, v in opts.items()],
               "environment": {**kube, **(environment or {})}}
    role = {"name": ROLE, "scopes": list(SCOPES), "services": [SERVICE]}
    return service, role
