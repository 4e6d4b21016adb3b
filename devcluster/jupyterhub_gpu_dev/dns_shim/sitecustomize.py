"""SIMULATOR — loaded by every Python process the dev node agent runs (PYTHONPATH): resolves the pod
hostnames a headless Service would give in a cluster (`<hostname>.<subdomain>`, as a JobSet's ranks
call rank 0) to the loopback pod IPs the agent handed out, from the agent's hosts file. Any other name
goes to the real resolver. A real cluster's DNS does this; the product's code and env are unchanged.
"""
from __future__ import annotations

import json
import os
import socket

_HOSTS = os.environ.get("GPUHUB_DEV_HOSTS", "")
_NAMESPACE = os.environ.get("GPUHUB_DEV_NAMESPACE", "")
# the resolvers as they were before this module ever ran (it may be loaded twice: never wrap itself)
_real_getaddrinfo, _real_gethostbyname, _real_gethostbyname_ex = socket.__dict__.setdefault(
    "_gpuhub_real_resolvers", (socket.getaddrinfo, socket.gethostbyname, socket.gethostbyname_ex))


def _lookup(host):
    """The pod IP for a cluster name, with the pod's DNS search path (<ns>.svc.cluster.local, ...)."""
    if not _HOSTS or not isinstance(host, str):
        return None
    name = host.rstrip(".").lower()
    try:
        with open(_HOSTS) as f:
            table = json.load(f)  # re-read each time: a rank may start before rank 0 has an IP
    except (OSError, ValueError):
        return None
    for candidate in (name, f"{name}.{_NAMESPACE}.svc.cluster.local", f"{name}.svc.cluster.local",
                      f"{name}.cluster.local"):
        if candidate in table:
            return table[candidate]
    return None


def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
    ip = _lookup(host)
    return _real_getaddrinfo(ip or host, port, family, type, proto, flags)


def gethostbyname(host):
    return _lookup(host) or _real_gethostbyname(host)


def gethostbyname_ex(host):
    ip = _lookup(host)
    return (host, [], [ip]) if ip else _real_gethostbyname_ex(host)


if _HOSTS:
    socket.getaddrinfo, socket.gethostbyname, socket.gethostbyname_ex = getaddrinfo, gethostbyname, gethostbyname_ex
