"""A queued server's pod kept across a hub restart (hub/queued_pod.py, QueuedSpawnMixin's create): the next
start of the same request keeps the gated pod and its place, any other pod is KubeSpawner's to replace.
GPUSpawner's real manifest path (render_pod), the create against a stand-in for the pod API, the token checked
in a real JupyterHub database (jupyterhub.orm, SQLite in memory): a kept pod's token must be a live one of
this user, else the pod is replaced (a planted pod, a revoked token)."""
from __future__ import annotations

import asyncio
import copy
import logging
from datetime import datetime, timedelta, timezone

import pytest
from jupyterhub import orm
from kubernetes_asyncio.client import ApiException

from jupyterhub_gpu.contract import KUEUE_ADMISSION_GATE, REQUEST_DIGEST_ANNOTATION
from jupyterhub_gpu.hub import queued_pod
from jupyterhub_gpu.hub.render_pod import make_spawner, pod_manifest
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES

ALICE = ["data-science"]


def gated(pod: dict, digest: str) -> dict:
    """The pod as the API server holds it after Kueue's webhook: gated, labelled, our digest kept."""
    pod = copy.deepcopy(pod)
    pod["metadata"].setdefault("annotations", {})[REQUEST_DIGEST_ANNOTATION] = digest
    pod["metadata"]["labels"]["kueue.x-k8s.io/managed"] = "true"
    pod["spec"]["schedulingGates"] = [{"name": KUEUE_ADMISSION_GATE}]
    return pod


def test_the_same_request_has_the_same_digest_whatever_its_token():
    first = asyncio.run(pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ALICE, api_token="token-one"))
    again = asyncio.run(pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ALICE, api_token="token-two"))
    assert queued_pod.token_of(first) == "token-one" and queued_pod.token_of(again) == "token-two"
    assert queued_pod.digest(first) == queued_pod.digest(again)
    other = asyncio.run(pod_manifest(EXAMPLE_PROFILES, "a100-mig-1g10gb", "alice", ALICE, api_token="token-two"))
    assert queued_pod.digest(other) != queued_pod.digest(first)


def test_only_a_gated_pod_of_the_same_request_is_kept():
    pod = asyncio.run(pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ALICE, api_token="old-token"))
    want = queued_pod.digest(pod)
    assert queued_pod.kept_token(gated(pod, want), want) == "old-token"
    assert queued_pod.kept_token(gated(pod, "another-request"), want) is None
    admitted = gated(pod, want)
    admitted["spec"]["schedulingGates"] = []
    assert queued_pod.kept_token(admitted, want) is None  # admitted: it may have run; KubeSpawner replaces it
    deleting = gated(pod, want)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    assert queued_pod.kept_token(deleting, want) is None
    assert queued_pod.kept_token(None, want) is None
    unstamped = gated(pod, want)
    del unstamped["metadata"]["annotations"][REQUEST_DIGEST_ANNOTATION]
    assert queued_pod.kept_token(unstamped, want) is None  # a pod of an older version: replaced as before


class PodApi:
    """read_namespaced_pod / create_namespaced_pod of an API server holding at most one pod."""

    def __init__(self, api_client, held: dict | None):
        self.api_client, self.held, self.created = api_client, held, []

    async def read_namespaced_pod(self, name, namespace, **_):
        if self.held is None:
            raise ApiException(status=404, reason="Not Found")
        return self.api_client._ApiClient__deserialize(self.held, "V1Pod")

    async def create_namespaced_pod(self, namespace, pod):
        self.created.append(pod)
        if self.held is not None:
            raise ApiException(status=409, reason="Conflict")


def hub_db():
    """A JupyterHub database with alice and bob (the global OAuth client API tokens are issued under)."""
    db = orm.new_session_factory("sqlite:///:memory:")()
    db.add(orm.OAuthClient(identifier="jupyterhub"))
    users = {name: orm.User(name=name) for name in ("alice", "bob")}
    db.add_all(users.values())
    db.commit()
    return db, users


