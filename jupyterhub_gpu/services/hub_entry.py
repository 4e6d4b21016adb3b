"""What every hub-side service entry shares (the usage page and collector, the admins' console): the on/off
switch from configure()'s argument or the hub's environment, the environment that reaches the API server,
and where the page listens."""
from __future__ import annotations

from typing import Mapping
from urllib.parse import ParseResult

#: Values of a switch variable that turn a service off.
OFF = ("0", "false", "no", "off")
#: What a service needs of the hub's environment to reach the API server (in-cluster, or a kubeconfig).
KUBE_ENV = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG")


def switched_on(value: bool | None, env: Mapping[str, str], variable: str) -> bool:
    """configure()'s argument, else $variable (off/false/0/no: off), else on."""
    if value is not None:
        return bool(value)
    return env.get(variable, "").strip().lower() not in OFF


def listen_address(url: ParseResult) -> str:
    """Loopback when the proxy reaches the page there; a host name (z2jh: http://hub:PORT) means all interfaces."""
    return url.hostname if url.hostname in ("127.0.0.1", "localhost", "::1") else ""
