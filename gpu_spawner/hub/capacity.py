"""Live GPU capacity per pool and profile, kept up to date from node and pod watch events.

Pure: `ClusterState` folds watch events (dicts, as the API sends them) into per-node usage, so a
picker render reads totals and never calls the API. Informers (`informers.py`) feed it.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable


from gpu_spawner.contract import PROFILE_LABEL
from gpu_spawner.model import quantities
from gpu_spawner.model.node_pools import pool_of
from gpu_spawner.model.profiles import Pool, Profile, ProfilesConfig

TERMINAL_PHASES = ("Succeeded", "Failed")


def _quantities(resources: dict[str, Any] | None) -> Counter:
    out: Counter = Counter()
    for name, value in (resources or {}).items():
        out[name] = float(quantities.parse(value))
    return out


def pod_requests(pod: dict[str, Any]) -> Counter:
    """What the scheduler reserves for a pod: the sum of its containers' requests (extended resources
    may be given as limits only), or the largest init container if that is bigger."""
    spec = pod.get("spec") or {}
    total: Counter = Counter()
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        req = _quantities(res.get("requests"))
        for name, v in _quantities(res.get("limits")).items():
            if name not in req and name not in ("cpu", "memory"):
                req[name] = v
        total.update(req)
    for c in spec.get("initContainers") or []:
        for name, v in _quantities((c.get("resources") or {}).get("requests")).items():
            total[name] = max(total[name], v)
    return total


@dataclass
class NodeState:
    name: str
    pool: str | None
    allocatable: Counter
    schedulable: bool
    mig_state: str | None = None
    used: Counter = field(default_factory=Counter)

    def free(self, resource: str) -> float:
        return self.allocatable.get(resource, 0.0) - self.used.get(resource, 0.0)


@dataclass
class PodState:
    node: str | None
    pool: str | None
    requests: Counter
    profile: str | None
    running: bool = False
    singleuser: bool = False
    uid: str | None = None


def _node_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass
class ProfileCapacity:
    """What the picker shows for one profile."""

    slug: str
    resource: str | None
    total_slots: int
    free_slots: int
    fits_now: int
    waiting: int
    nodes: int
    can_grow: bool
    summary: str
    outlook: str
    known: bool = True  # False: the informers cannot vouch for the numbers (all zero then); say "unknown"

    @property
    def full(self) -> bool:
        return self.known and self.fits_now == 0

    @classmethod
    def unknown(cls, slug: str, resource: str | None) -> "ProfileCapacity":
        return cls(slug, resource, 0, 0, 0, 0, 0, False, "", "", known=False)


class ClusterState:
    """Nodes and pods folded into per-node usage; one instance per hub, fed by watch events."""

    def __init__(self, cfg: ProfilesConfig):
        self.cfg = cfg
        self.nodes: dict[str, NodeState] = {}
        self.pods: dict[str, PodState] = {}
        self.version = 0
        self._by_pool: dict[str | None, dict[str, NodeState]] = {}
        self._memo: dict[str, tuple[int, ProfileCapacity]] = {}
        #: Whether what the informers folded in is complete and current (they set this); when not,
        #: `profile_capacity` answers "unknown" instead of numbers that may be wrong.
        self.is_current: Callable[[], bool] = lambda: True

    # ------------------------------------------------------------------ events
    def _pool_for_labels(self, labels: dict[str, str]) -> str | None:
        return pool_of(self.cfg.pools, labels)

    def apply_node(self, kind: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        self.version += 1
        old = self.nodes.pop(name, None)
        if old is not None:
            self._by_pool.get(old.pool, {}).pop(name, None)
        if kind == "DELETED":
            return
        status, spec = node.get("status") or {}, node.get("spec") or {}
        labels = node["metadata"].get("labels") or {}
        state = NodeState(
            name=name,
            pool=self._pool_for_labels(labels),
            allocatable=_quantities(status.get("allocatable")),
            schedulable=_node_ready(node) and not spec.get("unschedulable"),
            mig_state=labels.get("nvidia.com/mig.config.state"),
        )
        if old is not None:
            state.used = old.used
        else:
            for pod in self.pods.values():
                if pod.node == name:
                    state.used.update(pod.requests)
        self.nodes[name] = state
        self._by_pool.setdefault(state.pool, {})[name] = state

    def apply_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        self.version += 1
        old = self.pods.pop(key, None)
        if old is not None and old.node in self.nodes:
            self.nodes[old.node].used.subtract(old.requests)
        phase = (pod.get("status") or {}).get("phase")
        if kind == "DELETED" or phase in TERMINAL_PHASES:
            return
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        pool = self.nodes[node].pool if node in self.nodes else self._pool_for_labels(spec.get("nodeSelector") or {})
        labels = meta.get("labels") or {}
        uid = meta.get("uid")
        # a pod's resources do not change: parse them once per pod, not at every status update
        requests = old.requests if old is not None and uid and old.uid == uid else pod_requests(pod)
        state = PodState(node=node, pool=pool, requests=requests, profile=labels.get(PROFILE_LABEL),
                         running=phase == "Running", singleuser=labels.get("component") == "singleuser-server",
                         uid=uid)
        self.pods[key] = state
        if node in self.nodes:
            self.nodes[node].used.update(state.requests)

    def replace(self, kind: str, items: Iterable[dict[str, Any]]) -> None:
        """A full relist (start, or after the watch expired): forget what we knew of this kind."""
        if kind == "nodes":
            self.nodes, self._by_pool = {}, {}
            for item in items:
                self.apply_node("ADDED", item)
        else:
            self.pods = {}
            for n in self.nodes.values():
                n.used = Counter()
            for item in items:
                self.apply_pod("ADDED", item)

    # ------------------------------------------------------------------ reading
    def servers_by_profile(self) -> tuple[Counter, Counter]:
        """(running, pending) single-user servers per profile slug, for the hub's metrics."""
        running, pending = Counter(), Counter()
        for p in self.pods.values():
            if p.singleuser and p.profile:
                (running if p.running else pending)[p.profile] += 1
        return running, pending

    def pool_nodes(self, pool_name: str) -> list[NodeState]:
        return list(self._by_pool.get(pool_name, {}).values())

    def waiting(self, pool_name: str, resource: str | None) -> int:
        """Pods asking for this pool's resource that no node has taken yet."""
        return sum(1 for p in self.pods.values()
                   if p.node is None and p.pool == pool_name and (resource is None or p.requests.get(resource)))

    def profile_capacity(self, profile: Profile) -> ProfileCapacity:
        """Recomputed only when a node or pod event arrived since the last call for this profile."""
        if not self.is_current():
            return ProfileCapacity.unknown(profile.slug, self.cfg.resource_name(profile))
        memo = self._memo.get(profile.slug)
        if memo and memo[0] == self.version:
            return memo[1]
        cap = self._compute(profile)
        self._memo[profile.slug] = (self.version, cap)
        return cap

    def _compute(self, profile: Profile) -> ProfileCapacity:
        cfg = self.cfg
        pool = cfg.pool_of(profile)
        resource = cfg.resource_name(profile)
        need = {"cpu": float(profile.cpu), "memory": float(profile.memory_limit)}
        if resource:
            need[resource] = float(profile.gpu.count)
        nodes = self.pool_nodes(profile.pool) if pool else [
            n for name, group in self._by_pool.items() if name is None or not cfg.pools[name].is_gpu
            for n in group.values()]
        total = free = fits = 0
        for n in nodes:
            if resource:
                total += int(n.allocatable.get(resource, 0))
                free += max(0, int(n.free(resource)))
            if n.schedulable:
                fits += max(0, min(math.floor(n.free(r) / v) for r, v in need.items() if v > 0))
        waiting = self.waiting(profile.pool, resource) if pool else 0
        can_grow = pool is not None and pool.max_nodes is not None and pool.max_nodes > len(nodes)
        summary, outlook = describe(profile, pool, resource, total, free, fits, waiting, len(nodes), can_grow)
        return ProfileCapacity(profile.slug, resource, total, free, fits, waiting, len(nodes), can_grow,
                               summary, outlook)


