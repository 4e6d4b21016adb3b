"""Live GPU capacity per pool and profile, kept up to date from node and pod watch events.

Pure: `ClusterState` folds watch events (dicts, as the API sends them) into counters, so a picker
render reads totals and never calls the API. The hub's one watch (`CapacityInformers`) feeds it.

Incremental, because a 5,000-node cluster sends pod events all the time: each event takes back what
the object counted before and adds what it counts now, on its own node only — per scope (a pool, or
the CPU nodes outside GPU pools) and resource: node count, total and free slots; per profile: how many
more of its servers fit; per pool and resource: pods no node has taken yet. The cost of an event is
O(profiles), not O(cluster). `recompute` is the exact full scan the counters must always equal (the
property test's oracle). Quantities are kept as integers in thousandths (Kubernetes' own milli
precision), so the counters add and subtract exactly. Per node and per pod only what capacity needs is
kept (slim `__slots__` records, interned request shapes): the hub holds 100,000 of them.

On a `dra` pool the GPUs are devices, not allocatable: a node's GPU amounts come from its ResourceSlices and
the claims that hold them (`dra_capacity.DeviceLedger`, fed by `apply_slice` / `apply_claim`), in the same
counters; a dra pod's claim counts as its profile's GPUs while it waits for a node.
"""
from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, replace
from decimal import ROUND_CEILING
from functools import lru_cache
from typing import Any, Callable, Iterable

from jupyterhub_gpu.contract import PROFILE_LABEL
from jupyterhub_gpu.hub.capacity_text import (  # noqa: F401  (slot_noun: progress)
    describe,
    node_add_seconds,
    or_alternative,
    slot_noun,
)
from jupyterhub_gpu.hub.dra_capacity import DeviceLedger
from jupyterhub_gpu.model import quantities
from jupyterhub_gpu.model.dra import alternative_profiles
from jupyterhub_gpu.model.node_pools import pool_of
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig

TERMINAL_PHASES = ("Succeeded", "Failed")
MILLI = 1000
#: Taints that keep every new pod off a node whatever its profile tolerates: the node lifecycle
#: controller's condition taints and the cluster autoscaler's "about to be removed".
BLOCKING_TAINT_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/shutdown",
                           "ToBeDeletedByClusterAutoscaler")
#: A pair of (resource, thousandths), sorted: how requests and allocatable are kept (shared when equal).
Amounts = tuple[tuple[str, int], ...]


@lru_cache(maxsize=4096)
def _milli(value: str | int | float) -> int | None:
    q = quantities.parse_or_none(value)
    return None if q is None else int((q * MILLI).to_integral_value(rounding=ROUND_CEILING))


def milli(value: Any) -> int | None:
    """A quantity in thousandths, rounded up like the API server's MilliValue; None when not a quantity."""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return None
    return _milli(value)


