"""Nodes whose GPU failed the server's health check (the `gpuhub-gpu-check` init container), kept by the
hub for a while.

Without a memory of it, "try again" would land the next start on the same broken node. So the hub remembers
the node (`GPUFaults`): that user's next server keeps off it (`avoid_nodes`: a required node affinity on
`metadata.name`); once a second, distinct user's check failed there too (a user's own code can write the
check's words as the termination message), everyone's servers prefer other nodes and the picker marks its pool
as degraded; and the user reads one short sentence first with the technical details folded
(`failure_message`), announced to screen readers (role=alert). A node is forgotten after `ttl` seconds (a
fixed driver or device plugin makes it usable again) or as soon as a server passes the check on it.
"""
from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from typing import Callable

from traitlets import HasTraits, Integer

#: Distinct users whose failed checks on a node make it failing for everyone (one user's report, possibly
#: forged by their own code writing the check's words as the termination message, counts for them alone).
CONFIRMING_USERS = 2


@dataclass
class GPUFaults:
    """node → (pool, when its GPU check last failed) and who reported it; one per hub process, pure apart from
    the clock. Everyone sees a node as failing once `CONFIRMING_USERS` distinct users reported it within `ttl`;
    a reporter sees their own reports at once."""

    ttl: float = 1800.0
    clock: Callable[[], float] = time.time
    #: The node's own signal that its GPU is gone (see gpu_gone): confirms one user's report for everyone.
    node_signal: Callable[[str], bool] = lambda node: False
    _nodes: dict[str, tuple[str | None, float]] = field(default_factory=dict)
    _reporters: dict[str, dict[str | None, float]] = field(default_factory=dict)

    def record(self, node: str, pool: str | None, at: float | None = None, user: str | None = None) -> None:
        at = self.clock() if at is None else at
        self._nodes[node] = (pool, max(at, self._nodes.get(node, (None, at))[1]))
        self._reporters.setdefault(node, {})[user] = at

    def clear(self, node: str) -> None:
        self._nodes.pop(node, None)
        self._reporters.pop(node, None)

    def _current(self) -> dict[str, tuple[str | None, float]]:
        now = self.clock()
        for node, who in list(self._reporters.items()):
            for user in [u for u, at in who.items() if now - at > self.ttl]:
                del who[user]
            if not who:
                self.clear(node)
        return self._nodes

    def _counts_for(self, node: str, reporter: str | None) -> bool:
        who = self._reporters.get(node, {})
        return len(who) >= CONFIRMING_USERS or (reporter is not None and reporter in who) or \
            (bool(who) and self.node_signal(node))

    def failing(self, pool: str | None = None, known_only: bool = False, reporter: str | None = None) -> list[str]:
        """Nodes (of `pool`, or all) failing for everyone (confirmed by distinct users within the last `ttl`
        seconds), and those `reporter` reported themselves; a node whose pool was not known when recorded (a
        restarted hub) counts for every pool unless `known_only`."""
        return sorted(n for n, (p, _) in self._current().items()
                      if (pool is None or p == pool or (p is None and not known_only))
                      and self._counts_for(n, reporter))

    def since(self, node: str, reporter: str | None = None) -> float | None:
        """When `reporter`'s check last failed on `node` (None: any report), within the window."""
        self._current()
        who = self._reporters.get(node, {})
        return who.get(reporter) if reporter is not None else (max(who.values()) if who else None)


def gpu_gone(record) -> bool:
    """The node's own word that its GPUs are gone: it offers none of any `nvidia.com/` resource (the device
    plugin withdraws unhealthy devices from allocatable; GFD's and the plugin's view, not a user's)."""
    return record is not None and not any(v > 0 for name, v in record.alloc if name.startswith("nvidia.com/"))


