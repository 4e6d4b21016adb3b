"""A queued server's pod kept across a hub restart (hub/queued_pod.py, QueuedSpawnMixin's create): the next
start of the same request keeps the gated pod and its place, any other pod is KubeSpawner's to replace.
GPUSpawner's real manifest path (render_pod), the create against a stand-in for the pod API."""
from __future__ import annotations

import asyncio
import copy

import pytest
from kubernetes_asyncio.client import ApiException

from gpu_spawner.contract import KUEUE_ADMISSION_GATE, REQUEST_DIGEST_ANNOTATION
from gpu_spawner.hub import queued_pod
from gpu_spawner.hub.render_pod import make_spawner, pod_manifest
from gpu_spawner.model.profiles_file import EXAMPLE_PROFILES

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


async def _create(held_token: str | None, same: bool) -> tuple:
    """A queued start's create with a pod left from before a restart (held_token: none left)."""
    spawner = make_spawner(EXAMPLE_PROFILES, "alice", ALICE, api_token="new-token")
    spawner.user_options = {"profile": "t4-shared"}
    await spawner.load_user_options()
    spawner._queue = spawner._queue_for(spawner.user_options)
    assert spawner._queue is not None  # t4-shared queues in data-science's queue
    pod = await spawner.get_pod_manifest()
    held = None
    if held_token:
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
    done = await spawner._make_create_pod_request(pod, 10)
    return done, spawner.api_token, api.created, stopped, pod


@pytest.mark.parametrize("held_token, same, kept", [("old-token", True, True), ("old-token", False, False),
                                                    (None, True, False)])
def test_a_start_keeps_its_queued_pod_and_token_or_creates_as_kubespawner_does(held_token, same, kept):
    done, token, created, stopped, pod = asyncio.run(_create(held_token, same))
    assert pod.metadata.annotations[REQUEST_DIGEST_ANNOTATION]  # every queued server pod carries it
    if kept:
        assert done is True and token == "old-token" and created == [] and stopped == []
    elif held_token:  # another request's pod: KubeSpawner's 409 path stops it and tries again
        assert done is False and token == "new-token" and len(created) == 1 and stopped == [True]
    else:
        assert done is True and token == "new-token" and len(created) == 1
