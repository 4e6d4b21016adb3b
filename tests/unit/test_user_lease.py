"""The per-user submit lock across gpu-jobs replicas (jupyterhub_gpu/kubeio/lease.py): the pure parts (names,
bodies, the expiry decision) with hypothesis over adversarial user names, and Leases against an in-memory
coordination API that does what the API server does (create 409 when present, replace/delete 409 on a stale
resourceVersion), so two "replicas" racing for one user's lock never hold it together."""
from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes_asyncio import client

from jupyterhub_gpu.builders.workloads import render_gpu_jobs
from jupyterhub_gpu.contract import USER_ANNOTATION
from jupyterhub_gpu.kubeio import lease as L

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
T0 = datetime(2026, 12, 3, 7, 0, tzinfo=timezone.utc)
names = st.one_of(st.text(max_size=300), st.text(alphabet="/\\.%:@ \x00\ud800é名🙂", max_size=40),
                  st.text(min_size=5000, max_size=6000))


@given(user=names)
@settings(max_examples=300)
def test_lease_name_is_a_valid_object_name_for_any_user(user):
    name = L.lease_name(user)
    assert name == L.lease_name(user) and name.startswith(L.SUBMIT_PREFIX)
    assert len(name) == len(L.SUBMIT_PREFIX) + 16 <= 63 and DNS_SUBDOMAIN.match(name)


@given(a=names, b=names)
def test_distinct_users_get_distinct_locks(a, b):
    assert (L.lease_name(a) == L.lease_name(b)) == (a == b)


@given(user=names, holder=st.text(min_size=1, max_size=80), duration=st.integers(1, 3600))
def test_lease_body_is_sendable_and_names_the_user(user, holder, duration):
    body = L.lease_body(L.lease_name(user), holder, duration, T0, user)
    json.dumps(body, ensure_ascii=False).encode("utf-8")  # a lone surrogate would fail here
    note = body["metadata"]["annotations"][USER_ANNOTATION]
    assert len(note) <= L.ANNOTATION_MAX and (note == user or len(user) > L.ANNOTATION_MAX or "\ufffd" in note
                                              or any("\ud800" <= c <= "\udfff" for c in user))
    spec = body["spec"]
    assert spec["holderIdentity"] == holder and spec["leaseDurationSeconds"] == duration
    assert L.parse_time(spec["renewTime"]) == T0 == L.parse_time(spec["acquireTime"])
    assert "resourceVersion" not in body["metadata"]


@given(age=st.floats(-100, 100), duration=st.integers(1, 60))
def test_a_lease_of_another_holder_is_free_only_once_expired(age, duration):
    held = L.lease_body("x", "other", duration, T0)
    now, expired = T0 + timedelta(seconds=age), timedelta(seconds=age) > timedelta(seconds=duration)
    assert L.is_free(held, now) == expired
    assert L.is_free(L.lease_body("x", "me", duration, T0), now) == expired  # its own too: another task holds it


@pytest.mark.parametrize("spec", [{}, {"holderIdentity": ""}, {"holderIdentity": None},
                                  {"holderIdentity": "other", "leaseDurationSeconds": 15},  # no time
                                  {"holderIdentity": "other", "renewTime": "garbage", "leaseDurationSeconds": 15},
                                  {"holderIdentity": "other", "renewTime": L.micro_time(T0)}])  # no duration
def test_a_lease_without_a_live_holder_is_free(spec):
    assert L.is_free({"spec": spec}, T0)


def test_micro_time_round_trips():
    t = T0 + timedelta(microseconds=123456)
    assert L.micro_time(t) == "2026-12-03T07:00:00.123456Z" and L.parse_time(L.micro_time(t)) == t


def test_gpu_jobs_runs_two_replicas_that_know_their_pod_and_namespace():
    (dep,) = [o for o in render_gpu_jobs("jhub") if o["kind"] == "Deployment"]
    assert dep["spec"]["replicas"] == 2
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_NAME"] == "metadata.name" and env["POD_NAMESPACE"] == "metadata.namespace"


def test_own_namespace(monkeypatch):
    monkeypatch.setenv("POD_NAMESPACE", "jhub")
    assert L.own_namespace() == "jhub"
    monkeypatch.delenv("POD_NAMESPACE")  # a hub-managed service (its environment is clean): no Leases
    assert L.own_namespace() is None


# ------------------------------------------------------------------------------ against a fake API server
class Resp:
    def __init__(self, status: int, obj: dict | None = None):
        self.status, self.reason = status, {200: "OK", 201: "Created", 403: "Forbidden", 404: "Not Found",
                                                   409: "Conflict"}[status]
        self.body = json.dumps(obj or {"message": self.reason}).encode()

    async def read(self):
        return self.body

    def release(self):
        pass


