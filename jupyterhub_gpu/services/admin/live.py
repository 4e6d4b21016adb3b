"""The admin console's live state: one cached read of the cluster, refreshed in the background at most every
`every` seconds (never an API call per page view).

Per pool (the profiles file's): nodes ready, cordoned and starting (not Ready, not cordoned), pods waiting for a
node there, GPU slots in allocatable and those held by pods bound there, and the slots in use over the last day
(chart.py, in memory). Per team: its ClusterQueue's GPU quota used / nominal / borrowed (per flavor) and its
pending Workloads, from the queue's status, and how long its oldest pending Workload has waited. What cannot be
read is None ('unknown' on the page), never 0. The reads need get/list on nodes and pods, get on each team's
ClusterQueue (deploy/rbac.yaml's `gpuhub-hub-read` grants the hub those) and list on Workloads in the team
namespaces and the hub's (the `gpuhub-hub-usage` and `gpuhub-hub-servers` Roles already grant that: a team's
Workloads are in those namespaces only, so no cluster-wide list is needed).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

from jupyterhub_gpu.builders.kueue import cluster_queue_name, local_queue_name
from jupyterhub_gpu.cluster.conditions import condition
from jupyterhub_gpu.cluster.times import parse_time
from jupyterhub_gpu.cluster.workloads import is_pending, queue_key
from jupyterhub_gpu.contract import KUEUE_GROUP, KUEUE_VERSION
from jupyterhub_gpu.model.node_pools import node_labels, pool_of
from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.model.quantities import parse_or_none
from jupyterhub_gpu.services.admin.chart import Bucket, SlotHistory

log = logging.getLogger("gpuhub.admin")
#: Not bound to a node, or finished: holds no slot.
DONE = ("Succeeded", "Failed")


@dataclass(frozen=True)
class PoolState:
    ready: int | None = None
    cordoned: int | None = None
    slots_total: int | None = None
    slots_used: int | None = None
    starting: int | None = None  # nodes there, not Ready and not cordoned (a scale-up, or a node gone bad)
    waiting: int | None = None   # pods no node has taken yet (not those Kueue still gates: the team's pending)


@dataclass(frozen=True)
class TeamState:
    queue: str
    #: (flavor, resource, used, nominal, borrowed); used and borrowed None when the queue has no usage status
    quota: tuple[tuple[str, str, int | None, int | None, int | None], ...] = ()
    pending: int | None = None
    waits_known: bool = False            # its Workloads were read (then oldest_wait None: none pending)
    oldest_wait: float | None = None     # seconds its oldest pending Workload has waited, at the read


@dataclass
class LiveState:
    read_at: float | None = None  # time.time() of the last read; None: never read
    pools: dict[str, PoolState] = field(default_factory=dict)
    teams: dict[str, TeamState] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    history: dict[str, tuple[Bucket, ...]] = field(default_factory=dict)  # GPU pools' slots in use (chart.py)
    history_since: float | None = None  # when the console started keeping it


@dataclass
class Read:
    """One background read, as plain dicts; None: that read failed (said in `errors`)."""

    nodes: list[dict] | None = None
    pods: list[dict] | None = None
    queues: dict[str, dict | None] = field(default_factory=dict)   # team -> its ClusterQueue
    workloads: dict[str, list[dict] | None] = field(default_factory=dict)  # namespace -> its Workloads
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
    starting = {n: 0 for n in cfg.pools}
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
        else:
            starting[pool] += 1
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        total[pool] += sum(_count(allocatable.get(r, 0)) for r in cfg.pools[pool].slots_per_node())
    used: dict[str, int] | None = None
    waiting: dict[str, int] | None = None
    if pods is not None:
        used, waiting = {n: 0 for n in cfg.pools}, {n: 0 for n in cfg.pools}
        for pod in pods:
            spec = pod.get("spec") or {}
            if (pool := waits_for(cfg, pod)) is not None:
                waiting[pool] += 1
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
                         (used[n] if used is not None else None) if n in gpu else None, starting[n],
                         waiting[n] if waiting is not None else None) for n in cfg.pools}


def target_labels(spec: Mapping[str, Any]) -> dict[str, str]:
    """The node labels a pod insists on: its nodeSelector, and a required node affinity's single-valued `In`
    expressions when it has one term (several terms are alternatives: no one pool); pool_of reads them."""
    labels = dict(spec.get("nodeSelector") or {})
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if len(terms) == 1:
        for ex in (terms[0] or {}).get("matchExpressions") or []:
            if ex.get("operator") == "In" and len(ex.get("values") or []) == 1 and ex.get("key") not in labels:
                labels[ex["key"]] = ex["values"][0]
    return labels


def waits_for(cfg: ProfilesConfig, pod: Mapping[str, Any]) -> str | None:
    """The pool a pod waits for a node of: Pending, not bound, the scheduler's PodScheduled False (not Kueue's
    scheduling gate: such a pod waits for its team's quota), and targeting the pool; else None."""
    spec = pod.get("spec") or {}
    scheduled = condition(pod, "PodScheduled") or {}
    if (spec.get("nodeName") or (pod.get("status") or {}).get("phase") != "Pending"
            or scheduled.get("status") != "False" or scheduled.get("reason") == "SchedulingGated"
            or (pod.get("metadata") or {}).get("deletionTimestamp")):
        return None
    return pool_of(cfg.pools, target_labels(spec))


