"""How long a full GPU pool keeps a new or waiting server waiting: the picker's "usually frees in ~12 min
(p90 ~40 min)" and the same words in the spawn progress, so that a user can choose between waiting, another
profile and a job before the wait rather than during it.

A pool has no queue object like Kueue's: a server waits as a Pending pod until the scheduler binds it when
a slot frees. So a pod's "admission" is its binding (its PodScheduled condition), and the history of a
pool is the (created, scheduled) pairs of the pods that asked for its GPU resource — anyone's: servers,
Jobs, other workloads all take the slots. `PoolHistory` keeps that history per (pool, GPU resource) as a
view of the hub's one pod watch (`CapacityInformers`: no API call of its own, nothing per page render),
and `wait_estimate.estimate`, the estimator Kueue queues use too, turns it into p50/p90 for a position
(1 + the pods waiting ahead). In memory and bounded (`MAX_HISTORY` per pool), and kept in a file across hub
restarts (`pool_history_file.py`, `GPUSpawner.pool_history_file`): most pods of the history are gone by then.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Callable

from jupyterhub_gpu.cluster.times import parse_time
from jupyterhub_gpu.contract import PROFILE_LABEL
from jupyterhub_gpu.hub import node_add_times
from jupyterhub_gpu.hub.capacity import pod_requests
from jupyterhub_gpu.model.node_pools import pool_of
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig
from jupyterhub_gpu.model.wait_estimate import ETA, Admission, estimate, frees_text

#: Bindings kept per (pool, resource): more than the estimator samples (`wait_estimate.HISTORY`), bounded.
MAX_HISTORY = 1000
#: An estimate is reused for this many seconds (the picker renders often; the history changes slowly).
MEMO_S = 15.0

Key = tuple[str, str]  # (pool name, GPU resource)


def scheduled_at(pod: dict[str, Any]):
    """When the scheduler bound the pod (its PodScheduled condition), or None."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def pod_key(pod: dict[str, Any], cfg: ProfilesConfig) -> Key | None:
    """(pool, GPU resource) a pod waits for: its node selector names the pool (servers, Jobs once Kueue
    admits them, anyone's pod pinned to a pool); None for pods that ask for no GPU of a known pool."""
    spec = pod.get("spec") or {}
    pool = pool_of(cfg.pools, spec.get("nodeSelector") or {})
    if pool is None:
        return None
    gpus = sorted(r for r, v in pod_requests(pod).items() if r.startswith("nvidia.com/") and v > 0)
    if gpus:
        return pool, gpus[0]
    # on a dra pool the GPUs are a ResourceClaim, not a request: the pod's profile says which (a profile with
    # alternatives has no one pool: its pod has a node affinity, not the pool's node selector, and is not counted)
    profile = cfg.by_slug.get(((pod.get("metadata") or {}).get("labels") or {}).get(PROFILE_LABEL, ""))
    if spec.get("resourceClaims") and profile is not None and profile.pool == pool and cfg.pools[pool].is_dra:
        return (pool, resource) if (resource := cfg.resource_name(profile)) else None
    return None


class PoolHistory:
    """A view of the hub's pod informer (`replace(items)`, `apply(kind, pod)`): bindings and waiting pods
    per (pool, GPU resource)."""

    def __init__(self, cfg: Callable[[], ProfilesConfig]):
        self.cfg = cfg  # the current profiles (they may be reloaded)
        self.history: dict[Key, OrderedDict[str, Admission]] = {}
        self.waiting: dict[str, tuple[Key, Any]] = {}  # uid → (key, created) of pods not bound yet
        self._memo: dict[tuple[Key, int], tuple[float, ETA]] = {}
        self.on_change: Callable[[], None] | None = None  # a new binding was recorded (the history file saves)
        #: The pools' measured times to add a node: fed by the same pod events, and by the node informer (`watch`).
        self.node_adds = node_add_times.NodeAddTimes(cfg)
        self.node_adds.on_change = lambda: self.on_change() if self.on_change is not None else None

    def watch(self, informers) -> None:
        """Become a view of the hub's pod informer, and let `node_adds` see its node informer too."""
        informers.views.append(self)
        node_add_times.watch(informers, self.node_adds)

    def replace(self, items: list[dict]) -> None:
        """A full relist: the pods that wait are exactly those listed; history is kept, and grows."""
        self.waiting = {}
        self.node_adds.forget_pods()
        for pod in items:
            self.apply("ADDED", pod)

    def apply(self, kind: str, pod: dict) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
        self.waiting.pop(uid, None)
        phase = (pod.get("status") or {}).get("phase")
        key = pod_key(pod, self.cfg())
        self.node_adds.apply_pod(kind, pod, key[0] if key else None)
        created = parse_time(meta.get("creationTimestamp"))
        if key is None or created is None:
            return
        bound = scheduled_at(pod)
        if bound is not None:
            hist = self.history.setdefault(key, OrderedDict())
            if uid not in hist:
                hist[uid] = Admission(created, bound)
                if len(hist) > MAX_HISTORY:
                    hist.popitem(last=False)
                if self.on_change is not None:
                    self.on_change()
        elif kind != "DELETED" and phase not in ("Succeeded", "Failed") and not meta.get("deletionTimestamp"):
            self.waiting[uid] = (key, created)

    def ahead_of(self, uid: str) -> int | None:
        """How many pods of the same pool and resource wait before this one (None: it is not waiting)."""
        if uid not in self.waiting:
            return None
        key, created = self.waiting[uid]
        return sum(1 for k, c in self.waiting.values() if k == key and c < created)

    def waiting_for(self, key: Key) -> int:
        return sum(1 for k, _ in self.waiting.values() if k == key)

    def eta(self, key: Key, position: int) -> ETA:
        """The estimate for the pod at `position` of this pool's line, reused for `MEMO_S`."""
        now = time.monotonic()
        memo = self._memo.get((key, position))
        if memo and now - memo[0] < MEMO_S:
            return memo[1]
        hist = sorted(self.history.get(key, {}).values(), key=lambda a: a.admitted)
        e = estimate(hist, position)
        if len(self._memo) > 256:
            self._memo.clear()
        self._memo[(key, position)] = (now, e)
        return e

    # ------------------------------------------------------------------ what the hub shows
    def profile_key(self, profile: Profile) -> Key | None:
        resource = self.cfg().resource_name(profile)
        return (profile.pool, resource) if resource and profile.pool else None

    def picker_eta(self, profile: Profile) -> ETA | None:
        """For a new server of this profile: behind every pod now waiting for its pool's resource."""
        key = self.profile_key(profile)
        return None if key is None else self.eta(key, self.waiting_for(key) + 1)

    def pod_eta(self, pod_uid: str | None, profile: Profile | None) -> ETA | None:
        """For a waiting server pod: its own place in its pool's line (None while it waits for the node its pool,
        at zero, is adding: the spawn page counts that down instead, `NodeAddTimes.countdown`)."""
        if self.node_adds.counts_down(pod_uid):
            return None
        key = self.profile_key(profile) if profile is not None else None
        ahead = self.ahead_of(pod_uid) if pod_uid else None
        return None if key is None or ahead is None else self.eta(key, ahead + 1)


def progress_line(message: str, eta: ETA | None) -> str:
    """A spawn-progress sentence with the pool's ETA after it: '... Usually frees in ~12 min (p90 ~40 min).'"""
    if eta is None:
        return message
    words = frees_text(eta)
    return f"{message} {words[0].upper()}{words[1:]}."
