"""Locks across processes through the API server: `coordination.k8s.io/v1` Leases (kubernetes_asyncio).

- `Leases.hold(name, user)`: a short lock (gpu-jobs' per-user submit lock, so two replicas cannot both pass a
  per-user limit): taken by create, or by a compare-and-swap replace (metadata.resourceVersion) of a Lease
  that is free (no holder) or expired (renewTime + leaseDurationSeconds passed); renewed while held; released
  by a delete with a resourceVersion precondition. A process killed while holding one leaves a Lease that
  expires by itself after `duration` seconds. Not taken within `wait` seconds: `LeaseBusy`.
- `Leases.lead(name, run)`: leader election for a loop only one process may run (the notification watch).

The pure parts (names, bodies, the expiry decision) are functions; every decision of who holds what is the
API server's (a create or a replace at a resourceVersion succeeds for one writer only).
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import random
import secrets
import time
from datetime import datetime, timedelta, timezone
from typing import Any, AsyncIterator, Awaitable, Callable

from kubernetes_asyncio import client

from jupyterhub_gpu.contract import MANAGED_BY, USER_ANNOTATION
from jupyterhub_gpu.kubeio.informer import read_json

log = logging.getLogger("gpuhub.lease")

SUBMIT_PREFIX = "gpuhub-submit-"
#: Annotation values are free text but count against the object's 256 KiB: the user's name, cut this long.
ANNOTATION_MAX = 1024


class LeaseBusy(Exception):
    """The lock was not obtained in time (another holder); the caller answers 503 'busy, try again'."""


class Held(dict):
    """A lock held (`Leases.hold`): the Lease as taken, and `lost`: true once a renew failed, timed out or
    found it taken over, or no renew succeeded for two thirds of its duration (another may soon take it),
    so the holder must stop before acting on what the lock protects."""

    def __init__(self, lease: dict, duration: float, since: float):
        super().__init__(lease)
        self.duration, self.last_ok, self.failed = duration, since, False

    @property
    def lost(self) -> bool:
        return self.failed or time.monotonic() - self.last_ok > self.duration * 2 / 3


def replicas_warning(lease_mode: bool, notifying: bool) -> str | None:
    """gpu-jobs' warning at start: several replicas possible (Leases) with notification channels on, whose
    preferences and outbox are one SQLite file per pod (an opt-out saved through one is unknown to the leader)."""
    if lease_mode and notifying:
        return ("notification preferences are kept per pod: run one replica until they are shared "
                "(kubectl scale deployment gpu-jobs --replicas=1)")
    return None


def lease_name(user: str, prefix: str = SUBMIT_PREFIX) -> str:
    """A valid object name for any user name (unicode, '/', any length): the prefix and 16 hex digits of the
    name's SHA-256 (a lone surrogate is encoded as itself, so distinct names stay distinct)."""
    return prefix + hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def micro_time(t: datetime) -> str:
    """A Lease's MicroTime: RFC 3339, microseconds, UTC."""
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(s: str | None) -> datetime | None:
    if not s:
        return None
    try:
        t = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def lease_body(name: str, holder: str, duration: int, now: datetime, user: str | None = None,
               resource_version: str | None = None, transitions: int = 0,
               acquired: datetime | None = None) -> dict[str, Any]:
    """The Lease `holder` writes to take (or renew: `acquired` kept) the lock `name`; `resource_version`: the
    one read, so the replace succeeds only if nobody wrote in between."""
    meta: dict[str, Any] = {"name": name, "labels": dict(MANAGED_BY)}
    if user is not None:
        meta["annotations"] = {USER_ANNOTATION: user.encode("utf-8", "replace").decode("utf-8")[:ANNOTATION_MAX]}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": int(duration),
                     "acquireTime": micro_time(acquired or now), "renewTime": micro_time(now),
                     "leaseTransitions": int(transitions)}}


def is_free(lease: dict, now: datetime) -> bool:
    """May this Lease be taken: no holder, or expired (renewTime, else acquireTime, + leaseDurationSeconds
    before `now`; no time or no duration: expired). Held by this process is not free: another of its tasks
    holds it (a release that failed costs one lease duration). `now` is this process's clock and renewTime
    the writer's: replicas' clocks skewed by more than a lease's last third (5 s of 15) could take a lock early
    (known, L4; NTP-synced nodes are well within it)."""
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity"):
        return True
    since = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    if since is None or not isinstance(duration, int) or duration <= 0:
        return True
    return since + timedelta(seconds=duration) < now


def holder_identity() -> str:
    """This process: its pod's name ($POD_NAME, else $HOSTNAME) and a random part (a restarted pod of the same
    name is another holder)."""
    return f"{os.environ.get('POD_NAME') or os.environ.get('HOSTNAME') or 'gpu-jobs'}-{secrets.token_hex(4)}"


def own_namespace() -> str | None:
    """The namespace of this process's pod, as its Deployment passes it ($POD_NAMESPACE, the downward API);
    None elsewhere (a hub-managed service gets a clean environment: one process, its locks in memory)."""
    return os.environ.get("POD_NAMESPACE") or None