def _amounts(resources: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    if isinstance(resources, dict):
        for name, value in resources.items():
            if (m := milli(value)) is not None:
                out[name] = m
    return out


def pod_requests(pod: dict[str, Any]) -> dict[str, int]:
    """What the scheduler reserves for a pod, in thousandths: the sum of its containers' requests (extended
    resources may be given as limits only), or the largest init container if that is bigger."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        req = _amounts(res.get("requests"))
        for name, v in _amounts(res.get("limits")).items():
            if name not in req and name not in ("cpu", "memory"):
                req[name] = v
        for name, v in req.items():
            total[name] = total.get(name, 0) + v
    for c in spec.get("initContainers") or []:
        for name, v in _amounts((c.get("resources") or {}).get("requests")).items():
            total[name] = max(total.get(name, 0), v)
    return total


def amount(amounts: Amounts, resource: str) -> int:
    for name, v in amounts:
        if name == resource:
            return v
    return 0


class NodeRecord:
    """What capacity keeps of a node."""

    __slots__ = ("name", "pool", "alloc", "schedulable", "mig_state")

    def __init__(self, name: str, pool: str | None, alloc: Amounts, schedulable: bool, mig_state: str | None):
        self.name, self.pool, self.alloc, self.schedulable, self.mig_state = name, pool, alloc, schedulable, mig_state

    @property
    def allocatable(self) -> dict[str, float]:
        """Allocatable in the units people read (CPUs, bytes, GPUs)."""
        return {name: v / MILLI for name, v in self.alloc}


class PodRecord:
    """What capacity keeps of a pod that is not finished: its node (None: not yet scheduled), the pool its
    nodeSelector names (kept only while unscheduled), its requests, and what the hub's metrics count."""

    __slots__ = ("node", "pool", "requests", "profile", "running", "singleuser")

    def __init__(self, node: str | None, pool: str | None, requests: Amounts, profile: str | None,
                 running: bool, singleuser: bool):
        self.node, self.pool, self.requests = node, pool, requests
        self.profile, self.running, self.singleuser = profile, running, singleuser


def _node_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _blocking_taint(taints: Any) -> bool:
    return any(isinstance(t, dict) and t.get("effect") in ("NoSchedule", "NoExecute")
               and str(t.get("key", "")).startswith(BLOCKING_TAINT_PREFIXES) for t in taints or ())


def node_fits(alloc: Amounts, used: dict[str, int], need: Amounts) -> int:
    """How many more pods asking `need` this node takes (need: only amounts above zero)."""
    if not need:
        return 0
    return max(0, min((amount(alloc, r) - used.get(r, 0)) // v for r, v in need))


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


#: The scope of profiles without a pool: every node outside the GPU pools.
CPU_SCOPE = None


class ClusterState:
    """Nodes and pods folded into counters; one instance per hub, fed by watch events."""

    def __init__(self, cfg: ProfilesConfig):
        self.cfg = cfg
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[str, PodRecord] = {}
        self.version = 0
        self._by_pool: dict[str | None, dict[str, NodeRecord]] = {}
        self._memo: dict[str, tuple[int, ProfileCapacity]] = {}
        self._shapes: dict[Amounts, Amounts] = {}
        # what each profile needs, and which profiles and resources each scope counts
        self._need: dict[str, Amounts] = {}
        self._scope_profiles: dict[str | None, list[str]] = {}
        self._scope_resources: dict[str | None, set[str]] = {}
        #: dra pools, whose GPUs are devices (`devices`), and what a pod of a dra profile claims: (resource, amount)
        self.dra_pools = frozenset(name for name, pool in cfg.pools.items() if pool.is_dra)
        self.devices = DeviceLedger()
        self._claims: dict[str, tuple[str, int]] = {}
        #: A profile's `gpu.alternatives`, each counted like a profile of its own (`alternative_profiles`).
        self.alternatives = {p.slug: alts for p in cfg.profiles if (alts := alternative_profiles(p))}
        for p in [*cfg.profiles, *(a for alts in self.alternatives.values() for a in alts)]:
            scope, resource = self.scope_of(p), cfg.resource_name(p)
            need = {"cpu": milli(str(p.cpu)) or 0, "memory": int(p.memory_limit) * MILLI}
            if resource:
                need[resource] = p.gpu.count * MILLI
                if p.pool in self.dra_pools and p.slug in cfg.by_slug:
                    self._claims[p.slug] = (resource, p.gpu.count * MILLI)
            self._need[p.slug] = tuple(sorted((r, v) for r, v in need.items() if v > 0))
            self._scope_profiles.setdefault(scope, []).append(p.slug)
            if resource:
                self._scope_resources.setdefault(scope, set()).add(resource)
        self._node_scopes: dict[str | None, tuple[str | None, ...]] = {}
        self._reset_node_counts()
        self._reset_pod_counts()
        #: Whether what the informers folded in is complete and current (they set this); when not,
        #: `profile_capacity` answers "unknown" instead of numbers that may be wrong.
        self.is_current: Callable[[], bool] = lambda: True
        #: The same for the ResourceSlices and claims (the informers set it): when not, dra profiles say "unknown".
        self.devices_current: Callable[[], bool] = lambda: True
        #: The pools' measured times to add a node (`node_add_times.NodeAddTimes`, set by its `watch`); None: none.
        self.node_adds: Any = None

    def scope_of(self, profile: Profile) -> str | None:
        return profile.pool if self.cfg.pool_of(profile) is not None else CPU_SCOPE

    def _scopes(self, pool: str | None) -> tuple[str | None, ...]:
        """The scopes a node of this pool counts in: its pool's, and the CPU scope if not a GPU pool."""
        scopes = self._node_scopes.get(pool)
        if scopes is None:
            gpu = pool is not None and pool in self.cfg.pools and self.cfg.pools[pool].is_gpu
            scopes = self._node_scopes[pool] = (pool,) if gpu or pool is CPU_SCOPE else (pool, CPU_SCOPE)
        return scopes

    def _reset_node_counts(self) -> None:
        self._node_count: Counter = Counter()   # scope -> nodes
        self._total: Counter = Counter()        # (scope, resource) -> whole slots
        self._free: Counter = Counter()         # (scope, resource) -> whole free slots
        self._fits: Counter = Counter()         # profile slug -> servers that fit now

    def _reset_pod_counts(self) -> None:
        self._used: dict[str, dict[str, int]] = {}  # node name -> requests of its pods (known node or not)
        self._waiting: Counter = Counter()          # (pool, resource or None) -> unscheduled pods
        self._servers: Counter = Counter()          # (profile, running) -> single-user server pods

    def _shape(self, amounts: dict[str, int]) -> Amounts:
        key = tuple(sorted(amounts.items()))
        if len(self._shapes) < 10_000:
            return self._shapes.setdefault(key, key)
        return self._shapes.get(key, key)

    # ------------------------------------------------------------------ counting
    def _on_node(self, node: NodeRecord, used: dict[str, int]) -> tuple[Amounts, dict[str, int]]:
        """(what the node offers, what is taken of it): a dra node's GPU amounts are its devices."""
        return self.devices.on_node(node.name, node.alloc, used) if node.pool in self.dra_pools else (node.alloc, used)

    def _count_node(self, node: NodeRecord, sign: int) -> None:
        """Add (sign 1) or take back (-1) what one node contributes, with its current pods."""
        offered, used = self._on_node(node, self._used.get(node.name) or {})
        for scope in self._scopes(node.pool):
            self._node_count[scope] += sign
            for res in self._scope_resources.get(scope, ()):
                alloc = amount(offered, res)
                self._total[scope, res] += sign * (alloc // MILLI)
                self._free[scope, res] += sign * max(0, (alloc - used.get(res, 0)) // MILLI)
            if node.schedulable:
                for slug in self._scope_profiles.get(scope, ()):
                    self._fits[slug] += sign * node_fits(offered, used, self._need[slug])

    def _count_pod(self, pod: PodRecord, sign: int, nodes: bool = True) -> None:
        if pod.node is None:
            self._waiting[pod.pool, None] += sign
            for res, v in pod.requests:
                if v:
                    self._waiting[pod.pool, res] += sign
        else:
            node = self.nodes.get(pod.node) if nodes else None
            if node is not None:
                self._count_node(node, -1)
            used = self._used.setdefault(pod.node, {})
            for res, v in pod.requests:
                if (left := used.get(res, 0) + sign * v) != 0:
                    used[res] = left
                else:
                    used.pop(res, None)
            if not used:
                del self._used[pod.node]
            if node is not None:
                self._count_node(node, 1)
        if pod.singleuser and pod.profile:
            self._servers[pod.profile, pod.running] += sign

    # ------------------------------------------------------------------ events
    def _pool_for_labels(self, labels: dict[str, str]) -> str | None:
        return pool_of(self.cfg.pools, labels)

    def _node_record(self, node: dict[str, Any]) -> NodeRecord:
        status, spec = node.get("status") or {}, node.get("spec") or {}
        labels = node["metadata"].get("labels") or {}
        mig = labels.get("nvidia.com/mig.config.state")
        return NodeRecord(
            sys.intern(node["metadata"]["name"]), self._pool_for_labels(labels),
            self._shape(_amounts(status.get("allocatable"))),
            _node_ready(node) and not spec.get("unschedulable") and not _blocking_taint(spec.get("taints")),
            sys.intern(mig) if isinstance(mig, str) else None)

    def _pod_record(self, pod: dict[str, Any]) -> PodRecord | None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        if phase in TERMINAL_PHASES:
            return None
        node = spec.get("nodeName") or None
        labels = meta.get("labels") or {}
        profile = labels.get(PROFILE_LABEL)
        requests = pod_requests(pod)
        if spec.get("resourceClaims") and (claimed := self._claims.get(profile)):  # its GPUs are a claim
            requests[claimed[0]] = max(requests.get(claimed[0], 0), claimed[1])
        return PodRecord(
            sys.intern(node) if isinstance(node, str) else None,
            None if node else self._pool_for_labels(spec.get("nodeSelector") or {}) or self._first_choice(profile),
            self._shape(requests), sys.intern(profile) if isinstance(profile, str) else None,
            phase == "Running", labels.get("component") == "singleuser-server")

    def apply_node(self, kind: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        self.version += 1
        old = self.nodes.pop(name, None)
        if old is not None:
            self._count_node(old, -1)
            self._by_pool.get(old.pool, {}).pop(name, None)
        if kind == "DELETED":
            return
        state = self._node_record(node)
        self.nodes[state.name] = state
        self._by_pool.setdefault(state.pool, {})[state.name] = state
        self._count_node(state, 1)

    def apply_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        self.version += 1
        old = self.pods.pop(key, None)
        if old is not None:
            self._count_pod(old, -1)
        state = None if kind == "DELETED" else self._pod_record(pod)
        if state is not None:
            self.pods[key] = state
            self._count_pod(state, 1)

    def _recount_devices(self, apply: Callable[..., None], kind: str, obj: dict[str, Any]) -> None:
        """A ResourceSlice or ResourceClaim event: only the nodes whose devices it names are counted again. The
        picker's memo stays valid unless a known dra node's counts may change: most claim events are status
        updates (reservedFor, conditions) that leave its allocation, and so every count, as it was."""
        touched: list[NodeRecord] = []

        def take_back(names: set[str]) -> None:
            touched.extend(n for name in names if (n := self.nodes.get(name)) is not None and n.pool in self.dra_pools)
            if touched:
                self.version += 1
            for n in touched:
                self._count_node(n, -1)

        apply(kind, obj, take_back)
        for n in touched:
            self._count_node(n, 1)

    def apply_slice(self, kind: str, resource_slice: dict[str, Any]) -> None:
        self._recount_devices(self.devices.apply_slice, kind, resource_slice)

    def apply_claim(self, kind: str, claim: dict[str, Any]) -> None:
        self._recount_devices(self.devices.apply_claim, kind, claim)

    def replace(self, kind: str, items: Iterable[dict[str, Any]]) -> None:
        """A full relist (start, or after the watch expired): forget what we knew of this kind."""
        self.version += 1
        if kind in ("resourceslices", "resourceclaims"):
            self.devices.replace(kind, list(items))
            self._reset_node_counts()
            for node in self.nodes.values():
                self._count_node(node, 1)
            return
        if kind == "nodes":
            self.nodes, self._by_pool = {}, {}
            self._reset_node_counts()
            for item in items:
                self.apply_node("ADDED", item)
            return
        self.pods = {}
        self._reset_pod_counts()
        for item in items:  # pods first, then every node counted once with them
            if (state := self._pod_record(item)) is not None:
                meta = item["metadata"]
                key = f"{meta.get('namespace')}/{meta['name']}"
                if (old := self.pods.pop(key, None)) is not None:  # a list never repeats a pod; be safe
                    self._count_pod(old, -1, nodes=False)
                self.pods[key] = state
                self._count_pod(state, 1, nodes=False)
        self._reset_node_counts()
        for node in self.nodes.values():
            self._count_node(node, 1)

    # ------------------------------------------------------------------ reading
    def servers_by_profile(self) -> tuple[Counter, Counter]:
        """(running, pending) single-user servers per profile slug, for the hub's metrics."""
        running, pending = Counter(), Counter()
        for (profile, is_running), n in self._servers.items():
            if n:
                (running if is_running else pending)[profile] += n
        return running, pending

    def pool_nodes(self, pool_name: str) -> list[NodeRecord]:
        return list(self._by_pool.get(pool_name, {}).values())

    def offered(self, node: NodeRecord) -> NodeRecord:
        """The node as capacity counts it: on a dra pool, with its published devices as its GPU allocatable."""
        if node.pool not in self.dra_pools:
            return node
        alloc, _ = self._on_node(node, {})
        return NodeRecord(node.name, node.pool, alloc, node.schedulable, node.mig_state)

    def waiting(self, pool_name: str, resource: str | None) -> int:
        """Pods asking for this pool's resource (or any pod for it, resource None) no node has taken yet."""
        return self._waiting[pool_name, resource]

    def profile_capacity(self, profile: Profile) -> ProfileCapacity:
        """Read from the counters; the sentence is rebuilt only when an event arrived since the last call."""
        on_devices = profile.gpu is not None and profile.pool in self.dra_pools
        if not self.is_current() or (on_devices and (not self.devices_current() or self._partitioned(profile.pool))):
            return ProfileCapacity.unknown(profile.slug, self.cfg.resource_name(profile))
        memo = self._memo.get(profile.slug)
        if memo and memo[0] == self.version:
            return memo[1]
        scope, resource = self.scope_of(profile), self.cfg.resource_name(profile)
        cap = self._capacity(profile, self._node_count[scope],
                             self._total[scope, resource] if resource else 0,
                             self._free[scope, resource] if resource else 0, self._fits[profile.slug],
                             self.waiting(profile.pool, resource) if scope is not CPU_SCOPE else 0)
        if alternatives := self.alternatives.get(profile.slug):
            cap = self._with_alternatives(cap, alternatives, self.profile_capacity)
        self._memo[profile.slug] = (self.version, cap)
        return cap

    def _first_choice(self, profile: Any) -> str | None:
        """The pool a waiting pod of a profile with alternatives is counted in (its node affinity names several,
        and no node selector): its profile's own, the first of its prioritized list."""
        return self.cfg.by_slug[profile].pool if profile in self.alternatives else None

    def _partitioned(self, pool: str | None) -> bool:
        """A node of this dra pool publishes partitionable devices, which are not counted: its numbers are unknown."""
        return any((n := self.nodes.get(node)) is not None and n.pool == pool
                   for node in self.devices.partitioned.values())

    def _with_alternatives(self, own: ProfileCapacity, alternatives: list[Profile],
                           read: Callable[[Profile], ProfileCapacity]) -> ProfileCapacity:
        """A profile with alternatives fits where any of its choices fits; when its own GPUs are taken, the card
        says which choice the scheduler would allocate instead (the first with room, as DRA's prioritized list)."""
        caps = [read(a) for a in alternatives]
        fits = own.fits_now + sum(c.fits_now for c in caps)
        if own.fits_now or not fits:
            return replace(own, fits_now=fits)
        index, got = next((i, c) for i, c in enumerate(caps) if c.fits_now)
        choice = alternatives[index]
        summary, outlook = or_alternative(own.summary, choice, self.cfg.pool_of(choice), got)
        return replace(own, fits_now=fits, summary=summary, outlook=outlook)

    def _capacity(self, profile: Profile, nodes: int, total: int, free: int, fits: int,
                  waiting: int) -> ProfileCapacity:
        pool, resource = self.cfg.pool_of(profile), self.cfg.resource_name(profile)
        can_grow = pool is not None and pool.max_nodes is not None and pool.max_nodes > nodes
        adds = self.node_adds
        node_add_s = node_add_seconds(adds.samples_of(profile.pool)) if adds is not None and pool else None
        summary, outlook = describe(profile, pool, resource, total, free, fits, waiting, nodes, can_grow, node_add_s)
        return ProfileCapacity(profile.slug, resource, total, free, fits, waiting, nodes, can_grow, summary, outlook)

    def recompute(self, profile: Profile) -> ProfileCapacity:
        """The exact full scan over every node and pod record that the counters must equal (the tests'
        oracle; O(cluster), never on a render)."""
        scope, resource = self.scope_of(profile), self.cfg.resource_name(profile)
        used: dict[str, dict[str, int]] = {}
        waiting = 0
        for p in self.pods.values():
            if p.node is not None:
                on = used.setdefault(p.node, {})
                for r, v in p.requests:
                    on[r] = on.get(r, 0) + v
            elif (scope is not CPU_SCOPE and p.pool == profile.pool
                  and (resource is None or amount(p.requests, resource))):
                waiting += 1
        nodes = [n for n in self.nodes.values() if scope in self._scopes(n.pool)]
        total = free = fits = 0
        for n in nodes:
            offered, on = self._on_node(n, used.get(n.name, {}))
            if resource:
                total += amount(offered, resource) // MILLI
                free += max(0, (amount(offered, resource) - on.get(resource, 0)) // MILLI)
            if n.schedulable:
                fits += node_fits(offered, on, self._need[profile.slug])
        cap = self._capacity(profile, len(nodes), total, free, fits, waiting)
        alternatives = self.alternatives.get(profile.slug)
        return self._with_alternatives(cap, alternatives, self.recompute) if alternatives else cap