def team_state(cfg: ProfilesConfig, team: str, queue: Mapping[str, Any] | None,
               waits: tuple[bool, float | None] = (False, None)) -> TeamState:
    """A team's GPU quota used / nominal / borrowed per flavor and pending Workloads from its ClusterQueue (None:
    unread), with `waits` (`oldest_waits`' answer for the team)."""
    name = cluster_queue_name(team)
    if queue is None:
        return TeamState(name, waits_known=waits[0], oldest_wait=waits[1])
    gpu_resources = {r for p in cfg.pools.values() for r in p.slots_per_node()}
    nominal: dict[tuple[str, str], int] = {}
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for r in flavor.get("resources") or []:
                if r.get("name") in gpu_resources:
                    nominal[(flavor.get("name"), r["name"])] = _count(r.get("nominalQuota", 0))
    status = queue.get("status") or {}
    used: dict[tuple[str, str], int] = {}
    borrowed: dict[tuple[str, str], int] = {}
    for flavor in status.get("flavorsUsage") or []:
        for r in flavor.get("resources") or []:
            if r.get("name") in gpu_resources:
                used[(flavor.get("name"), r["name"])] = _count(r.get("total", 0))
                borrowed[(flavor.get("name"), r["name"])] = _count(r.get("borrowed", 0))
    keys = [k for k in nominal if nominal[k] or used.get(k)] + [k for k in used if k not in nominal and used[k]]
    known = "flavorsUsage" in status  # Kueue has not written the queue's usage yet: unknown, not 0
    pending = status.get("pendingWorkloads")
    return TeamState(name, tuple((f, r, used.get((f, r), 0) if known else None, nominal.get((f, r)),
                                  borrowed.get((f, r), 0) if known else None) for f, r in keys),
                     pending if isinstance(pending, int) else None, waits[0], waits[1])


def workload_namespaces(cfg: ProfilesConfig, hub_namespace: str) -> list[str]:
    """Where the teams' Workloads are: each team's namespace (Jobs) and the hub's (queued servers)."""
    return list(dict.fromkeys([t.namespace for t in cfg.teams.values()] + [hub_namespace]))


def waiting_since(workload: Mapping[str, Any]) -> float | None:
    """When a pending Workload's current wait began: Kueue's queue timestamp (the last eviction of a requeued
    one, else its creation), as seconds since the epoch; None when it is not pending or has no time."""
    if not is_pending(workload) or (workload.get("status") or {}).get("admission"):
        return None
    try:
        when = parse_time(queue_key({**workload, "metadata": workload.get("metadata") or {}})[1])
    except (ValueError, OverflowError, TypeError, AttributeError):  # a time that is not one: no wait known
        return None
    return when.timestamp() if when is not None else None


