"""The admin console's live state: one cached read of the cluster, refreshed in the background at most every
`every` seconds (never an API call per page view).

Per pool (the profiles file's): nodes ready and cordoned, GPU slots in allocatable and those held by pods bound
there. Per team: its ClusterQueue's GPU quota used / nominal (per flavor) and its pending Workloads, from the
queue's status. What cannot be read is None ('unknown' on the page), never 0. The reads need get/list on nodes
and pods and get on each team's ClusterQueue (deploy/rbac.yaml's `gpuhub-hub-read` grants the hub those).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

from gpu_spawner.builders.kueue import cluster_queue_name
from gpu_spawner.contract import KUEUE_GROUP, KUEUE_VERSION
from gpu_spawner.model.node_pools import node_labels, pool_of
from gpu_spawner.model.profiles import ProfilesConfig
from gpu_spawner.model.quantities import parse_or_none

log = logging.getLogger("gpuhub.admin")
#: Not bound to a node, or finished: holds no slot.
DONE = ("Succeeded", "Failed")


@dataclass(frozen=True)
class PoolState:
    ready: int | None = None
    cordoned: int | None = None
    slots_total: int | None = None
    slots_used: int | None = None


@dataclass(frozen=True)
class TeamState:
    queue: str
    quota: tuple[tuple[str, str, int | None, int | None], ...] = ()  # (flavor, resource, used, nominal)
    pending: int | None = None


@dataclass
class LiveState:
    read_at: float | None = None  # time.time() of the last read; None: never read
    pools: dict[str, PoolState] = field(default_factory=dict)
    teams: dict[str, TeamState] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _count(value: Any) -> int:
    try:
        return int(parse_or_none(value) or 0)
    except (ValueError, TypeError, ArithmeticError):
        return 0


def pool_states(cfg: ProfilesConfig, nodes: list[dict] | None, pods: list[dict] | None) -> dict[str, PoolState]:
    """Per pool of the file; None fields where nodes (or, for slots in use, pods) could not be read (pure)."""
    if nodes is None:
        return {name: PoolState() for name in cfg.pools}
    where: dict[str, str] = {}
    ready = {n: 0 for n in cfg.pools}
    cordoned = {n: 0 for n in cfg.pools}
    total = {n: 0 for n in cfg.pools}
    for node in nodes:
        pool = pool_of(cfg.pools, node_labels(node))
        if pool is None:
            continue
        where[(node.get("metadata") or {}).get("name")] = pool
        if (node.get("spec") or {}).get("unschedulable"):
            cordoned[pool] += 1
        elif _ready(node):
            ready[pool] += 1
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        total[pool] += sum(_count(allocatable.get(r, 0)) for r in cfg.pools[pool].slots_per_node())
    used: dict[str, int] | None = None
    if pods is not None:
        used = {n: 0 for n in cfg.pools}
        for pod in pods:
            spec = pod.get("spec") or {}
            pool = where.get(spec.get("nodeName"))
            if pool is None or (pod.get("status") or {}).get("phase") in DONE:
                continue
            resources = cfg.pools[pool].slots_per_node()
            for c in spec.get("containers") or []:
                requests = {**((c.get("resources") or {}).get("limits") or {}),
                            **((c.get("resources") or {}).get("requests") or {})}
                used[pool] += sum(_count(requests.get(r, 0)) for r in resources)
    gpu = {n for n, p in cfg.pools.items() if p.is_gpu}
    return {n: PoolState(ready[n], cordoned[n], total[n] if n in gpu else None,
                         (used[n] if used is not None else None) if n in gpu else None) for n in cfg.pools}


def team_state(cfg: ProfilesConfig, team: str, queue: Mapping[str, Any] | None) -> TeamState:
    """A team's GPU quota used / nominal per flavor and pending Workloads from its ClusterQueue (None: unread)."""
    name = cluster_queue_name(team)
    if queue is None:
        return TeamState(name)
    gpu_resources = {r for p in cfg.pools.values() for r in p.slots_per_node()}
    nominal: dict[tuple[str, str], int] = {}
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for r in flavor.get("resources") or []:
                if r.get("name") in gpu_resources:
                    nominal[(flavor.get("name"), r["name"])] = _count(r.get("nominalQuota", 0))
    status = queue.get("status") or {}
    used: dict[tuple[str, str], int] = {}
    for flavor in status.get("flavorsUsage") or []:
        for r in flavor.get("resources") or []:
            if r.get("name") in gpu_resources:
                used[(flavor.get("name"), r["name"])] = _count(r.get("total", 0))
    keys = [k for k in nominal if nominal[k] or used.get(k)] + [k for k in used if k not in nominal and used[k]]
    pending = status.get("pendingWorkloads")
    return TeamState(name, tuple((f, r, used.get((f, r), 0), nominal.get((f, r))) for f, r in keys),
                     pending if isinstance(pending, int) else None)


Reads = Callable[[], Awaitable[tuple[list[dict] | None, list[dict] | None, dict[str, dict | None], list[str]]]]


def kube_reads(api_client, cfg: ProfilesConfig) -> Reads:
    """One read of nodes, pods (not finished) and each team's ClusterQueue, as plain dicts."""
    from kubernetes_asyncio import client

    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    plain = api_client.sanitize_for_serialization

    async def read():
        errors: list[str] = []
        nodes = pods = None
        try:
            nodes = plain((await core.list_node()).items)
        except Exception as e:  # noqa: BLE001 (whatever the API or the network says: unknown, said why)
            errors.append(f"nodes: {type(e).__name__}: {getattr(e, 'reason', '') or e}"[:200])
        try:
            pods = plain((await core.list_pod_for_all_namespaces(
                field_selector="status.phase!=Succeeded,status.phase!=Failed")).items)
        except Exception as e:  # noqa: BLE001
            errors.append(f"pods: {type(e).__name__}: {getattr(e, 'reason', '') or e}"[:200])
        queues: dict[str, dict | None] = {}
        for team in cfg.teams:
            try:
                queues[team] = await custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues",
                                                                      cluster_queue_name(team))
            except Exception as e:  # noqa: BLE001
                queues[team] = None
                errors.append(f"ClusterQueue {cluster_queue_name(team)}: {type(e).__name__}: "
                              f"{getattr(e, 'reason', '') or e}"[:200])
        return nodes, pods, queues, errors

    return read


class LiveReader:
    """`state`: the last read (all unknown until the first); `run()` reads every `every` seconds."""

    def __init__(self, cfg: ProfilesConfig, reads: Reads | None, every: float = 30.0,
                 clock: Callable[[], float] = time.time):
        self.cfg, self.reads, self.every, self.clock = cfg, reads, max(every, 30.0), clock
        self.state = LiveState(teams={t: TeamState(cluster_queue_name(t)) for t in cfg.teams},
                               pools={n: PoolState() for n in cfg.pools},
                               errors=[] if reads else ["the cluster is not configured for this page"])
        self.reads_done = 0

    async def read_once(self) -> LiveState:
        try:
            nodes, pods, queues, errors = await self.reads()
        except Exception as e:  # noqa: BLE001 (no API at all): everything unknown, the page says why
            nodes, pods, queues, errors = None, None, {}, [f"{type(e).__name__}: {e}"[:200]]
        self.reads_done += 1
        self.state = LiveState(self.clock(), pool_states(self.cfg, nodes, pods),
                               {t: team_state(self.cfg, t, queues.get(t)) for t in self.cfg.teams}, errors)
        return self.state

    async def run(self) -> None:
        while self.reads is not None:
            await self.read_once()
            await asyncio.sleep(self.every)