def failure_message(gpu_label: str, details: str) -> tuple[str, str]:
    """(plain text, HTML) for a failed GPU check: the short sentence first, the check's own message folded."""
    short = (f"This {gpu_label} node's GPU isn't working; pick another profile or start again — "
             "you'll get another node.")
    text = f"{short} Details: {details}"
    page = (f'<div role="alert" class="gpuhub-gpu-failure"><p><strong>{html.escape(short)}</strong></p>'
            f'<details><summary>Details</summary><p>{html.escape(details)}</p></details></div>')
    return text, page


def degraded_note(failing: int, nodes: int) -> str:
    """The picker's line for a pool with failing nodes."""
    which = "1 node's GPU is" if failing == 1 else f"{failing} nodes' GPUs are"
    of = f" (of {nodes})" if nodes else ""
    return f"degraded: {which} failing its check{of}; new servers keep off it"


def avoid_nodes(pod, nodes: list[str], prefer_not: list[str] = ()):
    """The pod (a kubernetes_asyncio V1Pod) kept off `nodes` (a required node affinity, added to every term:
    terms are ORed, requirements within a term ANDed) and steered away from `prefer_not` (a preferred one)."""
    from kubernetes_asyncio.client import (
        V1Affinity,
        V1NodeAffinity,
        V1NodeSelector,
        V1NodeSelectorRequirement,
        V1NodeSelectorTerm,
        V1PreferredSchedulingTerm,
    )

    prefer_not = sorted(set(prefer_not) - set(nodes))
    if not nodes and not prefer_not:
        return pod
    spec = pod.spec
    spec.affinity = spec.affinity or V1Affinity()
    spec.affinity.node_affinity = spec.affinity.node_affinity or V1NodeAffinity()
    na = spec.affinity.node_affinity
    if prefer_not:
        away = V1PreferredSchedulingTerm(weight=100, preference=V1NodeSelectorTerm(match_fields=[
            V1NodeSelectorRequirement(key="metadata.name", operator="NotIn", values=prefer_not)]))
        na.preferred_during_scheduling_ignored_during_execution = [
            *(na.preferred_during_scheduling_ignored_during_execution or []), away]
    if not nodes:
        return pod
    keep_off = V1NodeSelectorRequirement(key="metadata.name", operator="NotIn", values=sorted(nodes))
    required = na.required_during_scheduling_ignored_during_execution
    if required is None or not required.node_selector_terms:
        na.required_during_scheduling_ignored_during_execution = V1NodeSelector(
            node_selector_terms=[V1NodeSelectorTerm(match_fields=[keep_off])])
        return pod
    for term in required.node_selector_terms:
        if isinstance(term, dict):  # KubeSpawner passes the admin's node_affinity_required as dicts
            term.setdefault("matchFields", []).append({"key": "metadata.name", "operator": "NotIn",
                                                       "values": sorted(nodes)})
        else:
            term.match_fields = [*(term.match_fields or []), keep_off]
    return pod


