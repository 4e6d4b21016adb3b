"""SIMULATOR: a MODEL of the AKS cluster autoscaler, for the day replay. No cluster autoscaler runs in the
dev cluster, so the replay asks this model, once per tick, which KWOK nodes to add and remove.

The model, and nothing more (documented in docs/benchmarks.md):
- scale up: when pods of a pool are pending (unschedulable) beyond the free GPU slots of its Ready nodes,
  ask for ceil(rest / pods per node) nodes, minus those already being provisioned for it, within `max_nodes`;
  a new node is Ready (created in the cluster) `provision_delay` seconds later, and is paid for from the moment
  it is asked for;
- scale down: a node with no pods for `scale_down_after` seconds (AKS's scale-down-unneeded-time,
  10 min by default) is removed, never below `min_nodes`;
- `min_nodes`/`max_nodes` come from the profiles file (no max_nodes: unbounded);
- warm capacity (a pool's `warm` schedule, model/warm_schedule.py): the minimum is a step function of time;
  when it rises above the pool's nodes, the missing nodes are asked for then (AKS's autoscaler enforces a raised
  min-count) and Ready `provision_delay` later; when it falls, nodes above it go once empty for `scale_down_after`.
It does not model bin-packing simulation, expanders, node groups' zones, or scale-down of nodes that
have pods (the real autoscaler can drain nodes whose pods fit elsewhere; this one never moves pods).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.model.warm_schedule import minimum_at_minute


@dataclass(frozen=True)
class PoolModel:
    min_nodes: int
    max_nodes: int | None
    pods_per_node: int  # GPU pods one node takes (slots per node)
    warm: Callable[[float], int] | None = None  # trace seconds → the scheduled minimum (None: min_nodes always)

    def minimum(self, now: float) -> int:
        return max(self.min_nodes, self.warm(now)) if self.warm else self.min_nodes


@dataclass
class Decision:
    create: list[tuple[str, str]] = field(default_factory=list)  # (pool, node name) to create now
    remove: list[str] = field(default_factory=list)  # node names to delete now


class AutoscalerModel:
    """Pure state machine: `step(now, pending, pods_on)` → what to create/remove; `node_seconds` for costs."""

    def __init__(self, pools: dict[str, PoolModel], provision_delay: float = 240, scale_down_after: float = 600,
                 name=lambda pool, i: f"{pool}-{i}"):
        self.pools = pools
        self.provision_delay = provision_delay
        self.scale_down_after = scale_down_after
        self.name = name
        self.nodes: dict[str, dict] = {}  # name → {pool, asked, ready_at, empty_since}
        self.removed: dict[str, dict] = {}  # name → record with `gone`
        self._next: dict[str, int] = {p: 0 for p in pools}

    def start(self, now: float = 0.0) -> list[tuple[str, str]]:
        """The minimum of each pool at `now`, Ready then (the day starts with them)."""
        out = []
        for pool, m in self.pools.items():
            for _ in range(m.minimum(now)):
                name = self._add(pool, now, ready_at=now)
                self.nodes[name]["created"] = True  # the cluster starts with them
                out.append((pool, name))
        return out

    def _add(self, pool: str, now: float, ready_at: float) -> str:
        name = self.name(pool, self._next[pool])
        self._next[pool] += 1
        self.nodes[name] = {"pool": pool, "asked": now, "ready_at": ready_at, "empty_since": ready_at, "created": False}
        return name

    def count(self, pool: str) -> int:
        return sum(1 for n in self.nodes.values() if n["pool"] == pool)

    def ready(self, name: str, now: float) -> bool:
        return self.nodes[name]["ready_at"] <= now

    def step(self, now: float, pending: dict[str, int], pods_on: dict[str, int]) -> Decision:
        """`pending`: unschedulable pods per pool; `pods_on`: pods bound to each (Ready) node."""
        d = Decision()
        for name, n in self.nodes.items():  # provisioned nodes that are due join the cluster
            if not n["created"] and n["ready_at"] <= now:
                n["created"] = True
                d.create.append((n["pool"], name))
        for pool, m in self.pools.items():
            for _ in range(m.minimum(now) - self.count(pool)):  # a raised minimum is enforced
                self._add(pool, now, ready_at=now + self.provision_delay)
            waiting = pending.get(pool, 0)
            if waiting <= 0:
                continue
            in_flight = sum(1 for n in self.nodes.values() if n["pool"] == pool and n["ready_at"] > now)
            free = sum(max(0, m.pods_per_node - pods_on.get(name, 0)) for name, n in self.nodes.items()
                       if n["pool"] == pool and n["created"])  # the scheduler has not placed them yet
            want = math.ceil(max(0, waiting - free) / max(1, m.pods_per_node)) - in_flight
            room = (m.max_nodes - self.count(pool)) if m.max_nodes is not None else want
            for _ in range(max(0, min(want, room))):
                self._add(pool, now, ready_at=now + self.provision_delay)
        for name, n in list(self.nodes.items()):
            if not n["created"]:
                continue
            if pods_on.get(name, 0) > 0:
                n["empty_since"] = None
                continue
            if n["empty_since"] is None:
                n["empty_since"] = now
            elif now - n["empty_since"] >= self.scale_down_after \
                    and self.count(n["pool"]) > self.pools[n["pool"]].minimum(now):
                d.remove.append(name)
                self.removed[name] = {**self.nodes.pop(name), "gone": now}
        return d

    def evict(self, name: str, now: float) -> None:
        """A node taken away from outside (spot eviction): it stops costing now."""
        if name in self.nodes:
            self.removed[name] = {**self.nodes.pop(name), "gone": now}

    def node_seconds(self, until: float) -> dict[str, float]:
        """Paid node-seconds per pool: from when a node was asked for until it was removed (or `until`)."""
        out = {p: 0.0 for p in self.pools}
        for rec in [*self.nodes.values(), *self.removed.values()]:
            out[rec["pool"]] += max(0.0, min(rec.get("gone", until), until) - rec["asked"])
        return out


def pool_models(cfg: ProfilesConfig, weekday: int = 0) -> dict[str, PoolModel]:
    """The GPU pools, for the autoscaler model: min/max nodes and the warm schedule from the file, GPU pods per node
    from its slots. The trace's clock (seconds from 00:00 of a `weekday`, Monday = 0) is read as the pools' local
    time."""
    def warm(pool):
        return (lambda t: minimum_at_minute(pool, weekday * 1440 + t / 60)) if pool.warm else None

    return {name: PoolModel(p.min_nodes, p.max_nodes, max(1, sum(p.slots_per_node().values())), warm(p))
            for name, p in cfg.pools.items() if p.is_gpu}
