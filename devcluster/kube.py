"""A small Kubernetes REST client for the launcher (standard library only).

The launcher runs before any test fixture and on every `gpuhub cluster up`; a few dozen requests do
not justify importing a full client, and server-side apply of arbitrary kinds (CRDs, webhook
configurations, Kueue objects) needs only the path, which discovery gives.
"""
from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable

FIELD_MANAGER = "gpuhub-devcluster"


class KubeError(RuntimeError):
    def __init__(self, status: int, message: str, method: str = "", path: str = ""):
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll `check` until it returns something truthy; TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except (OSError, KubeError) as e:
            last_error = e
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}"
                       + (f" (last error: {last_error})" if last_error else ""))


def condition_true(obj: dict[str, Any], kind: str) -> bool:
    """Whether the object's status has condition `kind` with status True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


class Kube:
    """Talks to one API server with a client certificate; one keep-alive connection per thread."""

    def __init__(self, server: str, ca: Path, cert: Path, key: Path, timeout: float = 30):
        url = urllib.parse.urlsplit(server)
        self.host, self.port, self.timeout = url.hostname, url.port or 443, timeout
        self.ctx = ssl.create_default_context(cafile=str(ca))
        self.ctx.load_cert_chain(str(cert), str(key))
        self._local = threading.local()
        self._resources: dict[str, dict[str, dict]] = {}

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def request(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None,
                content_type: str = "application/json", ok_missing: bool = False) -> Any:
        if params:
            path = f"{path}?{urllib.parse.urlencode(params)}"
        data = None if body is None else (body if isinstance(body, (bytes, str)) else json.dumps(body))
        headers = {"Accept": "application/json", "Content-Type": content_type}
        for attempt in (1, 2):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, ConnectionError, ssl.SSLError):  # a stale keep-alive connection
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        if resp.status == 404 and ok_missing:
            return None
        if resp.status >= 400:
            try:
                message = json.loads(raw).get("message", raw.decode(errors="replace"))
            except ValueError:
                message = raw.decode(errors="replace")
            raise KubeError(resp.status, message, method, path)
        return json.loads(raw) if raw and raw[:1] in (b"{", b"[") else raw.decode(errors="replace")

    def get(self, path: str, **params: str) -> Any:
        return self.request("GET", path, params=params or None)

    # ------------------------------------------------------------------ discovery and apply
    def _group_resources(self, api_version: str) -> dict[str, dict]:
        if api_version not in self._resources:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            found = self.get(base)["resources"]
            self._resources[api_version] = {r["kind"]: r for r in found if "/" not in r["name"]}
        return self._resources[api_version]

    def path_of(self, obj: dict[str, Any], with_name: bool = True) -> str:
        """The REST path of an object (collection path with `with_name=False`)."""
        api_version, kind = obj["apiVersion"], obj["kind"]
        try:
            res = self._group_resources(api_version)[kind]
        except KeyError:
            self._resources.pop(api_version, None)
            raise KeyError(f"the API server does not serve {kind} in {api_version}") from None
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        meta = obj.get("metadata", {})
        if res["namespaced"]:
            base += f"/namespaces/{meta.get('namespace') or 'default'}"
        path = f"{base}/{res['name']}"
        return f"{path}/{meta['name']}" if with_name else path

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply (create or update), forcing our field ownership."""
        return self.request("PATCH", self.path_of(obj), body=obj, content_type="application/apply-patch+yaml",
                            params={"fieldManager": FIELD_MANAGER, "force": "true"})

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", self.path_of(obj, with_name=False), body=obj)

    def delete(self, obj: dict[str, Any]) -> None:
        self.request("DELETE", self.path_of(obj), ok_missing=True)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