class FakeCoordination:
    """Leases of one namespace with the API server's optimistic concurrency."""

    def __init__(self):
        self.store: dict[str, dict] = {}
        self.version = 0
        self.writes = 0

    def _put(self, name: str, body: dict) -> Resp:
        self.version += 1
        self.writes += 1
        body = json.loads(json.dumps(body))
        body["metadata"]["resourceVersion"] = str(self.version)
        self.store[name] = body
        return Resp(200, body)

    async def create_namespaced_lease(self, ns, body, **_):
        await asyncio.sleep(0)
        name = body["metadata"]["name"]
        return Resp(409) if name in self.store else self._put(name, body)

    async def read_namespaced_lease(self, name, ns, **_):
        await asyncio.sleep(0)
        return Resp(200, self.store[name]) if name in self.store else Resp(404)

    async def replace_namespaced_lease(self, name, ns, body, **_):
        await asyncio.sleep(0)
        if name not in self.store:
            return Resp(404)
        if body["metadata"].get("resourceVersion") != self.store[name]["metadata"]["resourceVersion"]:
            return Resp(409)
        return self._put(name, body)

    async def delete_namespaced_lease(self, name, ns, body: client.V1DeleteOptions, **_):
        await asyncio.sleep(0)
        if name not in self.store:
            return Resp(404)
        if body.preconditions.resource_version != self.store[name]["metadata"]["resourceVersion"]:
            return Resp(409)
        del self.store[name]
        return Resp(200)


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


def replica(api: FakeCoordination, holder: str, clock=None, wait: float = 5.0, duration: int = 15) -> L.Leases:
    leases = L.Leases(object(), "jhub", holder, duration=duration, wait=wait, clock=clock or Clock())
    leases.coord = api
    return leases


async def test_two_replicas_never_hold_one_users_lock_together():
    api = FakeCoordination()
    a, b = replica(api, "a"), replica(api, "b")
    inside, most, done = 0, 0, []

    async def submit(leases, i):
        nonlocal inside, most
        async with leases.hold(L.lease_name("rita/ü"), "rita/ü"):
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.001)
            inside -= 1
            done.append(i)

    await asyncio.gather(*(submit(a if i % 2 else b, i) for i in range(16)))
    assert most == 1 and sorted(done) == list(range(16))
    assert api.store == {}  # every lock released


async def test_other_users_do_not_wait():
    api = FakeCoordination()
    a, b = replica(api, "a"), replica(api, "b", wait=0.05)
    async with a.hold(L.lease_name("rita")):
        async with b.hold(L.lease_name("sam")):
            assert len(api.store) == 2


async def test_a_lock_held_elsewhere_is_busy_after_the_wait():
    api = FakeCoordination()
    a, b = replica(api, "a"), replica(api, "b", wait=0.2)
    async with a.hold(L.lease_name("rita"), "rita"):
        with pytest.raises(L.LeaseBusy):
            async with b.hold(L.lease_name("rita"), "rita"):
                pytest.fail("held twice")
    async with b.hold(L.lease_name("rita"), "rita"):  # free again after the release
        pass


async def test_a_killed_holders_lock_expires_by_itself():
    api, clock = FakeCoordination(), Clock()
    dead = replica(api, "dead", clock)
    assert await dead.try_take(L.lease_name("rita"), "rita") is not None  # ... and never released
    b = replica(api, "b", clock, wait=0.1)
    with pytest.raises(L.LeaseBusy):
        async with b.hold(L.lease_name("rita")):
            pass
    clock.now = T0 + timedelta(seconds=16)
    async with b.hold(L.lease_name("rita"), "rita") as lease:
        assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
        assert lease["metadata"]["annotations"][USER_ANNOTATION] == "rita"
    assert api.store == {}