class AvoidFailingGPUs(HasTraits):
    """GPUSpawner's part: record a failed check's node, keep new servers off it, remember it in the user's
    spawner state (a restarted hub still knows), forget it once a server passes the check there."""

    gpu_check_avoid_seconds = Integer(
        1800,
        config=True,
        help="""How long new servers keep off a node whose GPU failed the server's health check.

        The picker marks the node's pool as degraded meanwhile; a server that passes the check on the node
        clears it sooner. 0: never avoid (a new start may land on the same node again).
        """,
    )

    _gpu_faults: GPUFaults | None = None  # one per hub process, on the class

    def gpu_faults(self) -> GPUFaults:
        cls = type(self)
        if cls._gpu_faults is None:
            cls._gpu_faults = GPUFaults(ttl=self.gpu_check_avoid_seconds, node_signal=cls._node_gpu_gone)
        return cls._gpu_faults

    @classmethod
    def _node_gpu_gone(cls, node: str) -> bool:
        """What the hub's node watch says of `node` (nothing while it is stale or has not seen the node; on a dra
        pool its GPUs are its published devices, so nothing either while those are not current)."""
        inf = cls._informers
        state = inf.state if inf is not None and not inf.stale else None
        record = state.nodes.get(node) if state is not None else None
        return record is not None and (record.pool not in state.dra_pools or state.devices_current()) \
            and gpu_gone(state.offered(record))

    def _fault_reporter(self) -> str | None:
        """Whose report a failed check on this spawner is (its user's name)."""
        return getattr(getattr(self, "user", None), "name", None)

    def nodes_to_avoid(self) -> tuple[list[str], list[str]]:
        """(nodes this user's server must keep off, nodes it should rather not use) in the chosen pool: where
        this user's own start failed its GPU check, and where anyone's did. The first stay a preference only
        when they are all the pool has and it cannot grow (then waiting for them beats never starting)."""
        profile = getattr(self, "gpu_profile", None)
        if profile is None or profile.pool is None or self.gpu_check_avoid_seconds <= 0:
            return [], []
        faults, me = self.gpu_faults(), self._fault_reporter()
        failing = faults.failing(profile.pool)
        mine = [n for n in faults.failing(profile.pool, reporter=me) if n in getattr(self, "_gpu_failed_nodes", {})]
        inf = type(self)._informers
        if mine and inf is not None and not inf.stale:
            nodes = inf.state.pool_nodes(profile.pool)
            pool = self.profiles.pool_of(profile)
            can_grow = pool is not None and pool.max_nodes is not None and pool.max_nodes > len(nodes)
            if not can_grow and not any(n.name not in mine and n.schedulable for n in nodes):
                mine = []
        return mine, failing

    def pool_failing_note(self, pool: str | None) -> str | None:
        """The picker's 'degraded' line for this pool, None while none of its nodes is failing."""
        failing = self.gpu_faults().failing(pool, known_only=True, reporter=self._fault_reporter()) \
            if pool and type(self)._gpu_faults else []
        if not failing:
            return None
        inf = type(self)._informers
        return degraded_note(len(failing), len(inf.state.pool_nodes(pool)) if inf is not None else 0)

    def record_gpu_failure(self, pod: dict, details: str) -> tuple[str, str]:
        """Remember the node; (text, html) of the short message with `details` folded."""
        node = (pod.get("spec") or {}).get("nodeName")
        profile = getattr(self, "gpu_profile", None)
        pool = self.profiles.pool_of(profile) if profile else None
        if node and self.gpu_check_avoid_seconds > 0:
            faults = self.gpu_faults()
            at = faults.clock()
            faults.record(node, profile.pool if profile else None, at, self._fault_reporter())
            self._gpu_failed_nodes = {**getattr(self, "_gpu_failed_nodes", {}), node: at}
        return failure_message(pool.label.removeprefix("NVIDIA ") if pool is not None else "GPU", details)

    def gpu_check_passed(self, pod: dict | None) -> None:
        node = ((pod or {}).get("spec") or {}).get("nodeName")
        if node and type(self)._gpu_faults is not None:
            type(self)._gpu_faults.clear(node)

    def get_state(self):
        """This user's failing nodes still within the window, kept across hub restarts."""
        state = super().get_state()
        mine = getattr(self, "_gpu_failed_nodes", {})
        if mine and type(self)._gpu_faults is not None:
            kept = {n: at for n, at in mine.items() if self.gpu_faults().since(n, self._fault_reporter()) is not None}
            if kept:
                state["gpu_failed_nodes"] = kept
        return state

    def load_state(self, state):
        """A restarted hub learns the failing nodes back from the users' states."""
        super().load_state(state)
        failed = (state or {}).get("gpu_failed_nodes")
        if not isinstance(failed, dict) or not failed:
            return
        faults = self.gpu_faults()
        inf = type(self)._informers
        for node, at in failed.items():
            if isinstance(node, str) and isinstance(at, (int, float)) and \
                    faults.since(node, self._fault_reporter()) is None:
                known = inf.state.nodes.get(node) if inf is not None else None
                faults.record(node, known.pool if known else None, at, self._fault_reporter())
        self._gpu_failed_nodes = {n: at for n, at in failed.items() if isinstance(n, str)}
