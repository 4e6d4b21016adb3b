"""Run GPUSpawner's real manifest code path without a hub or a cluster (`gpuhub render pod`, tests).

KubeSpawner's constructor loads a kube config; here it gets a throwaway one whose server is never
contacted, because building a pod manifest makes no API calls.
"""
from __future__ import annotations

import asyncio
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_PLACEHOLDER_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: offline, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: offline, user: {token: offline-render-never-sent}}]
contexts: [{name: offline, context: {cluster: offline, user: offline}}]
current-context: offline
"""


@dataclass
class Group:
    name: str


@dataclass
class OfflineUser:
    """The attributes of a JupyterHub user that KubeSpawner reads while building a manifest."""

    name: str
    groups: list[Group] = field(default_factory=list)
    id: int = 1
    url: str = "/user/"

    @property
    def escaped_name(self) -> str:
        return self.name


def _ensure_kubeconfig() -> None:
    """Give KubeSpawner's config loader a kube config when the machine has none (kubernetes_asyncio reads
    $KUBECONFIG once, at import, so its module default is pointed at the placeholder too)."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return
    current = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    if os.path.exists(current.split(os.pathsep)[0]):
        return
    path = Path(tempfile.gettempdir()) / "gpuhub-offline-kubeconfig.yaml"
    path.write_text(_PLACEHOLDER_KUBECONFIG)
    os.environ["KUBECONFIG"] = str(path)
    from kubernetes_asyncio.config import kube_config

    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(path)


def make_spawner(profiles_file: str | Path, user: str, groups: list[str] = (), **traits: Any):
    """A GPUSpawner for `user` that never talks to a cluster; call inside a running event loop."""
    _ensure_kubeconfig()
    from jupyterhub_gpu.hub.spawner import GPUSpawner

    u = OfflineUser(name=user, groups=[Group(g) for g in groups])
    traits.setdefault("live_capacity", False)  # no cluster to watch
    return GPUSpawner(_mock=True, user=u, profiles_file=str(profiles_file), **traits)


async def pod_manifest(profiles_file: str | Path, profile: str | None, user: str, groups: list[str] = (),
                       **traits: Any) -> dict[str, Any]:
    """The pod GPUSpawner would create: `load_user_options` → `get_pod_manifest`, as a JSON-able dict."""
    _ensure_kubeconfig()
    from kubernetes_asyncio.client import ApiClient

    spawner = make_spawner(profiles_file, user, groups, **traits)
    spawner.user_options = {"profile": profile} if profile else {}
    try:
        await spawner.load_user_options()
        pod = await spawner.get_pod_manifest()
    finally:
        await spawner.api.api_client.close()
    async with ApiClient() as client:
        return client.sanitize_for_serialization(pod)


def render_pod(profiles_file: str | Path, profile: str | None, user: str, groups: list[str] = (),
               namespace: str = "jhub") -> dict:
    """The pod as the hub in `namespace` would create it, namespace included: applied as printed, a queued
    profile's pod lands beside its team's LocalQueue (`gpuhub render kueue --hub-namespace`), not in `default`."""
    pod = asyncio.run(pod_manifest(profiles_file, profile, user, groups, namespace=namespace))
    meta = pod["metadata"]
    pod["metadata"] = {"name": meta.get("name"), "namespace": namespace, **meta}
    return pod
