"""The one place that makes Kubernetes API clients and loads the kube config.

`timeout_api_client()`: the asyncio client of a service (gpu-jobs), whose every request has a timeout;
`api_client(kubeconfig)`: the synchronous client of the tools and of gpu-usage ($KUBECONFIG, --kubeconfig,
~/.kube/config, or in-cluster). The hub's own clients are KubeSpawner's (`kubespawner.clients.shared_client`).
"""
from __future__ import annotations

import os
from pathlib import Path

from kubernetes_asyncio import client, config

from jupyterhub_gpu.kubeio.informer import WatchSettings


class TimeoutApiClient(client.ApiClient):
    """A kubernetes_asyncio ApiClient whose every request has a timeout (`request_timeout` seconds) unless
    the call gives its own `_request_timeout`: without one, aiohttp waits forever on a hung API server."""

    def __init__(self, *args, request_timeout: float = WatchSettings.request_timeout, **kwargs):
        super().__init__(*args, **kwargs)
        self.request_timeout = request_timeout

    def request(self, *args, _request_timeout=None, **kwargs):
        return super().request(*args, _request_timeout=_request_timeout or self.request_timeout, **kwargs)


async def timeout_api_client() -> TimeoutApiClient:
    """A service's asyncio client: the kube config of $KUBECONFIG if set, else in-cluster."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig)
    else:
        config.load_incluster_config()
    return TimeoutApiClient()  # every call of the service has a timeout


def api_client(kubeconfig: str | None):
    """A synchronous `kubernetes` client: `kubeconfig`, else $KUBECONFIG, ~/.kube/config, or in-cluster."""
    from kubernetes import client, config

    if kubeconfig:
        if not Path(kubeconfig).is_file():
            raise FileNotFoundError(f"kubeconfig {kubeconfig!r} does not exist")
        return config.new_client_from_config(config_file=kubeconfig)
    env = os.environ.get("KUBECONFIG")
    if env:  # may list several files (merged, like kubectl does)
        if not any(Path(p).is_file() for p in env.split(os.pathsep) if p):
            raise FileNotFoundError(f"kubeconfig {env!r} ($KUBECONFIG) does not exist")
        return config.new_client_from_config()
    if Path(os.path.expanduser("~/.kube/config")).is_file():
        return config.new_client_from_config()
    try:
        config.load_incluster_config()
    except config.ConfigException:
        raise FileNotFoundError("no kubeconfig: set $KUBECONFIG or pass --kubeconfig") from None
    return client.ApiClient()
