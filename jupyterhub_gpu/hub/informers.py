"""The hub's ONE watch of pods (and nodes): `CapacityInformers`, built on `kubeio.informer.Informer`.

Decision — one way to watch the cluster in the hub. KubeSpawner's own pod reflector lists and
watches only the hub's server pods (its namespace, label `component=singleuser-server`) and has no
hooks, while live capacity needs every pod on every node. So the hub runs one list + watch of ALL
pods (and one of nodes), `CapacityInformers`, and KubeSpawner's reflector becomes a *view* of it:
`SharedPodReflector` keeps KubeSpawner's `pods` dict with KubeSpawner's own selection (namespace and
labels), fed by the shared informer's events instead of a second watch.
`GPUSpawner` installs it when live capacity is on; with it off, KubeSpawner's reflector runs as is.
The cost: the hub's service account needs list/watch on pods cluster-wide (live capacity needs it
anyway), and a relist when a view joins after the first list.

With a `dra` pool in the profiles file the hub also watches ResourceSlices (cluster-scoped) and ResourceClaims (all
namespaces, like pods: anyone's claim may hold a pool's GPU): a dra pool's GPUs are devices, not allocatable
(`dra_capacity`). Only then: a file without one makes no such request. Their staleness makes the dra profiles'
numbers "unknown", never the other pools'.

With Kueue-queued servers the hub also watches the ClusterQueues (`team_quota.TeamQuotas`, `teams`): the
cards of queued profiles say what the user's team can still take; its staleness is its own (an unread
queue makes a team's quota "unknown", never the pool's numbers).

How an informer treats errors (never as data), timeouts and silent watches: `kubeio.informer.Informer`.
"""
from __future__ import annotations

import asyncio
import time

from kubernetes_asyncio import client

from jupyterhub_gpu.builders.kueue import queues_servers
from jupyterhub_gpu.hub.capacity import ClusterState
from jupyterhub_gpu.hub.team_quota import TeamQuotas
from jupyterhub_gpu.kubeio.informer import Informer, WatchSettings
from jupyterhub_gpu.model.profiles import ProfilesConfig


class CapacityInformers:
    """The hub's one ClusterState with its node and pod informers; the pod informer also feeds
    KubeSpawner's pod reflector (`SharedPodReflector` views)."""

    #: How long `start` waits for the ClusterQueue list after the pods' (the picker says "unknown" meanwhile).
    TEAMS_WAIT_S = 3.0
    #: The same for the ResourceSlice and ResourceClaim lists (dra profiles say "unknown" meanwhile).
    DEVICES_WAIT_S = 3.0

    def __init__(self, cfg: ProfilesConfig, core: client.CoreV1Api, settings: WatchSettings | None = None,
                 custom: client.CustomObjectsApi | None = None, resource: client.ResourceV1Api | None = None):
        self.settings = settings or WatchSettings()
        self.teams = TeamQuotas(custom, self.settings) if custom is not None else None
        self.resource = resource
        self.devices: list[Informer] = []  # ResourceSlices and ResourceClaims: only with a dra pool
        self.state = ClusterState(cfg)
        self.state.is_current = lambda: not self.stale
        self.state.devices_current = lambda: not self.devices_stale
        self.views: list = []  # SharedPodReflector: replace(items), apply(kind, pod)
        self.nodes = Informer("nodes", core.list_node, lambda items: self.state.replace("nodes", items),
                              lambda kind, obj: self.state.apply_node(kind, obj), self.settings)
        self.pods = Informer("pods", core.list_pod_for_all_namespaces, self._replace_pods, self._apply_pod,
                             self.settings)

    def _replace_pods(self, items: list[dict]) -> None:
        self.state.replace("pods", items)
        for view in self.views:
            view.replace(items)

    def _apply_pod(self, kind: str, pod: dict) -> None:
        self.state.apply_pod(kind, pod)
        for view in self.views:
            view.apply(kind, pod)

    def attach(self, view) -> None:
        """A new view is filled by the next list: the first one, or a fresh one if that has passed."""
        self.views.append(view)
        if self.pods.synced.is_set():
            self.pods.relist()

    def detach(self, view) -> None:
        if view in self.views:
            self.views.remove(view)

    @property
    def stale(self) -> bool:
        return self.nodes.stale or self.pods.stale

    @property
    def devices_stale(self) -> bool:
        """The dra pools' devices are not known: not watched (no client), not listed yet, or failing."""
        return not self.devices or any(i.stale for i in self.devices)

    @property
    def requests(self) -> int:
        return self.nodes.requests + self.pods.requests + sum(i.requests for i in self.devices)

    def _devices_wanted(self, cfg: ProfilesConfig) -> bool:
        """Create the ResourceSlice and ResourceClaim informers when the file has a dra pool (and a client)."""
        if self.resource is None or not any(p.is_dra for p in cfg.pools.values()):
            return False
        if not self.devices:
            self.devices = [
                Informer("resourceslices", self.resource.list_resource_slice,
                         lambda items: self.state.replace("resourceslices", items),
                         lambda kind, obj: self.state.apply_slice(kind, obj), self.settings),
                Informer("resourceclaims", self.resource.list_resource_claim_for_all_namespaces,
                         lambda items: self.state.replace("resourceclaims", items),
                         lambda kind, obj: self.state.apply_claim(kind, obj), self.settings)]
        return True

    def reconfigure(self, cfg: ProfilesConfig) -> None:
        """A changed profiles file: a new state, filled by fresh lists (views keep theirs meanwhile)."""
        is_current, devices_current = self.state.is_current, self.state.devices_current
        self.state = ClusterState(cfg)
        self.state.is_current, self.state.devices_current = is_current, devices_current
        had_devices = bool(self.devices)
        for informer in (self.nodes, self.pods, *(self.devices if self._devices_wanted(cfg) else ())):
            informer.synced.clear()
            informer.relist()
        if had_devices and not self._devices_wanted(cfg):
            self._stop_devices()
        self._start_teams(cfg)

    def _stop_devices(self) -> None:
        """No dra pool any more: the device watches end (in the background; nothing waits for them)."""
        informers, self.devices = self.devices, []
        for informer in informers:
            asyncio.ensure_future(informer.stop())

    def _start_teams(self, cfg: ProfilesConfig) -> bool:
        """Watch the ClusterQueues when the file has teams and queues some profile's servers."""
        if self.teams is None or not cfg.teams or not any(queues_servers(cfg, p) for p in cfg.profiles):
            return False
        self.teams.start()
        return True

    async def start(self, timeout: float = 10) -> bool:
        """Start them; wait up to `timeout` s for their lists (nodes first, so pods are attributed to their
        node's pool from the start; then a dra pool's devices). Returns whether nodes and pods synced; if not,
        the state says unknown until then."""
        deadline = time.monotonic() + timeout
        self.nodes.start()
        await self.nodes.wait_synced(timeout)
        self.pods.start()
        await self.pods.wait_synced(max(deadline - time.monotonic(), 0.1))
        if self._devices_wanted(self.state.cfg):
            for informer in self.devices:
                informer.start()
            until = min(deadline, time.monotonic() + self.DEVICES_WAIT_S)
            for informer in self.devices:
                await informer.wait_synced(max(until - time.monotonic(), 0.1))
        if self._start_teams(self.state.cfg):
            await self.teams.informer.wait_synced(min(self.TEAMS_WAIT_S, max(deadline - time.monotonic(), 0.1)))
        return not self.stale

    async def stop(self) -> None:
        await self.nodes.stop()
        await self.pods.stop()
        for informer in self.devices:
            await informer.stop()
        if self.teams is not None:
            await self.teams.stop()
