"""A spawn that may wait in its team's Kueue queue (GPUSpawner mixes this in): which queue it waits in,
how long it may wait and how long it then has to start, what the spawn page says meanwhile, and the last
failure's reason kept for the home page.

A GPU server queues like a team's Jobs, so a full quota makes it wait rather than fail; but a wait in the
queue is not a slow start, so the two get separate deadlines: a queued server may wait `queue_wait_limit`,
and only once admitted (or when not queued at all) does the admin's `start_timeout` count. JupyterHub's and
KubeSpawner's own timeouts are set past both, so a plain sentence with what to do next always ends the
spawn, never an empty "Spawn failed:". A hub restart does not lose a waiting server's place: its check at the
hub's start waits for the pod's turn (`get_url`), and a start of the same request that finds the pod still
queued keeps it (queued_pod.py).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from jupyterhub.utils import utcnow
from traitlets import Float, Integer
from traitlets.config import LoggingConfigurable

from jupyterhub_gpu.builders.kueue import cluster_queue_name, local_queue_name, server_queue
from jupyterhub_gpu.cluster.times import parse_time
from jupyterhub_gpu.contract import KUEUE_GROUP, KUEUE_VERSION, REQUEST_DIGEST_ANNOTATION
from jupyterhub_gpu.hub import queued_pod, wait_messages
from jupyterhub_gpu.model.choices import ChoiceError
from jupyterhub_gpu.model.kueue_words import QueueContext, context_for

#: JupyterHub's and KubeSpawner's timeouts run this much longer than ours, so ours always fire first.
GRACE_S = 30
#: Seconds between two looks at a queued pod whose spawn the hub's restart interrupted (the pod watch's view).
RESUME_POLL_S = 1.0


def is_patience(event: dict[str, Any]) -> bool:
    """KubeSpawner's "Please be patient … N seconds" (a message and nothing else): it would replace the
    plain reason as the headline, so it is dropped; the spawn page counts the time waited itself."""
    return set(event) == {"message"}


async def merged(*sources: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    """Events of several async generators as they come; ends when the first one (KubeSpawner's progress,
    which ends with the spawn) ends; the others are closed."""
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump(source, last: bool):
        try:
            async for event in source:
                await queue.put(event)
        finally:
            if last:
                await queue.put(done)

    tasks = [asyncio.ensure_future(pump(src, i == 0)) for i, src in enumerate(sources)]
    try:
        while (event := await queue.get()) is not done:
            yield event
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class SpawnFailed(Exception):
    """A spawn that gave up, with the plain sentence JupyterHub shows (`jupyterhub_message`)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.jupyterhub_message = message


