"""SIMULATOR — pod hostnames for the dev node agent's processes, as a cluster's DNS serves them.

A pod with `spec.hostname` and `spec.subdomain`, in a namespace with a headless Service of that name
(a JobSet with DNS hostnames makes both), is `<hostname>.<subdomain>.<ns>.svc.cluster.local` in a
cluster. The agent records each such name with the loopback pod IP it gave the pod in one hosts file
(JSON, replaced atomically), and every process it runs loads `dns_shim/sitecustomize.py`, which
resolves those names from the file. Nothing of this reaches the product: its env contract is the same.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

SHIM_DIR = Path(__file__).resolve().parent / "dns_shim"
HOSTS_ENV = "GPUHUB_DEV_HOSTS"
NAMESPACE_ENV = "GPUHUB_DEV_NAMESPACE"
CLUSTER_DOMAIN = "svc.cluster.local"


def pod_fqdn(pod: dict) -> str | None:
    spec = pod.get("spec") or {}
    host, sub = spec.get("hostname"), spec.get("subdomain")
    if not host or not sub:
        return None
    return f"{host}.{sub}.{pod['metadata']['namespace']}.{CLUSTER_DOMAIN}".lower()


class PodHosts:
    """The hosts file: pod key → (name, IP); written whole on every change."""

    def __init__(self, path: Path):
        self.path = path
        self._names: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({name: ip for name, ip in self._names.values()}))
        os.replace(tmp, self.path)

    def add(self, key: str, name: str, ip: str) -> None:
        with self._lock:
            self._names[key] = (name, ip)
            self._write()

    def remove(self, key: str) -> None:
        with self._lock:
            if self._names.pop(key, None) is not None:
                self._write()

    def env(self, namespace: str) -> dict[str, str]:
        """What a pod's process needs to resolve the names (prepended to its PYTHONPATH)."""
        path = os.environ.get("PYTHONPATH", "")
        return {HOSTS_ENV: str(self.path), NAMESPACE_ENV: namespace,
                "PYTHONPATH": f"{SHIM_DIR}{os.pathsep}{path}" if path else str(SHIM_DIR)}