def slot_noun(profile: Profile, pool: Pool | None, plural: bool = True) -> str:
    """How people call one unit of this profile's GPU: 'MIG 1g.10gb slices', 'T4 shares', 'H100 NVL GPUs'."""
    s = "s" if plural else ""
    if profile.gpu is None or pool is None:
        return f"server{s}"
    label = pool.display_name or pool.gpu.model
    label = label.removeprefix("NVIDIA ")
    if profile.gpu.kind == "mig":
        return f"{label} MIG {profile.gpu.profile or next(iter(pool.mig_layout))} slice{s}"
    if profile.gpu.kind == "time-sliced":
        return f"{label} time-slice{s}"
    return f"{label} GPU{s}"


def describe(profile: Profile, pool: Pool | None, resource: str | None, total: int, free: int, fits: int,
             waiting: int, nodes: int, can_grow: bool) -> tuple[str, str]:
    """The picker's plain-language capacity line and what happens if you choose it now."""
    if profile.gpu is None:
        if fits > 0:
            return f"room for {fits} more server{'s' if fits != 1 else ''}", "starts right away"
        return "CPU nodes are full", "waits for room on a CPU node"
    noun = slot_noun(profile, pool)
    if nodes == 0:
        if can_grow:
            return f"no {noun} running now", "the pool scales up from zero: a node takes a few minutes"
        return f"no {noun} in this cluster", "cannot start until an admin adds nodes to this pool"
    if fits > 0:
        return f"{free} of {total} {noun} free", "starts right away"
    queue = f" — {waiting} waiting" if waiting else ""
    if can_grow:
        return f"pool full{queue}", "you will queue while the pool adds a node (a few minutes)"
    return f"pool full{queue}", "you will wait until someone else's server stops"
