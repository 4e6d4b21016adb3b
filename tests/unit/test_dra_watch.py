"""The hub's ResourceSlice and ResourceClaim watches (hub/informers.py) against a tiny scripted API server: only a
profiles file with a dra pool makes them; one list each, then watch events keep a dra profile's card current with
no request per render; an error answer makes only the dra profiles "unknown"."""
from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from aiohttp import web
from kubernetes_asyncio import client
from unit.scripted_api import scripted_api, until

from jupyterhub_gpu.hub.informers import CapacityInformers
from jupyterhub_gpu.kubeio.informer import WatchSettings
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from tests.unit.test_dra_capacity import CFG, FULL, claim, gpu, node, rslice

FAST = WatchSettings(request_timeout=1, watch_seconds=30, silent_after=5, backoff_base=0.05, backoff_max=0.1)
PATHS = {"nodes": "/api/v1/nodes", "pods": "/api/v1/pods",
         "resourceslices": "/apis/resource.k8s.io/v1/resourceslices",
         "resourceclaims": "/apis/resource.k8s.io/v1/resourceclaims"}


class FakeAPI:
    """List and watch of each kind from a script the test changes while the informers run."""

    def __init__(self):
        self.items = {"nodes": [node("a1", "dra-a100"), node("s1", "system")], "pods": [],
                      "resourceslices": [rslice("a1", [gpu(0), gpu(1)])], "resourceclaims": []}
        self.answer: dict[str, tuple[int, str]] = {}
        self.events = {kind: asyncio.Queue() for kind in PATHS}
        self.lists: Counter = Counter()

    def handler(self, kind: str):
        async def serve(request: web.Request) -> web.StreamResponse:
            if request.query.get("watch") in ("true", "True", "1"):
                resp = web.StreamResponse(headers={"Content-Type": "application/json"})
                await resp.prepare(request)
                while (line := await self.events[kind].get()) is not None:
                    await resp.write(json.dumps(line).encode() + b"\n")
                return resp
            self.lists[kind] += 1
            if kind in self.answer:
                status, body = self.answer[kind]
                return web.Response(status=status, text=body, content_type="application/json")
            return web.json_response({"metadata": {"resourceVersion": "5"}, "items": self.items[kind]})
        return serve


@pytest.fixture
async def api():
    fake = FakeAPI()
    async with scripted_api({path: fake.handler(kind) for kind, path in PATHS.items()}) as api_client:
        fake.core, fake.resource = client.CoreV1Api(api_client), client.ResourceV1Api(api_client)
        yield fake




async def test_a_dra_pool_is_watched_through_its_slices_and_claims(api):
    inf = CapacityInformers(CFG, api.core, FAST, resource=api.resource)
    try:
        assert await inf.start(timeout=5)
        assert not inf.devices_stale and api.lists["resourceslices"] == api.lists["resourceclaims"] == 1
        assert inf.state.profile_capacity(FULL).summary == "2 of 2 A100 80GB (DRA) GPUs free"
        requests = inf.requests
        for _ in range(100):  # a busy picker: every render from memory
            inf.state.profile_capacity(FULL)
        assert inf.requests == requests
        # a server's claim is allocated: one GPU fewer, from the watch alone
        api.events["resourceclaims"].put_nowait({"type": "ADDED", "object": claim("jupyter-ann-gpu-x",
                                                                                  [("a1", "gpu-1")])})
        await until(lambda: inf.state.profile_capacity(FULL).free_slots == 1, what="the claim's event")
        assert sum(api.lists.values()) == 4  # nodes, pods, slices, claims: one list each
    finally:
        await inf.stop()


async def test_an_error_answer_makes_only_the_dra_profiles_unknown(api):
    api.answer["resourceslices"] = (403, json.dumps({"kind": "Status", "code": 403,
                                                     "message": "resourceslices.resource.k8s.io is forbidden"}))
    inf = CapacityInformers(CFG, api.core, FAST, resource=api.resource)
    try:
        assert await inf.start(timeout=1)  # nodes and pods synced: the other pools' numbers stand
        assert inf.devices_stale and "HTTP 403" in inf.devices[0].error
        assert not inf.state.profile_capacity(FULL).known
        assert inf.state.profile_capacity(CFG.by_slug["cpu"]).known
    finally:
        await inf.stop()
    no_client = CapacityInformers(CFG, api.core, FAST)  # no resource.k8s.io client: unknown, never zero
    assert no_client.devices == [] and not no_client.state.profile_capacity(FULL).known


async def test_without_a_dra_pool_nothing_of_resource_k8s_io_is_asked_until_one_is_added(api):
    plain = load_profiles(EXAMPLE_PROFILES)
    inf = CapacityInformers(plain, api.core, FAST, resource=api.resource)
    try:
        assert await inf.start(timeout=5)
        assert inf.devices == [] and api.lists["resourceslices"] == api.lists["resourceclaims"] == 0
        inf.reconfigure(CFG)  # the profiles file gains dra pools: the watches start, a fresh state is filled
        await until(lambda: not inf.devices_stale and not inf.stale, what="the device lists")
        assert inf.state.profile_capacity(FULL).free_slots == 2
        inf.reconfigure(plain)  # and loses them: the watches end
        assert inf.devices == []
        await until(lambda: not inf.stale, what="the relists")
    finally:
        await inf.stop()