def oldest_waits(cfg: ProfilesConfig, workloads: Mapping[str, list[dict] | None], hub_namespace: str,
                 now: float) -> dict[str, tuple[bool, float | None]]:
    """Per team: (its Workloads were read, seconds its oldest pending one has waited or None: none pending). A
    Workload is the team's when its spec.queueName is the team's LocalQueue in the team's or the hub's namespace;
    a team is unknown when either namespace's list failed (pure)."""
    of_queue = {(ns, local_queue_name(name)): name for name, t in cfg.teams.items()
                for ns in (t.namespace, hub_namespace)}
    oldest: dict[str, float] = {}
    for ns, items in workloads.items():
        for wl in items or []:
            team = of_queue.get((ns, (wl.get("spec") or {}).get("queueName")))
            since = waiting_since(wl) if team is not None else None
            if since is not None:
                oldest[team] = min(oldest.get(team, since), since)
    return {name: (workloads.get(t.namespace) is not None and workloads.get(hub_namespace) is not None,
                   max(0.0, now - oldest[name]) if name in oldest else None) for name, t in cfg.teams.items()}


Reads = Callable[[ProfilesConfig], Awaitable[Read]]


def _why(what: str, e: Exception) -> str:
    return f"{what}: {type(e).__name__}: {getattr(e, 'reason', '') or e}"[:200]


def kube_reads(api_client, hub_namespace: str) -> Reads:
    """One read of nodes, pods (not finished), each team's ClusterQueue and the Workloads of the namespaces they
    are in (`workload_namespaces`), for the file loaded now."""
    from kubernetes_asyncio import client

    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    plain = api_client.sanitize_for_serialization

    async def read(cfg: ProfilesConfig) -> Read:
        out = Read()
        try:
            out.nodes = plain((await core.list_node()).items)
        except Exception as e:  # noqa: BLE001 (whatever the API or the network says: unknown, said why)
            out.errors.append(_why("nodes", e))
        try:
            out.pods = plain((await core.list_pod_for_all_namespaces(
                field_selector="status.phase!=Succeeded,status.phase!=Failed")).items)
        except Exception as e:  # noqa: BLE001
            out.errors.append(_why("pods", e))
        for team in cfg.teams:
            try:
                out.queues[team] = await custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues",
                                                                          cluster_queue_name(team))
            except Exception as e:  # noqa: BLE001
                out.queues[team] = None
                out.errors.append(_why(f"ClusterQueue {cluster_queue_name(team)}", e))
        for ns in workload_namespaces(cfg, hub_namespace):
            try:
                out.workloads[ns] = (await custom.list_namespaced_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, ns, "workloads")).get("items") or []
            except Exception as e:  # noqa: BLE001
                out.workloads[ns] = None
                out.errors.append(_why(f"Workloads in {ns}", e))
        return out

    return read


class LiveReader:
    """`state`: the last read (all unknown until the first); `run()` reads every `every` seconds; `history`: the
    GPU pools' slots in use since the reader was made."""

    def __init__(self, cfg: ProfilesConfig, reads: Reads | None, every: float = 30.0,
                 clock: Callable[[], float] = time.time, hub_namespace: str = "jhub"):
        self.cfg, self.reads, self.every, self.clock = cfg, reads, max(every, 30.0), clock
        self.hub_namespace = hub_namespace
        self.history, self.started = SlotHistory(), clock()
        self.state = LiveState(teams={t: TeamState(cluster_queue_name(t)) for t in cfg.teams},
                               pools={n: PoolState() for n in cfg.pools},
                               errors=[] if reads else ["the cluster is not configured for this page"],
                               history_since=self.started)
        self.reads_done = 0

    async def read_once(self) -> LiveState:
        cfg = self.cfg
        try:
            got = await self.reads(cfg)
        except Exception as e:  # noqa: BLE001 (no API at all): everything unknown, the page says why
            got = Read(errors=[f"{type(e).__name__}: {e}"[:200]])
        self.reads_done += 1
        now = self.clock()
        pools = pool_states(cfg, got.nodes, got.pods)
        self.history.record(now, {n: (p.slots_used, p.slots_total) for n, p in pools.items() if cfg.pools[n].is_gpu})
        waits = oldest_waits(cfg, got.workloads, self.hub_namespace, now)
        self.state = LiveState(now, pools, {t: team_state(cfg, t, got.queues.get(t), waits[t]) for t in cfg.teams},
                               got.errors, self.history.snapshot(), self.started)
        return self.state

    async def run(self) -> None:
        while self.reads is not None:
            await self.read_once()
            await asyncio.sleep(self.every)
