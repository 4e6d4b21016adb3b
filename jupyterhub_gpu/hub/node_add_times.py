"""How long a GPU pool takes to add a node, as this hub measured it: the picker's "starts in ~6 min (a node is
added)" for a pool at zero, and the spawn page's countdown while a server waits for that node.

A sample: a node of a GPU pool appears, created after the hub started watching, while pods of that pool wait
unschedulable (PodScheduled False, reason Unschedulable); the sample is the node's Ready transition minus the
unschedulable time of the earliest such pod still waiting when the node was created. Samples below 0 or above
`MAX_SAMPLE_S` are not kept (a clock skew, a node added for something else); the last `NODE_ADD_SAMPLES` per
pool are, in memory and in the pool history file (`pool_history_file.py`), so a restarted hub still knows.

Pure functions for each step; `NodeAddTimes` folds the hub's one watch into them, with no request of its own:
its pods come through `PoolHistory` (a view of the pod informer), its nodes by `watch`, which taps the node
informer's callbacks after `ClusterState`'s own and hands the state this object (`ClusterState.node_adds`).
"""
from __future__ import annotations

import math
from collections import Counter, OrderedDict, deque
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, NamedTuple

from jupyterhub_gpu.cluster.times import parse_time
from jupyterhub_gpu.hub.capacity_text import NODE_ADD_SAMPLES, node_add_countdown, node_add_seconds
from jupyterhub_gpu.model.node_pools import pool_of
from jupyterhub_gpu.model.profiles import ProfilesConfig

#: A longer "node add" is not one (a pod that waited for something else first): 2 h.
MAX_SAMPLE_S = 2 * 3600.0
#: New nodes remembered as already measured (their later MODIFIED events are not samples again).
MAX_DECIDED = 4096
#: Pods that stopped waiting, kept per pool: a node's ADDED event may come after the pod it was added for was
#: bound to it (the node and pod watches are two streams; a node Ready at once, as KWOK's, shows it).
MAX_LEFT = 64


def _time(value: Any) -> datetime | None:
    try:
        return parse_time(value) if isinstance(value, str) else None
    except (ValueError, OverflowError):
        return None


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == kind:
            return c
    return None


def unschedulable_since(pod: dict[str, Any]) -> datetime | None:
    """When the scheduler found no node for the pod (PodScheduled False, reason Unschedulable), else None."""
    c = _condition(pod, "PodScheduled")
    if c and c.get("status") == "False" and c.get("reason") == "Unschedulable":
        return _time(c.get("lastTransitionTime"))
    return None


def ready_at(node: dict[str, Any]) -> datetime | None:
    """When the node became Ready (its Ready condition's lastTransitionTime), None while it is not."""
    c = _condition(node, "Ready")
    return _time(c.get("lastTransitionTime")) if c and c.get("status") == "True" else None


def asked_at(waits: Iterable[tuple[datetime, datetime | None]], node_created: datetime) -> datetime | None:
    """The earliest unschedulable time among pods still waiting when the node was created (None: no pod asked);
    `waits`: (unschedulable since, when it stopped waiting or None while it still waits)."""
    return min((since for since, left in waits if since <= node_created and (left is None or left >= node_created)),
               default=None)


def scheduled_at(pod: dict[str, Any]) -> datetime | None:
    c = _condition(pod, "PodScheduled")
    return _time(c.get("lastTransitionTime")) if c and c.get("status") == "True" else None


def sample_seconds(asked: datetime, ready: datetime) -> float | None:
    """Seconds from the pod that asked to the node Ready, None outside [0, MAX_SAMPLE_S]."""
    s = (ready - asked).total_seconds()
    return s if 0 <= s <= MAX_SAMPLE_S else None


def with_sample(samples: list[float], s: float) -> list[float]:
    """The pool's samples with a new one last, the last NODE_ADD_SAMPLES kept."""
    return (list(samples) + [s])[-NODE_ADD_SAMPLES:]


def valid_samples(values: Any) -> list[float]:
    """Samples as a file holds them: numbers in [0, MAX_SAMPLE_S], the last NODE_ADD_SAMPLES (others skipped)."""
    if not isinstance(values, list):
        return []
    ok = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
          and math.isfinite(v) and 0 <= v <= MAX_SAMPLE_S]
    return ok[-NODE_ADD_SAMPLES:]


class Waiter(NamedTuple):
    pool: str
    since: datetime   # unschedulable since
    at_zero: bool     # the pool had no node when the pod started waiting
    uid: str | None = None