class QueuedSpawnMixin(LoggingConfigurable):
    """Mixed in before KubeSpawner; a stopped server's state keeps `_last_failure` (KubeSpawner's
    clear_state leaves it), so the reason survives the stop JupyterHub runs after a failed start."""

    queue_wait_limit = Integer(
        4 * 3600,
        config=True,
        help="""Longest a server may wait in its team's Kueue queue, in seconds (0: no limit).

        A queued spawn does not count against `start_timeout`; that applies once Kueue admits the server.
        When the limit runs out the queued pod is removed and the user reads why and what to do instead.
        """,
    )

    queue_status_interval = Float(
        5.0,
        config=True,
        help="""How often a waiting spawn's page refreshes its place in the queue, in seconds (one list of
        the team's Workloads per waiting spawn).""",
    )

    _base_start_timeout: int | None = None
    _spawn_began: float | None = None
    _admitted_at: float | None = None
    _queue: tuple[str, Any] | None = None
    _last_failure: dict[str, str] | None = None
    _headline: str | None = None
    _never: str | None = None  # Kueue says the queue can never admit this server

    # ------------------------------------------------------------------ start: deadlines
    def _queue_for(self, options: dict[str, Any]):
        """(team name, team) whose queue this spawn waits in, or None."""
        if not self.profiles_file:
            return None
        try:
            chosen = self.check_profile_choice(options or {})
        except ChoiceError:
            return None  # load_user_options refuses it with the reason
        return server_queue(self.profiles, chosen.profile, self.user_groups())

    def start(self):
        if not self.profiles_file:
            return super().start()  # a plain KubeSpawner: its own timeouts, nothing kept
        if self._base_start_timeout is None:
            self._base_start_timeout = self.start_timeout
        self._queue = self._queue_for(self.user_options)
        self._spawn_began, self._admitted_at, self._headline, self._never = time.monotonic(), None, None, None
        self._last_failure = None  # a new start: the last one's reason is history
        # JupyterHub reads start_timeout right after start() returns: the whole wait, queue included
        self.start_timeout = self._base_start_timeout + GRACE_S + (
            (self.queue_wait_limit or 10 * 365 * 86400) if self._queue else 0)
        return super().start()

    async def _start(self):
        if not self.profiles_file:
            return await super()._start()
        try:
            url = await super()._start()
            if self._queue:
                self._active_from_now()
            return url
        except asyncio.CancelledError:
            raise  # the user pressed Stop (our deadlines fire before the hub's own)
        except Exception as e:
            message = getattr(e, "jupyterhub_message", None) or wait_messages.unexplained_message(e)
            profile = getattr(self, "gpu_profile", None)
            self._last_failure = wait_messages.failure_record(message, profile.display_name if profile else None)
            raise
        finally:
            self._spawn_began = None
            # the long value was read when the waits began; stop() waits for the pod with the plain one
            self.start_timeout = self._base_start_timeout + GRACE_S

    def _active_from_now(self) -> None:
        """A server that waited in its team's queue starts its idle clock when it runs, not when it was asked for.
        JupyterHub stamps the server's activity when the spawn begins, and the first activity report comes one
        activity interval after it runs: a queue wait longer than idle_timeout let the culler stop the server
        in between (the faulted day replay saw it)."""
        orm_spawner = getattr(self, "orm_spawner", None)
        if orm_spawner is None:
            return
        orm_spawner.last_activity = utcnow(with_tz=False)
        self.db.commit()

    def check_deadlines(self, pod: dict[str, Any] | None) -> None:
        """Raise SpawnFailed when the queue wait limit or (after admission) start_timeout has passed."""
        began = self._spawn_began
        if began is None or self._base_start_timeout is None:
            return  # not our spawn (a poll after a hub restart)
        now = time.monotonic()
        profile = getattr(self, "gpu_profile", None)
        name = profile.display_name if profile else "GPU"
        if wait_messages.gated(pod):
            if self._never:
                raise SpawnFailed(wait_messages.over_quota_message(self._queue[0], name, self._never))
            if self.queue_wait_limit and now - began > self.queue_wait_limit:
                team = self._queue[0] if self._queue else "your"
                raise SpawnFailed(wait_messages.queue_limit_message(team, now - began, name))
            return
        if pod is None and self._queue:
            return  # not seen yet: it may still be gated
        if self._admitted_at is None:
            self._admitted_at = now
        if now - self._admitted_at > self._base_start_timeout:
            raise SpawnFailed(wait_messages.start_timeout_message(now - self._admitted_at, name, self._headline))

    # ------------------------------------------------------------------ a queued pod outlives the hub
    async def get_url(self):
        """JupyterHub asks this, at its start, of a server that was still starting when the hub stopped (poll
        said running), then waits `http_timeout` for that URL to answer and otherwise deletes the pod. A queued
        server has no address until Kueue admits it and it runs, and the URL stored at the spawn's start is a
        placeholder: so the check waits here for the pod's turn (bounded by `queue_wait_limit` from the pod's
        creation, then `start_timeout` from its admission) and answers the pod's own URL. The server then
        comes up as a resumed one, with the place it had in the queue; past a limit, or once the pod is gone,
        the stored URL is answered and JupyterHub stops the server as before."""
        if not self.profiles_file:
            return await super().get_url()
        await self._start_watching_pods()
        admitted: float | None = None
        logged = False
        while True:
            pod = self.pod_reflector.pods.get(self._pod_key()) if self.pod_reflector else None
            if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
                return await super().get_url()
            try:
                running = self.is_pod_running(pod)
            except Exception as e:  # noqa: BLE001 - a start that cannot succeed (its reason logged): stopped
                self.log.warning("%s: its pod cannot start (%s)", self._log_name, e)
                return await super().get_url()
            if running:
                if logged:  # it waited for its turn here: its idle clock starts now, as a spawn's does
                    self._active_from_now()
                return self._get_pod_url(pod)
            if wait_messages.gated(pod):
                if not logged:
                    self.log.info("%s: its pod %s still waits in its team's queue; the hub's check waits for its "
                                  "turn", self._log_name, pod["metadata"]["name"])
                    logged = True
                created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
                if self.queue_wait_limit and created and time.time() - created.timestamp() > self.queue_wait_limit:
                    return await super().get_url()
            else:
                admitted = admitted or time.monotonic()
                if time.monotonic() - admitted > (self._base_start_timeout or self.start_timeout):
                    return await super().get_url()
            await asyncio.sleep(RESUME_POLL_S)

    async def _make_create_pod_request(self, pod, request_timeout):
        """KubeSpawner's create, except that a queued server's pod that outlived a hub restart is kept, with its
        place in the queue, when this start asks for exactly that pod (queued_pod.py)."""
        if not self.profiles_file or not self._queue:
            return await super()._make_create_pod_request(pod, request_timeout)
        want = queued_pod.digest(self.api.api_client.sanitize_for_serialization(pod))
        pod.metadata.annotations = {**(pod.metadata.annotations or {}), REQUEST_DIGEST_ANNOTATION: want}
        token = await self._kept_queued_pod(pod.metadata.name, want)
        if token is None:
            return await super()._make_create_pod_request(pod, request_timeout)
        self.api_token = token  # JupyterHub keeps a resumed server's own token (and drops the unused new one)
        self.log.info("%s: its pod %s still waits in the %s queue (the hub restarted meanwhile): kept, with its "
                      "place", self._log_name, pod.metadata.name, self._queue[0])
        return True

    async def _kept_queued_pod(self, name: str, want: str) -> str | None:
        """The token of this server's pod when it is still queued from the same request and that token is a live
        one of this user in the hub's database, else None (KubeSpawner's delete and create)."""
        try:
            existing = await self.api.read_namespaced_pod(name, self.namespace, _request_timeout=10)
        except Exception as e:  # noqa: BLE001 - 404 (the usual case) or the API: KubeSpawner's create decides
            if getattr(e, "status", None) != 404:
                self.log.warning("could not read %s before creating it: %s", name, e)
            return None
        token = queued_pod.kept_token(self.api.api_client.sanitize_for_serialization(existing), want)
        if token is None:
            return None
        why = queued_pod.token_refusal(getattr(self.user, "db", None), getattr(self.user, "orm_user", None), token)
        if why:
            self.log.warning("%s: its queued pod %s is not kept (%s): replaced, as a pod of another request",
                             self._log_name, name, why)
            return None
        return token

    # ------------------------------------------------------------------ progress while queued
    async def queue_place(self, pod_name: str) -> wait_messages.QueuePlace | None:
        """This server's place in its team's queue (None: the Workloads cannot be read now): the servers'
        Workloads in the hub namespace and the ClusterQueue's pending count (the hub reads nothing in team
        namespaces)."""
        from kubespawner.clients import shared_client

        team_name = self._queue[0]
        api = shared_client("CustomObjectsApi")
        try:
            got = await api.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, self.namespace, "workloads",
                                                          _request_timeout=10)
            cq = await api.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues",
                                                     cluster_queue_name(team_name), _request_timeout=10)
        except Exception as e:  # the API down or slow: say so, keep waiting
            self.log.warning("queue position of %s: %s", pod_name, e)
            return None
        profile = getattr(self, "gpu_profile", None)
        return wait_messages.queue_place(got.get("items", []), self.namespace, local_queue_name(team_name),
                                         pod_name, cq, flavor=profile.pool if profile else None)

    async def queue_events(self) -> AsyncIterator[dict[str, Any]]:
        """Spawn-page events while the server waits in the queue: its place when it changes, then its turn."""
        if not self._queue:
            return
        team = self._queue[0]
        last = None
        while self._spawn_began is not None:
            pod = self.pod_reflector.pods.get(self._pod_key()) if self.pod_reflector else None
            if pod is not None and not wait_messages.gated(pod):
                yield {"message": wait_messages.admitted_message(team), "gpuhub": {"queued": False}}
                return
            if pod is not None:
                place = await self.queue_place(pod["metadata"]["name"])
                self._never = place.never if place else None  # check_deadlines ends the spawn with it
                message = wait_messages.queue_message(team, place, self._queue_context())
                if message != last:
                    last = message
                    yield {"message": message, "gpuhub": {"queued": True}}
            await asyncio.sleep(self.queue_status_interval)

    def _pod_key(self) -> str:
        return f"{self.namespace}/{self.pod_name}"

    def _queue_context(self) -> QueueContext:
        """The team, pool and GPU unit of this server's queue, for the waiting headline's reason."""
        profile = getattr(self, "gpu_profile", None)
        return context_for(self.profiles, self._queue[1].namespace, profile.slug if profile else None)

    # ------------------------------------------------------------------ the last failure, kept
    @property
    def gpuhub_last_failure(self) -> dict[str, str] | None:
        """The last failed start's reason (home page and picker), until the next start."""
        return self._last_failure

    def get_state(self):
        state = super().get_state()
        if self._last_failure:
            state["gpuhub_last_failure"] = self._last_failure
        return state

    def load_state(self, state):
        super().load_state(state)
        self._last_failure = wait_messages.valid_record((state or {}).get("gpuhub_last_failure"))