def held_token_of(db, users, whose: str) -> str:
    """The token a pod left from before the restart carries: alice's live one, bob's, or alice's revoked or
    expired one."""
    token = orm.APIToken.new(user=users["bob" if whose == "bob" else "alice"], note="server at /user/alice/")
    if whose == "revoked":
        db.delete(orm.APIToken.find(db, token))
        db.commit()
    elif whose == "expired":
        orm.APIToken.find(db, token).expires_at = orm.APIToken.now() - timedelta(minutes=1)
        db.commit()
    return token


async def _create(whose: str | None, same: bool) -> tuple:
    """A queued start's create with a pod left from before a restart (whose: whose token it carries; None:
    no pod left)."""
    db, users = hub_db()
    spawner = make_spawner(EXAMPLE_PROFILES, "alice", ALICE, api_token="new-token")
    spawner.user.db, spawner.user.orm_user, spawner.user.id = db, users["alice"], users["alice"].id
    spawner.user_options = {"profile": "t4-shared"}
    await spawner.load_user_options()
    spawner._queue = spawner._queue_for(spawner.user_options)
    assert spawner._queue is not None  # t4-shared queues in data-science's queue
    pod = await spawner.get_pod_manifest()
    held, held_token = None, None
    if whose:
        held_token = held_token_of(db, users, whose)
        old = spawner.api.api_client.sanitize_for_serialization(pod)
        for e in old["spec"]["containers"][0]["env"]:
            if e["name"] in queued_pod.TOKEN_ENV:
                e["value"] = held_token
        held = gated(old, queued_pod.digest(old) if same else "an-older-request")
    api = spawner.api = PodApi(spawner.api.api_client, held)
    stopped = []

    async def stop(now=False):
        stopped.append(now)

    spawner.stop = stop
    warnings = Warnings()
    spawner.log.addHandler(warnings)
    try:
        done = await spawner._make_create_pod_request(pod, 10)
    finally:
        spawner.log.removeHandler(warnings)
    return done, spawner.api_token, held_token, api.created, stopped, pod, warnings.messages