class Leases:
    """Leases in one namespace, written as `holder`."""

    def __init__(self, api: client.ApiClient, namespace: str, holder: str | None = None, duration: int = 15,
                 wait: float = 5.0, clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
        self.coord = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.holder = holder or holder_identity()
        self.duration = duration
        self.wait = wait
        self.clock = clock

    @property
    def timeout(self) -> float:
        """The longest one Lease call may take: a third of the duration (a hung renew must fail well before
        the Lease expires)."""
        return self.duration / 3

    async def _call(self, call: Callable[..., Awaitable[Any]], *args, **kwargs) -> dict:
        """One API call, bounded to `timeout` (the client's own and asyncio's: asyncio.TimeoutError)."""
        async def go():
            return await read_json(await call(*args, _request_timeout=self.timeout, _preload_content=False,
                                              **kwargs))
        return await asyncio.wait_for(go(), self.timeout)

    async def try_take(self, name: str, user: str | None = None) -> dict | None:
        """One attempt: the Lease now ours (its body as the API server answered), or None (held by another,
        or another writer won the race)."""
        now = self.clock()
        try:
            return await self._call(self.coord.create_namespaced_lease, self.namespace,
                                    lease_body(name, self.holder, self.duration, now, user))
        except client.ApiException as e:
            if e.status != 409:
                raise
        try:
            found = await self._call(self.coord.read_namespaced_lease, name, self.namespace)
        except client.ApiException as e:
            if e.status == 404:  # released in between: the next attempt creates it
                return None
            raise
        if not is_free(found, now):
            return None
        spec, rv = found.get("spec") or {}, found["metadata"].get("resourceVersion")
        mine = spec.get("holderIdentity") == self.holder
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        try:
            return await self._call(self.coord.replace_namespaced_lease, name, self.namespace,
                                    lease_body(name, self.holder, self.duration, now, user, rv, transitions))
        except client.ApiException as e:
            if e.status in (404, 409):  # gone, or another writer was first
                return None
            raise

    async def renew(self, lease: dict) -> dict | None:
        """Our Lease with a new renewTime (a CAS on the resourceVersion we wrote); None: no longer ours."""
        meta, spec = lease["metadata"], lease.get("spec") or {}
        body = lease_body(meta["name"], self.holder, self.duration, self.clock(), None,
                          meta.get("resourceVersion"), int(spec.get("leaseTransitions") or 0),
                          parse_time(spec.get("acquireTime")))
        body["metadata"]["annotations"] = meta.get("annotations") or {}
        try:
            return await self._call(self.coord.replace_namespaced_lease, meta["name"], self.namespace, body)
        except client.ApiException as e:
            if e.status in (404, 409):
                return None
            raise

    async def release(self, lease: dict) -> None:
        """Delete our Lease, only if nobody wrote it since (a resourceVersion precondition)."""
        meta = lease["metadata"]
        opts = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(resource_version=meta.get("resourceVersion")))
        try:
            await self._call(self.coord.delete_namespaced_lease, meta["name"], self.namespace, body=opts)
        except client.ApiException as e:
            if e.status not in (404, 409):
                raise

    @contextlib.asynccontextmanager
    async def hold(self, name: str, user: str | None = None) -> AsyncIterator[Held]:
        """The lock `name` for the block: retried (jittered, up to `wait` seconds, else LeaseBusy), renewed
        every third of its duration while held, released after. The block checks `held.lost` before each
        step the lock protects: a failed, timed-out or taken-over renew (or none for 2/3 of the duration)."""
        deadline, pause = time.monotonic() + self.wait, 0.05
        while True:
            started = time.monotonic()  # the Lease's renewTime is no earlier than this
            if (lease := await self.try_take(name, user)) is not None:
                break
            if time.monotonic() + pause > deadline:
                raise LeaseBusy(f"lock {self.namespace}/{name} is held by another process")
            await asyncio.sleep(pause * random.uniform(0.5, 1.5))
            pause = min(pause * 2, 0.5)
        held = Held(lease, self.duration, started)
        current = {"lease": lease}

        async def renewing():
            while not held.lost:
                await asyncio.sleep(self.duration / 3)
                started = time.monotonic()
                try:
                    renewed = await self.renew(current["lease"])
                except Exception as e:  # a timeout too: counts as lost (the holder stops; it may expire)
                    log.warning("renewing lock %s failed: %r; the lock counts as lost", name, e)
                    held.failed = True
                    return
                if renewed is None:
                    log.error("lock %s was taken over while held (held past its %s s?)", name, self.duration)
                    held.failed = True
                    return
                current["lease"], held.last_ok = renewed, started

        renewer = asyncio.create_task(renewing())
        try:
            yield held
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            try:
                await self.release(current["lease"])
            except Exception as e:  # it expires by itself after `duration`
                log.warning("releasing lock %s failed (it expires in %s s): %r", name, self.duration, e)

    async def lead(self, name: str, run: Callable[[], Awaitable[Any]]) -> None:
        """Forever: while this process holds the leader Lease `name`, `run()` runs; it is cancelled as soon as
        a renew fails, times out (every call is bounded to a third of the duration) or finds the Lease taken,
        or none succeeded for two thirds of its duration (before another may take it); started again once a
        renew (or a new take) succeeds."""
        task: asyncio.Task | None = None
        lease: dict | None = None
        last_ok = 0.0
        try:
            while True:
                started, ok = time.monotonic(), False
                try:
                    lease = await (self.renew(lease) if lease is not None else self.try_take(name))
                    if lease is not None:
                        last_ok, ok = started, True
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # a timeout too: not leading until a renew succeeds (lease kept to retry)
                    log.warning("leader lease %s: %r", name, e)
                if lease is not None and time.monotonic() - last_ok > self.duration * 2 / 3:
                    lease = None
                if task is not None and task.done():  # ended (an error): started again while we lead
                    if not task.cancelled() and task.exception() is not None:
                        log.error("%s ended: %r", name, task.exception())
                    task = None
                if ok and task is None:
                    log.info("%s leads %s", self.holder, name)
                    task = asyncio.create_task(run())
                elif not ok and task is not None:
                    log.warning("%s lost the lead of %s", self.holder, name)
                    task.cancel()
                    task = None
                await asyncio.sleep(self.duration / 3)
        finally:
            if task is not None:
                task.cancel()
            if lease is not None:
                with contextlib.suppress(Exception):
                    await self.release(lease)