async def test_a_lock_held_long_is_renewed_and_a_stale_release_deletes_nothing():
    api, clock = FakeCoordination(), Clock()
    a = replica(api, "a", clock, duration=1)  # renewed every 1/3 s
    async with a.hold(L.lease_name("rita")) as first:
        await asyncio.sleep(0.5)
        clock.now = T0 + timedelta(seconds=0.9)
        await asyncio.sleep(0.4)
        (now,) = api.store.values()
        assert int(now["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
        await a.release(first)  # an old resourceVersion: the precondition fails, nothing deleted
        assert api.store
    assert api.store == {}


async def test_only_one_replica_leads_and_the_lead_moves_when_the_leader_stops():
    api, clock = FakeCoordination(), Clock()
    a, b = replica(api, "a", clock, duration=1), replica(api, "b", clock, duration=1)
    running = []

    def runner(who):
        async def run():
            running.append(who)
            await asyncio.Event().wait()
        return run

    ta = asyncio.create_task(a.lead("notify", runner("a")))
    await asyncio.sleep(0.05)
    tb = asyncio.create_task(b.lead("notify", runner("b")))
    await asyncio.sleep(0.8)
    assert running == ["a"]
    ta.cancel()  # stops: releases its Lease
    await asyncio.gather(ta, return_exceptions=True)
    await asyncio.sleep(0.8)
    assert running == ["a", "b"]
    tb.cancel()
    await asyncio.gather(tb, return_exceptions=True)


# ------------------------------------------------------------------------------ gpu-jobs' SubmitGate
async def test_the_gate_takes_the_process_lock_then_the_lease_and_answers_busy_or_unavailable():
    from jupyterhub_gpu.services.jobs.app import Busy, SubmitGate
    from jupyterhub_gpu.services.jobs.cache import ClusterUnavailable

    api = FakeCoordination()
    mine, other = SubmitGate(leases=replica(api, "mine", wait=0.1)), replica(api, "other")
    async with mine.held("rita/ü"):
        (held,) = api.store.values()
        assert held["spec"]["holderIdentity"] == "mine" and held["metadata"]["name"] == L.lease_name("rita/ü")
    assert api.store == {}
    async with other.hold(L.lease_name("rita/ü"), "rita/ü"):
        with pytest.raises(Busy) as e:
            async with mine.held("rita/ü"):
                pytest.fail("held twice")
        assert e.value.status_code == 503 and "busy, try again" in e.value.log_message

    async def forbidden(*a, **k):  # RBAC without the Lease rights
        return Resp(403)

    api.create_namespaced_lease = forbidden
    with pytest.raises(ClusterUnavailable, match="the per-user lock: HTTP 403"):
        async with mine.held("sam"):
            pass
    async with SubmitGate().held("sam"):  # without leases: the process lock only
        pass


async def test_the_leaders_loop_is_started_again_if_it_ends():
    api = FakeCoordination()
    a = replica(api, "a", duration=1)
    runs = []

    async def run():
        runs.append(1)
        raise RuntimeError("one bad cycle")

    task = asyncio.create_task(a.lead("notify", run))
    await asyncio.sleep(1.1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(runs) >= 2 and api.store == {}  # released when stopped


# ------------------------------------------------------------------------------ a hung or lost Lease (M2, M3)
async def hang(*a, **k):
    await asyncio.Event().wait()


async def test_every_lease_call_is_bounded_to_a_third_of_the_duration():
    api, seen = FakeCoordination(), []
    create = api.create_namespaced_lease

    async def recording(*a, **k):
        seen.append(k.get("_request_timeout"))
        return await create(*a, **k)

    api.create_namespaced_lease = recording
    a = replica(api, "a", duration=1)
    lease = await a.try_take("x")
    assert seen == [pytest.approx(1 / 3)]
    api.replace_namespaced_lease = hang  # a renew the API server never answers
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(asyncio.TimeoutError):
        await a.renew(lease)
    assert loop.time() - started < 0.5


async def test_a_hung_renew_loses_the_lock_and_the_gate_answers_busy_instead_of_creating():
    from jupyterhub_gpu.services.jobs.app import Busy, SubmitGate

    api = FakeCoordination()
    gate = SubmitGate(leases=replica(api, "mine", duration=1))
    async with gate.held("rita") as still_ours:
        still_ours()  # just taken: ours
        api.replace_namespaced_lease = hang
        await asyncio.sleep(0.4)
        await asyncio.sleep(0.4)  # the renew at 1/3 s timed out by 2/3 s
        with pytest.raises(Busy) as e:
            still_ours()
        assert e.value.status_code == 503 and "busy, try again" in e.value.log_message
    async with SubmitGate().held("rita") as still_ours:  # without leases: nothing to lose
        still_ours()


async def test_a_lock_taken_over_or_not_renewed_in_time_is_lost():
    api, clock = FakeCoordination(), Clock()
    a = replica(api, "a", clock, duration=1)
    async with a.hold("x") as held:
        assert not held.lost
        (lease,) = api.store.values()
        api._put("x", {**lease, "spec": {**lease["spec"], "holderIdentity": "b"}})  # another writer
        await asyncio.sleep(0.45)
        assert held.lost and held.failed
    held = L.Held({}, 15, 0.0)
    assert held.lost and not held.failed  # no renew succeeded for 2/3 of the duration


async def test_a_leader_whose_renew_hangs_stops_at_once():
    api = FakeCoordination()
    a = replica(api, "a", duration=1)
    state = []

    async def run():
        state.append("running")
        try:
            await asyncio.Event().wait()
        finally:
            state.append("stopped")

    task = asyncio.create_task(a.lead("notify", run))
    await asyncio.sleep(0.1)
    assert state == ["running"]
    api.replace_namespaced_lease = hang
    await asyncio.sleep(0.75)  # renew at 1/3 s, timed out by 2/3 s: stopped before the Lease could expire (1 s)
    assert state == ["running", "stopped"]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


# ------------------------------------------------------------------------------ notifications: one replica (M4)
def test_gpu_jobs_runs_one_replica_when_notifications_are_configured():
    def replicas(options):
        (dep,) = [o for o in render_gpu_jobs("jhub", options=options) if o["kind"] == "Deployment"]
        return dep["spec"]["replicas"]

    assert replicas(None) == replicas({"max-timeout": "3d"}) == 2
    assert replicas({"Notifications.smtp_host": "mail.example.org"}) == 1
    assert replicas({"Notifications.webhooks": '{"team": "slack:https://x"}', "max-timeout": "3d"}) == 1


def test_gpu_jobs_warns_when_several_replicas_may_keep_notification_preferences():
    assert "kept per pod: run one replica" in L.replicas_warning(True, True)
    assert L.replicas_warning(True, False) is None and L.replicas_warning(False, True) is None