class Warnings(logging.Handler):
    """The spawner's warnings (its traitlets logger does not reach pytest's caplog)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("whose, same, kept", [("alice", True, True), ("alice", False, False), (None, True, False),
                                               ("bob", True, False), ("revoked", True, False),
                                               ("expired", True, False)])
def test_a_start_keeps_its_queued_pod_and_token_or_creates_as_kubespawner_does(whose, same, kept):
    done, token, held_token, created, stopped, pod, warnings = asyncio.run(_create(whose, same))
    assert pod.metadata.annotations[REQUEST_DIGEST_ANNOTATION]  # every queued server pod carries it
    if kept:
        assert done is True and token == held_token and created == [] and stopped == []
    elif whose:  # another request's pod, or a token not alice's live one: KubeSpawner's 409 path replaces it
        assert done is False and token == "new-token" and len(created) == 1 and stopped == [True]
        if same:  # the digest matched: the warning says why the pod was not kept
            assert any("is not kept" in w for w in warnings), warnings
    else:
        assert done is True and token == "new-token" and len(created) == 1


def test_a_token_is_refused_unless_it_is_a_live_one_of_this_user():
    db, users = hub_db()
    alice, bob = users["alice"], users["bob"]
    live = held_token_of(db, users, "alice")
    assert queued_pod.token_refusal(db, alice, live) is None
    assert "someone else" in queued_pod.token_refusal(db, bob, live)
    assert "not in the hub database" in queued_pod.token_refusal(db, alice, held_token_of(db, users, "revoked"))
    assert "not in the hub database" in queued_pod.token_refusal(db, alice, "planted-" + "x" * 32)
    assert queued_pod.token_refusal(None, None, live)  # no database at hand: not kept


# ---------------------------------------------------------------------- the hub's check after its restart
class Reflector:
    """KubeSpawner's pod reflector as get_url reads it: `pods` by key, one step of the pod's life per look."""

    def __init__(self, key: str, steps: list[dict | None]):
        self.key, self.steps, self.looks = key, steps, 0

    @property
    def pods(self) -> dict:
        pod = self.steps[min(self.looks, len(self.steps) - 1)]
        self.looks += 1
        return {self.key: pod} if pod is not None else {}


def _pod(state: str, created: str = "2099-01-01T00:00:00Z") -> dict:
    pod = {"metadata": {"name": "jupyter-alice", "namespace": "jhub", "creationTimestamp": created},
           "spec": {"containers": [{"name": "notebook", "ports": [{"name": "notebook-port", "containerPort": 8888}]}]},
           "status": {"phase": "Pending", "podIP": None, "containerStatuses": None}}
    if state == "gated":
        pod["spec"]["schedulingGates"] = [{"name": KUEUE_ADMISSION_GATE}]
    elif state == "running":
        pod["spec"]["nodeName"] = "aks-gput4-vmss000000"
        pod["status"] = {"phase": "Running", "podIP": "10.244.1.7", "containerStatuses": [
            {"name": "notebook", "ready": True, "state": {"running": {}}}]}
    return pod


SPAWN_BEGAN = datetime(2026, 12, 5, 6, 0)  # the queued spawn's start, hours before the hub's restart


async def _url_after_restart(steps: list[dict | None], monkeypatch, **traits) -> tuple[str, int, datetime]:
    """(the URL get_url answers, the looks it took, the server's last_activity afterwards)."""
    from jupyterhub_gpu.hub import queued_spawn

    monkeypatch.setattr(queued_spawn, "RESUME_POLL_S", 0.001)
    spawner = make_spawner(EXAMPLE_PROFILES, "alice", ALICE, **traits)
    db, users = hub_db()
    stored = orm.Server(proto="http", ip="vm", port=41405, base_url="/user/alice/")  # the spawn's start stored it
    record = orm.Spawner(user=users["alice"], name="", last_activity=SPAWN_BEGAN, server=stored)
    db.add(record)
    db.commit()  # the database's defaults filled in, as a hub's restart reads them
    spawner.db, spawner.orm_spawner = db, record
    reflector = Reflector(f"jhub/{spawner.pod_name}", steps)

    async def watching(replace=False):
        return reflector

    spawner._start_watching_pods = watching
    monkeypatch.setattr(type(spawner), "pod_reflector", property(lambda self: reflector))
    try:
        return await spawner.get_url(), reflector.looks, spawner.orm_spawner.last_activity
    finally:
        await spawner.api.api_client.close()


def test_a_queued_server_found_at_the_hubs_start_is_waited_for_and_resumed_at_its_pods_address(monkeypatch):
    """A hub killed while alice's server was queued: its check waits for the pod's turn and answers the pod's
    own URL, not the placeholder the spawn's start stored (which JupyterHub would wait for, then delete the
    pod and its place in the queue)."""
    url, looks, active = asyncio.run(_url_after_restart([_pod("gated")] * 5 + [_pod("admitted"), _pod("running")],
                                                        monkeypatch, namespace="jhub"))
    assert url == "http://10.244.1.7:8888" and looks == 7
    # its idle clock starts now, not at the spawn's start hours ago (the culler would stop it at once)
    assert active > datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(minutes=1)


@pytest.mark.parametrize("steps", [[None], [_pod("gated", created="2000-01-01T00:00:00Z")],
                                   [{**_pod("gated"), "metadata": {**_pod("gated")["metadata"],
                                                                    "deletionTimestamp": "2026-12-01T12:00:00Z"}}]])
def test_a_pod_gone_or_queued_past_its_limit_gets_the_stored_url_and_is_stopped_as_before(steps, monkeypatch):
    url, looks, active = asyncio.run(_url_after_restart(steps, monkeypatch, namespace="jhub"))
    assert url == "http://vm:41405/user/alice/" and looks == 1 and active == SPAWN_BEGAN
