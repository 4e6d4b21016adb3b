"""The teams' Kueue quota as the picker shows it: one list + watch of ClusterQueues in the hub (`TeamQuotas`).

A queued server (builders/kueue.py `server_queue`) starts only when its team's ClusterQueue admits it, so the
card of such a profile says what the team can still take (model/team_room.py) and when the team, not the pool,
is the limit. The queues are few and change on every admission; one watch keeps them current, read from
memory by each render (no API call per page). Errors never become data (`kubeio.informer.Informer`): until
the first list, or while the watch fails, every team's quota is "unknown".
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from jupyterhub_gpu.builders.kueue import cluster_queue_name, server_queue
from jupyterhub_gpu.contract import KUEUE_GROUP, KUEUE_VERSION
from jupyterhub_gpu.kubeio.informer import Informer, WatchSettings
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig
from jupyterhub_gpu.model.team_room import QueueFacts, Room, queue_facts, team_room


@dataclass(frozen=True)
class TeamView:
    """What a card says about the user's team on the profile's pool: None `room` is unknown."""

    team: str
    room: Room | None
    pending: int | None = None


class TeamQuotas:
    """Every ClusterQueue, kept as `QueueFacts` from one informer; `view` answers from memory."""

    def __init__(self, custom, settings: WatchSettings | None = None):
        self.queues: dict[str, QueueFacts] = {}
        self.version = 0
        self._memo: dict[tuple[str, str, str], tuple[int, Room | None]] = {}
        self.informer = Informer("clusterqueues", partial(custom.list_cluster_custom_object, KUEUE_GROUP,
                                                          KUEUE_VERSION, "clusterqueues"),
                                 self._replace, self._apply, settings)

    def _replace(self, items: list[dict[str, Any]]) -> None:
        self.queues = {q["metadata"]["name"]: queue_facts(q) for q in items}
        self.version += 1

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.queues.pop(name, None)
        else:
            self.queues[name] = queue_facts(obj)
        self.version += 1

    @property
    def stale(self) -> bool:
        return self.informer.stale

    def room(self, queue: str, flavor: str, resource: str) -> Room | None:
        """The queue's room on (flavor, resource), recomputed only after an event (None: unknown)."""
        if self.stale:
            return None
        key = (queue, flavor, resource)
        memo = self._memo.get(key)
        if memo is None or memo[0] != self.version:
            memo = self._memo[key] = (self.version, team_room(self.queues, queue, flavor, resource))
        return memo[1]

    def view(self, cfg: ProfilesConfig, profile: Profile, groups: list[str]) -> TeamView | None:
        """The team line's facts for this user's card, or None when servers of the profile are not queued."""
        found = server_queue(cfg, profile, groups)
        resource = cfg.resource_name(profile)
        if found is None or resource is None:
            return None
        queue = cluster_queue_name(found[0])
        facts = self.queues.get(queue)
        return TeamView(found[0], self.room(queue, profile.pool, resource),
                        facts.pending if facts is not None and not self.stale else None)

    def start(self) -> None:
        self.informer.start()

    async def stop(self) -> None:
        await self.informer.stop()
