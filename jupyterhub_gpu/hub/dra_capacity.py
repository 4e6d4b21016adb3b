"""The GPUs of `dra` pools for live capacity, kept up to date from ResourceSlice and ResourceClaim watch events.

A dra pool's nodes offer no `nvidia.com/*` allocatable and its pods request none: the GPUs are devices in the
nodes' ResourceSlices, and a pod's are the devices its ResourceClaim was allocated (cluster/dra_devices.py).
`DeviceLedger` folds both into per-node counts under the quota names (`nvidia.com/gpu`,
`nvidia.com/mig-<slice>`), and `ClusterState` (capacity.py) reads a dra node's GPU amounts from it instead of
allocatable and pod requests (`on_node`), so totals, free slots and "fits now" are the same counters as on
any pool. Incremental like the rest: an event changes only the devices it names, on their own nodes; a claim
is kept as its device keys only. `cluster/dra_devices.device_counts` is the full fold it must equal.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from jupyterhub_gpu.cluster.dra_devices import FULL_GPU, claimed_devices, partitionable, slice_devices

MILLI = 1000
MIG_PREFIX = "nvidia.com/mig-"


def no_hook(nodes: set[str]) -> None:
    """No one to tell which nodes change (a ledger on its own)."""


def is_gpu_quota(resource: str) -> bool:
    """A name a dra node's GPUs count under. Pods' requests of these names there are not counted again: a pod
    asking for `nvidia.com/gpu` on a dra node gets it through the DeviceClass's extended resource, as a claim."""
    return resource == FULL_GPU or resource.startswith(MIG_PREFIX)


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


class DeviceLedger:
    """Published and claimed devices, as counts per node. The `apply_*` calls take a hook that is called with the
    nodes whose counts may change, before they change (capacity takes back what those nodes counted)."""

    def __init__(self) -> None:
        self.slices: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {}  # name → (node, devices)
        self.claims: dict[str, tuple[str, ...]] = {}                           # namespace/name → device keys
        self._places: dict[str, Counter] = {}  # device key → (node, quota) → slices that publish it there
        self._held: Counter = Counter()        # device key → claims that hold it
        self.counts: dict[str, Counter] = {}   # node → (quota, "total" | "used") → devices
        #: Slices with partitionable devices (dynamic MIG), name → node: not counted, so their pool is "unknown".
        self.partitioned: dict[str, str] = {}

    # ------------------------------------------------------------------ counting
    def _place(self, key: str) -> tuple[str, str] | None:
        refs = self._places.get(key)
        return min(refs) if refs else None

    def _count(self, key: str, sign: int) -> None:
        if (place := self._place(key)) is None:
            return
        node, quota = place
        counts = self.counts.setdefault(node, Counter())
        counts[quota, "total"] += sign
        if self._held[key]:
            counts[quota, "used"] += sign
        if not any(counts.values()):
            del self.counts[node]

    def _nodes(self, keys) -> set[str]:
        return {node for k in keys for node, _ in self._places.get(k, ())}

    # ------------------------------------------------------------------ events
    def apply_slice(self, kind: str, obj: dict[str, Any], before: Callable[[set[str]], None] = no_hook) -> None:
        name = _name(obj)
        old = self.slices.pop(name, None)
        node, devices = (None, ()) if kind == "DELETED" else slice_devices(obj)
        self.partitioned.pop(name, None)
        if kind != "DELETED" and partitionable(obj) and (at := (obj.get("spec") or {}).get("nodeName")):
            self.partitioned[name] = str(at)
        if old is None and not devices:
            return
        keys = {k for k, _ in devices} | ({k for k, _ in old[1]} if old else set())
        before(self._nodes(keys) | ({node} if node else set()))
        for k in keys:
            self._count(k, -1)
        for k, quota in old[1] if old else ():
            refs = self._places[k]
            refs[old[0], quota] -= 1
            if refs[old[0], quota] <= 0:
                del refs[old[0], quota]
            if not refs:
                del self._places[k]
        if devices:
            self.slices[name] = (node, devices)
            for k, quota in devices:
                self._places.setdefault(k, Counter())[node, quota] += 1
        for k in keys:
            self._count(k, 1)

    def apply_claim(self, kind: str, obj: dict[str, Any], before: Callable[[set[str]], None] = no_hook) -> None:
        name = _name(obj)
        old = self.claims.pop(name, ())
        new = () if kind == "DELETED" else claimed_devices(obj)
        if new:
            self.claims[name] = new
        if old == new:
            return
        keys = set(old) | set(new)
        before(self._nodes(keys))
        for k in keys:
            self._count(k, -1)
        self._held.subtract(old)
        self._held.update(new)
        for k in old:
            if self._held[k] <= 0:
                del self._held[k]
        for k in keys:
            self._count(k, 1)

    def replace(self, kind: str, items: list[dict[str, Any]]) -> None:
        """A full relist of "resourceslices" or "resourceclaims": the other kind is kept."""
        if kind == "resourceslices":
            self.slices, self._places, self.partitioned = {}, {}, {}
        else:
            self.claims, self._held = {}, Counter()
        self.counts = {}
        for item in items:
            (self.apply_slice if kind == "resourceslices" else self.apply_claim)("ADDED", item)
        self.counts = {}
        for key in self._places:
            self._count(key, 1)

    # ------------------------------------------------------------------ reading
    def on_node(self, node: str, alloc: tuple[tuple[str, int], ...],
                used: dict[str, int]) -> tuple[tuple[tuple[str, int], ...], dict[str, int]]:
        """A dra node's (allocatable, used) in thousandths with its GPU amounts from the devices: published ones
        as allocatable, claimed ones as used; what allocatable and pod requests say of those names is dropped."""
        counts = self.counts.get(node) or Counter()
        offered = {r: v for r, v in alloc if not is_gpu_quota(r)}
        taken = {r: v for r, v in used.items() if not is_gpu_quota(r)}
        for (quota, what), n in counts.items():
            if n:
                (offered if what == "total" else taken)[quota] = n * MILLI
        return tuple(sorted(offered.items())), taken
