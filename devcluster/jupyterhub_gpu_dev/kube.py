"""The dev cluster's Kubernetes access for the launcher, tests and benchmarks: the official `kubernetes`
client's DynamicClient, which finds each kind's REST path by discovery, so server-side apply and create
work for any kind (CRDs, webhook configurations, Kueue objects) with manifests sent exactly as given.
"""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import urllib3
from kubernetes import config, dynamic
from kubernetes.client.rest import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

FIELD_MANAGER = "gpuhub-devcluster"

class KubeError(ApiException):
    """A refused request: the HTTP status in `.status`, and the API's own message in the text."""

    def __init__(self, e: ApiException, what: str):
        super().__init__(status=e.status, reason=e.reason)
        self.body, self.headers = e.body, e.headers
        try:
            self.message = json.loads(e.body).get("message") or e.reason
        except (TypeError, ValueError, AttributeError):
            self.message = e.body or e.reason
        self.what = what

    def __str__(self) -> str:
        return f"{self.what}: HTTP {self.status}: {self.message}"


@contextmanager
def _refused(what: str) -> Iterator[None]:
    try:
        yield
    except KubeError:
        raise
    except ApiException as e:
        raise KubeError(e, what) from None


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll `check` until it returns something truthy; TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except (OSError, ApiException, urllib3.exceptions.HTTPError) as e:
            last_error = e
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}"
                       + (f" (last error: {_short(last_error)})" if last_error else ""))


def _short(e: Exception) -> str:
    if isinstance(e, ApiException):
        return f"HTTP {e.status}: {e.reason}"
    return str(e)


def condition_true(obj: dict[str, Any], kind: str) -> bool:
    """Whether the object's status has condition `kind` with status True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


class Kube:
    """One API server, as the kubeconfig's user (the dev cluster's admin); every request has a timeout."""

    def __init__(self, kubeconfig: Path | str, timeout: float = 30):
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.api.configuration.connection_pool_maxsize = 16  # add_nodes creates in parallel
        self.timeout = timeout
        self._cache_file = str(Path(kubeconfig).parent / "discovery-cache.json")  # per cluster, not in /tmp
        self._dyn: dynamic.DynamicClient | None = None

    @property
    def dyn(self) -> dynamic.DynamicClient:
        if self._dyn is None:
            self._dyn = dynamic.DynamicClient(self.api, cache_file=self._cache_file)
        return self._dyn

    def resource(self, api_version: str, kind: str):
        """The API's resource for a kind (discovery is refreshed once if the kind is new, e.g. a fresh CRD)."""
        try:
            return self.dyn.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            raise KeyError(f"the API server does not serve {kind} in {api_version}") from None

    def _of(self, obj: dict[str, Any]):
        return self.resource(obj["apiVersion"], obj["kind"])

    # ------------------------------------------------------------------ objects
    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply (create or update), forcing our field ownership."""
        meta = obj["metadata"]
        with _refused(f"apply {obj['kind']} {meta['name']}"):
            return self._of(obj).server_side_apply(body=obj, name=meta["name"], namespace=meta.get("namespace"),
                                                   field_manager=FIELD_MANAGER, force_conflicts=True,
                                                   _request_timeout=self.timeout).to_dict()

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """POST the manifest exactly as given (no client-side models)."""
        with _refused(f"create {obj['kind']} {obj['metadata'].get('name')}"):
            return self._of(obj).create(body=obj, namespace=obj["metadata"].get("namespace"),
                                        _request_timeout=self.timeout).to_dict()

    def delete(self, obj: dict[str, Any]) -> None:
        """Delete; an object that is already gone is fine."""
        meta = obj["metadata"]
        try:
            with _refused(f"delete {obj['kind']} {meta['name']}"):
                self._of(obj).delete(name=meta["name"], namespace=meta.get("namespace"),
                                     _request_timeout=self.timeout)
        except KubeError as e:
            if e.status != 404:
                raise

    def read(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """One object, or None when it does not exist."""
        try:
            with _refused(f"read {kind} {name}"):
                return self.resource(api_version, kind).get(name=name, namespace=namespace,
                                                            _request_timeout=self.timeout).to_dict()
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: str | None = None) -> list[dict[str, Any]]:
        with _refused(f"list {kind}"):
            return self.resource(api_version, kind).get(namespace=namespace, label_selector=label_selector,
                                                        _request_timeout=self.timeout).to_dict()["items"]

    def close(self) -> None:
        self.api.close()
