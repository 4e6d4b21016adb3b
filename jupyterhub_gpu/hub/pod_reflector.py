"""KubeSpawner's pod reflector as a view of the hub's one pod informer (why one watch: `CapacityInformers`):
KubeSpawner reads `pods` exactly as before, but no second watch runs."""
from __future__ import annotations

import asyncio

from kubespawner.spawner import KubeSpawner, PodReflector
from traitlets import Any as AnyTrait


class SharedPodReflector(PodReflector):
    """KubeSpawner's pod reflector as a view of the hub's one pod informer: the same `pods` dict
    (`namespace/name` → pod) with KubeSpawner's selection, and no watch of its own."""

    informers = AnyTrait(help="The hub's CapacityInformers, whose pod events feed this view.")

    def matches(self, pod: dict) -> bool:
        meta = pod.get("metadata") or {}
        if not self.omit_namespace and meta.get("namespace") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        return all(labels.get(k) == v for k, v in self.labels.items())

    def replace(self, items: list[dict]) -> None:
        self.resources = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in items
                          if self.matches(p)}
        if not self.first_load_future.done():
            self.first_load_future.set_result(None)

    def apply(self, kind: str, pod: dict) -> None:
        if not self.matches(pod):
            return
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        if kind == "DELETED":
            self.resources.pop(key, None)
        else:
            self.resources[key] = pod

    async def start(self):
        """Join the shared informer and wait for the first list, like KubeSpawner's own start(); on
        timeout, raise and leave no half-started view behind (the next call tries again)."""
        self.informers.attach(self)
        timeout = self.informers.settings.request_timeout
        try:
            await asyncio.wait_for(asyncio.shield(self.first_load_future), timeout)
        except asyncio.TimeoutError:
            self.informers.detach(self)
            for key, reflector in list(KubeSpawner.reflectors.items()):
                if reflector is self:
                    del KubeSpawner.reflectors[key]
            raise TimeoutError(f"the pod list did not load in {timeout:.0f} s "
                               f"({self.informers.pods.error or 'the cluster is not answering'})") from None

    async def stop(self):
        self._stopping = True
        self.informers.detach(self)
