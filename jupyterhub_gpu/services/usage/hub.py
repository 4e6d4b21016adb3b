"""The usage collector and the showback page as hub-managed services: `usage_services()` gives their
entries and the page's access scope; `jupyterhub_gpu.config.configure` puts them into the hub's config (on by
default; `configure(c, usage=False)` or GPUHUB_USAGE=off turns both off).

Both run inside the hub pod, so they share one store folder: by default `gpuhub-usage/` in the hub's
working directory, which in z2jh is /srv/jupyterhub, the hub's own persistent volume (the sqlite database
lives there too). The collector talks to the Kubernetes API with the hub's service account
(deploy/rbac.yaml grants the hub what it lists); managed services get a clean environment, so the API
server's address (or $KUBECONFIG) is passed on.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Mapping

from jupyterhub_gpu.contract import USAGE_COLLECTOR_SERVICE, USAGE_SERVICE
from jupyterhub_gpu.contract import USAGE_PORT as PAGE_PORT  # gpu-jobs 10101, the culler 10102
from jupyterhub_gpu.services.hub_entry import KUBE_ENV, switched_on
from jupyterhub_gpu.services.usage.metrics_http import ENV_TOKEN as METRICS_TOKEN_ENV

METRICS_PORT = 9402  # the collector's /metrics, for Prometheus
#: What users need to open their own page (the page itself needs no hub API scope: it only identifies callers).
ACCESS = f"access:services!service={USAGE_SERVICE}"
#: Hub environment read here.
ENV_ENABLED, ENV_STORE, ENV_PROMETHEUS = "GPUHUB_USAGE", "GPUHUB_USAGE_STORE", "GPUHUB_USAGE_PROMETHEUS_URL"
ENV_PAGE_URL = "GPUHUB_USAGE_URL"  # the page's full URL when the proxy runs in another pod (z2jh: http://hub:10103)


def usage_enabled(value: bool | None, env: Mapping[str, str]) -> bool:
    """configure()'s `usage` argument, else $GPUHUB_USAGE (off/false/0/no: off), else on."""
    return switched_on(value, env, ENV_ENABLED)


def prometheus_url(env: Mapping[str, str]) -> str | None:
    """Where DCGM use is read for right-sizing hints (the page's and the picker's)."""
    return env.get(ENV_PROMETHEUS) or env.get("GPUHUB_CULLER_PROMETHEUS_URL") or None


def usage_services(profiles_file: str, *, env: Mapping[str, str], host: str | None = None,
                   ports: Mapping[str, int] | None = None, options: Mapping[str, Mapping[str, Any]] | None = None,
                   environment: Mapping[str, Mapping[str, str]] | None = None) -> list[dict[str, Any]]:
    """The collector's and the page's `c.JupyterHub.services` entries.

    `ports`: per service name (page default 10103; the collector's /metrics 9402). `options`: per service,
    by command-line name (`{"gpu-usage-collector": {"every": 30, "retention": "400d"}}`). Store:
    $GPUHUB_USAGE_STORE, else `gpuhub-usage` in the hub's working directory. Right-sizing hints on the page
    need Prometheus: $GPUHUB_USAGE_PROMETHEUS_URL, else $GPUHUB_CULLER_PROMETHEUS_URL.
    """
    ports, options, environment = dict(ports or {}), dict(options or {}), dict(environment or {})
    store = os.path.abspath(env.get(ENV_STORE) or "gpuhub-usage")
    # the API server's address, and the bearer token the collector's /metrics asks of Prometheus
    kube = {k: env[k] for k in (*KUBE_ENV, METRICS_TOKEN_ENV) if env.get(k)}
    collector_opts = {"profiles-file": profiles_file, "store": store,
                      "hub-namespace": env.get("POD_NAMESPACE") or "jhub",  # z2jh sets it in the hub pod
                      "port": ports.get(USAGE_COLLECTOR_SERVICE, METRICS_PORT),
                      **options.get(USAGE_COLLECTOR_SERVICE, {})}
    collector = {"name": USAGE_COLLECTOR_SERVICE, "display": False,
                 "command": [sys.executable, "-m", "jupyterhub_gpu.services.usage"]
                 + [f"--{k}={v}" for k, v in collector_opts.items()],
                 "environment": {**kube, **environment.get(USAGE_COLLECTOR_SERVICE, {})}}
    page_opts: dict[str, Any] = {"store": store}
    prometheus = prometheus_url(env)
    if prometheus:
        page_opts.update({"profiles-file": profiles_file, "prometheus-url": prometheus})
    page_opts.update(options.get(USAGE_SERVICE, {}))
    port = ports.get(USAGE_SERVICE, PAGE_PORT)
    url = f"http://{host}:{port}" if host else env.get(ENV_PAGE_URL) or f"http://127.0.0.1:{port}"
    page = {"name": USAGE_SERVICE, "url": url, "oauth_no_confirm": True, "display": True,
            "command": [sys.executable, "-m", "jupyterhub_gpu.services.usage.web"]
            + [f"--{k}={v}" for k, v in page_opts.items()]}
    if environment.get(USAGE_SERVICE):
        page["environment"] = dict(environment[USAGE_SERVICE])
    return [collector, page]