class NodeAddTimes:
    """Per GPU pool, the measured times to add a node; fed by pod events (`apply_pod`, with the pool the pod
    asks for) and node events (`apply_node`, `replace_nodes`)."""

    def __init__(self, cfg: Callable[[], ProfilesConfig], since: datetime | None = None):
        self.cfg = cfg
        #: Nodes created before are not samples (to the second: the API server writes whole seconds).
        self.since = since or datetime.now(timezone.utc)
        self.samples: dict[str, list[float]] = {}
        self.waiting: dict[str, Waiter] = {}                # "namespace/name" of unschedulable pods
        self._before_relist: dict[str, Waiter] = {}
        self.left: dict[str, deque[tuple[datetime, datetime]]] = {}  # pool -> (since, left) of pods that waited
        self.nodes: dict[str, str] = {}                     # GPU-pool node name -> pool
        self.per_pool: Counter = Counter()
        self.adding: dict[str, tuple[str, datetime]] = {}   # new node name -> (pool, asked at)
        self.decided: OrderedDict[str, None] = OrderedDict()
        self.on_change: Callable[[], None] | None = None     # a sample was recorded (the history file saves)

    # ------------------------------------------------------------------ pods
    def forget_pods(self) -> None:
        """A pod relist follows: the pods that wait are exactly those it lists (each keeps when it began)."""
        self._before_relist, self.waiting = self.waiting, {}

    def apply_pod(self, kind: str, pod: dict[str, Any], pool: str | None) -> None:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        old = self.waiting.pop(key, None) or self._before_relist.pop(key, None)
        since = unschedulable_since(pod)
        if (kind == "DELETED" or pool is None or since is None or meta.get("deletionTimestamp")
                or (pod.get("spec") or {}).get("nodeName")
                or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")):
            if old is not None:  # it stopped waiting: bound (the scheduler's time) or gone (now)
                left = scheduled_at(pod) or datetime.now(timezone.utc)
                self.left.setdefault(old.pool, deque(maxlen=MAX_LEFT)).append((old.since, left))
            return
        at_zero = old.at_zero if old is not None and old.pool == pool else self.per_pool[pool] == 0
        self.waiting[key] = Waiter(pool, since, at_zero, meta.get("uid"))

    # ------------------------------------------------------------------ nodes
    def replace_nodes(self, items: list[dict[str, Any]]) -> None:
        names = set()
        for node in items:
            names.add((node.get("metadata") or {}).get("name"))
            self.apply_node("ADDED", node)
        for gone in [n for n in self.nodes if n not in names]:
            self._forget_node(gone)

    def _forget_node(self, name: str) -> None:
        if (pool := self.nodes.pop(name, None)) is not None:
            self.per_pool[pool] -= 1
        self.adding.pop(name, None)

    def apply_node(self, kind: str, node: dict[str, Any]) -> bool:
        """Returns whether a sample was recorded."""
        meta = node.get("metadata") or {}
        name = meta.get("name")
        uid = meta.get("uid") or name
        if not isinstance(name, str):
            return False
        if kind == "DELETED":
            self._forget_node(name)
            self.decided.pop(uid, None)
            return False
        pools = self.cfg().pools
        pool = pool_of(pools, meta.get("labels") or {})
        if pool is None or not pools[pool].is_gpu:
            self._forget_node(name)
            return False
        if self.nodes.get(name) != pool:
            self._forget_node(name)
            self.nodes[name] = pool
            self.per_pool[pool] += 1
        created = _time(meta.get("creationTimestamp"))
        if created is None or created < self.since.replace(microsecond=0) or uid in self.decided:
            return False
        if name not in self.adding:
            waits = [(w.since, None) for w in self.waiting.values() if w.pool == pool]
            asked = asked_at(waits + list(self.left.get(pool, ())), created)
            if asked is None:  # added for something else (a warm schedule, an admin): not a sample
                self._decide(uid)
                return False
            self.adding[name] = (pool, asked)
        ready = ready_at(node)
        if ready is None:
            return False
        pool, asked = self.adding.pop(name)
        self._decide(uid)
        s = sample_seconds(asked, ready)
        if s is None:
            return False
        self.samples[pool] = with_sample(self.samples.get(pool, []), s)
        if self.on_change is not None:
            self.on_change()
        return True

    def _decide(self, uid: str) -> None:
        self.decided[uid] = None
        while len(self.decided) > MAX_DECIDED:
            self.decided.popitem(last=False)

    # ------------------------------------------------------------------ reading
    def samples_of(self, pool: str | None) -> list[float]:
        return self.samples.get(pool, []) if pool else []

    def seconds(self, pool: str | None) -> float | None:
        """The pool's time to add a node (the median of its recent samples), None without any."""
        return node_add_seconds(self.samples_of(pool))

    def merge(self, samples: dict[str, list[float]]) -> int:
        """Samples read back from the file go before those measured since (the newest kept); returns how many."""
        added = 0
        for pool, got in samples.items():
            self.samples[pool] = (list(got) + self.samples.get(pool, []))[-NODE_ADD_SAMPLES:]
            added += len(got)
        return added

    def counts_down(self, uid: str | None) -> bool:
        """Whether the pod with this uid is told the countdown (its pool was at zero, and has recorded times)."""
        return uid is not None and any(w.uid == uid and w.at_zero and self.samples_of(w.pool)
                                       for w in self.waiting.values())

    def countdown(self, namespace: str | None, name: str | None, now: datetime | None = None) -> str | None:
        """'a node is being added: about 4 min left' for a pod waiting since its pool was at zero, when the
        pool has recorded times; else None."""
        w = self.waiting.get(f"{namespace}/{name}")
        s = self.seconds(w.pool) if w is not None and w.at_zero else None
        if s is None:
            return None
        return node_add_countdown(s, ((now or datetime.now(timezone.utc)) - w.since).total_seconds())


def watch(informers, adds: NodeAddTimes) -> None:
    """Feed `adds` from the node informer of `informers` (`CapacityInformers`), after the state's own callbacks,
    and hand every state it fills (a new one after a profiles change) this object as `node_adds`."""
    nodes = informers.nodes
    replace, apply = nodes.replace, nodes.apply
    adds.since = datetime.now(timezone.utc)

    def on_replace(items: list[dict]) -> None:
        replace(items)
        informers.state.node_adds = adds
        adds.replace_nodes(items)

    def on_apply(kind: str, node: dict) -> None:
        apply(kind, node)
        informers.state.node_adds = adds
        if adds.apply_node(kind, node):
            informers.state.version += 1  # the picker's words change: no memo of before

    nodes.replace, nodes.apply = on_replace, on_apply
    informers.state.node_adds = adds
