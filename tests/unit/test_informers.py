"""Informers against a real (tiny, scripted) HTTP API server: errors never become data, requests time
out, silent watches are restarted, bookmarks keep a quiet watch alive, and `stale` tells the truth.
The shared pod informer feeds KubeSpawner's reflector view with KubeSpawner's own selection."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from aiohttp import web
from kubernetes_asyncio import client
from unit.scripted_api import scripted_api, until

from jupyterhub_gpu.hub import picker
from jupyterhub_gpu.hub.capacity import ClusterState
from jupyterhub_gpu.hub.informers import CapacityInformers
from jupyterhub_gpu.kubeio.clients import TimeoutApiClient
from jupyterhub_gpu.kubeio.informer import Informer, WatchSettings
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

FAST = WatchSettings(request_timeout=1, watch_seconds=30, silent_after=0.6, backoff_base=0.05, backoff_max=0.1)


def pod(name: str, ns: str = "jhub", rv: str = "1", labels: dict | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "labels": labels or {}},
            "spec": {"containers": []}, "status": {"phase": "Pending"}}


class FakeAPI:
    """Serves GET /api/v1/pods (list and watch) from a script the test changes while the informer runs."""

    def __init__(self):
        self.items: list[dict] = [pod("a"), pod("b")]
        self.rv = 10
        self.list_answer: tuple[int, str] | None = None   # (status, body) instead of the list
        self.list_delay = 0.0                              # seconds before answering a list
        self.watch_events: asyncio.Queue = asyncio.Queue()
        self.bookmark_every: float | None = None           # send a BOOKMARK this often (no other events)
        self.lists = self.watches = 0
        self.watch_params: list[dict] = []

    async def pods(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") in ("true", "True", "1"):
            return await self.watch(request)
        self.lists += 1
        await asyncio.sleep(self.list_delay)
        if self.list_answer:
            status, body = self.list_answer
            return web.Response(status=status, text=body, content_type="application/json")
        return web.json_response({"kind": "PodList", "metadata": {"resourceVersion": str(self.rv)},
                                  "items": self.items})

    async def watch(self, request: web.Request) -> web.StreamResponse:
        self.watches += 1
        self.watch_params.append(dict(request.query))
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        while True:
            if self.bookmark_every:
                await asyncio.sleep(self.bookmark_every)
                self.rv += 1
                line = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(self.rv)}}}
            else:
                line = await self.watch_events.get()
                if line is None:  # end this watch
                    return resp
            await resp.write(json.dumps(line).encode() + b"\n")


@pytest.fixture
async def api():
    fake = FakeAPI()
    async with scripted_api({"/api/v1/pods": fake.pods}) as api_client:
        fake.core = client.CoreV1Api(api_client)
        yield fake


class Store:
    def __init__(self):
        self.by_name: dict[str, dict] = {}
        self.replaced = 0

    def replace(self, items):
        self.replaced += 1
        self.by_name = {p["metadata"]["name"]: p for p in items}

    def apply(self, kind, obj):
        if kind == "DELETED":
            self.by_name.pop(obj["metadata"]["name"], None)
        else:
            self.by_name[obj["metadata"]["name"]] = obj




async def started(api: FakeAPI, settings: WatchSettings = FAST) -> tuple[Informer, Store]:
    store = Store()
    inf = Informer("pods", api.core.list_pod_for_all_namespaces, store.replace, store.apply, settings)
    inf.start()
    assert await inf.wait_synced(5)
    assert not inf.stale and set(store.by_name) == {"a", "b"}
    return inf, store


@pytest.mark.parametrize("status", [403, 404, 429, 500, 503])
async def test_an_error_answer_keeps_the_last_good_state_and_says_stale(api, status):
    inf, store = await started(api)
    try:
        api.list_answer = (status, json.dumps({"kind": "Status", "message": f"nope {status}", "code": status}))
        api.watch_events.put_nowait({"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "boom"}})
        await until(lambda: api.lists >= 3, what="relists after the error")
        assert set(store.by_name) == {"a", "b"}, "an error answer emptied the cache"
        assert inf.synced.is_set() and inf.stale
        assert f"HTTP {status}: nope {status}" == inf.error
        # the API answers again: fresh state, no longer stale
        api.items, api.list_answer = [pod("c")], None
        await until(lambda: not inf.stale, what="recovery")
        assert set(store.by_name) == {"c"} and inf.error is None
    finally:
        await inf.stop()


async def test_a_list_without_items_is_not_an_empty_cluster(api):
    inf, store = await started(api)
    try:
        api.list_answer = (200, json.dumps({"kind": "Status", "metadata": {}}))
        api.watch_events.put_nowait({"type": "ERROR", "object": {"code": 503, "message": "etcd down"}})
        await until(lambda: inf.stale, what="stale")
        await until(lambda: api.lists >= 3, what="more relists")
        assert set(store.by_name) == {"a", "b"}
        assert "no items" in inf.error
    finally:
        await inf.stop()


async def test_expired_watch_relists_at_once_without_going_stale(api):
    inf, store = await started(api)
    try:
        api.items = [pod("a"), pod("b"), pod("d")]
        api.watch_events.put_nowait({"type": "ERROR", "object": {"code": 410, "message": "too old"}})
        await until(lambda: "d" in store.by_name, what="relist after 410")
        assert not inf.stale and inf.error is None
    finally:
        await inf.stop()


async def test_events_and_bookmarks_move_the_resource_version(api):
    inf, store = await started(api)
    try:
        api.watch_events.put_nowait({"type": "ADDED", "object": pod("e", rv="11")})
        api.watch_events.put_nowait({"type": "DELETED", "object": pod("a", rv="12")})
        api.watch_events.put_nowait({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}})
        api.watch_events.put_nowait(None)  # the server ends the watch: resume from the bookmark
        await until(lambda: api.watches >= 2, what="the next watch")
        assert set(store.by_name) == {"b", "e"}
        first, second = api.watch_params[:2]
        assert first["resourceVersion"] == "10" and second["resourceVersion"] == "15"
        assert first["allowWatchBookmarks"] in ("true", "True") and first["timeoutSeconds"] == "30"
        assert api.lists == 1 and not inf.stale
    finally:
        await inf.stop()


async def test_a_silent_watch_is_restarted_with_a_fresh_list(api):
    inf, store = await started(api)
    try:
        api.items = [pod("a"), pod("b"), pod("missed")]  # an event the silent watch never delivered
        await until(lambda: inf.restarts >= 1, timeout=3, what="the silent watch to be restarted")
        await until(lambda: "missed" in store.by_name, what="the relist")
        assert api.lists >= 2 and not inf.stale
    finally:
        await inf.stop()


async def test_bookmarks_keep_a_quiet_watch_alive(api):
    api.bookmark_every = 0.2  # three times per silent_after: the watch is quiet, not silent
    inf, store = await started(api)
    try:
        await asyncio.sleep(2.0)
        assert inf.restarts == 0 and api.watches == 1 and api.lists == 1 and not inf.stale
    finally:
        await inf.stop()


async def test_a_hanging_list_times_out_and_keeps_the_state(api):
    inf, store = await started(api)
    try:
        api.list_delay = 3  # longer than request_timeout=1
        api.watch_events.put_nowait({"type": "ERROR", "object": {"code": 500, "message": "restart"}})
        await until(lambda: inf.error and "Timeout" in inf.error, timeout=5, what="the list to time out")
        assert inf.stale and set(store.by_name) == {"a", "b"}
    finally:
        await inf.stop()


async def test_every_request_of_the_timeout_client_has_a_timeout(api):
    api.list_delay = 3
    t0 = time.monotonic()
    with pytest.raises(asyncio.TimeoutError):
        await api.core.list_pod_for_all_namespaces()  # no _request_timeout given: the client's own applies
    assert time.monotonic() - t0 < 2.5
    api.list_delay = 0
    assert len((await api.core.list_pod_for_all_namespaces(_request_timeout=5)).items) == 2


def test_backoff_grows_is_capped_and_jittered():
    s = WatchSettings(backoff_base=0.5, backoff_max=30)  # not the default cap: the growth is the point
    for failures, top in ((1, 0.5), (2, 1), (3, 2), (10, 30), (40, 30)):
        delays = {s.backoff(failures) for _ in range(50)}
        assert all(top / 2 <= d <= top for d in delays) and len(delays) > 1


# ---------------------------------------------------------------------------------------------- hub side
async def test_kubespawner_reflector_view_has_kubespawner_selection_and_no_watch_of_its_own(api):
    """The pod informer feeds capacity (all pods) and KubeSpawner's view (its namespace and label only)."""
    from jupyterhub_gpu.hub.pod_reflector import SharedPodReflector

    server = {"component": "singleuser-server"}
    api.items = [pod("jupyter-ann", labels=server), pod("other-ns", ns="team", labels=server), pod("job-x")]
    cfg = load_profiles(EXAMPLE_PROFILES)
    informers = CapacityInformers(cfg, api.core, FAST)
    informers.nodes.synced.set()  # this fake serves pods only
    informers.pods.start()
    assert await informers.pods.wait_synced(5)
    view = SharedPodReflector(namespace="jhub", labels=server, informers=informers)
    try:
        await view.start()  # joins: a fresh list fills it
        assert set(view.pods) == {"jhub/jupyter-ann"}
        assert len(informers.state.pods) == 3  # capacity sees every pod
        api.watch_events.put_nowait({"type": "ADDED", "object": pod("jupyter-bob", labels=server, rv="20")})
        api.watch_events.put_nowait({"type": "ADDED", "object": pod("job-y", rv="21")})
        await until(lambda: "jhub/jupyter-bob" in view.pods and len(informers.state.pods) == 5, what="events")
        assert set(view.pods) == {"jhub/jupyter-ann", "jhub/jupyter-bob"}
        assert api.watches <= 2, "the view must not run a watch of its own"
        # the cluster stops answering: KubeSpawner keeps seeing its servers (a missing pod means "stopped")
        api.list_answer = (503, "{}")
        api.watch_events.put_nowait({"type": "ERROR", "object": {"code": 500, "message": "down"}})
        await until(lambda: informers.stale, what="stale")
        assert set(view.pods) == {"jhub/jupyter-ann", "jhub/jupyter-bob"}
        await view.stop()
        assert view not in informers.views
    finally:
        await informers.stop()


async def test_view_that_cannot_load_raises_and_leaves_nothing_behind(api):
    from kubespawner import KubeSpawner

    from jupyterhub_gpu.hub.pod_reflector import SharedPodReflector

    api.list_answer = (403, json.dumps({"message": "pods is forbidden"}))
    informers = CapacityInformers(load_profiles(EXAMPLE_PROFILES), api.core, FAST)
    informers.pods.start()
    view = SharedPodReflector(namespace="jhub", labels={}, informers=informers)
    KubeSpawner.reflectors[("pods-test", "jhub")] = view
    try:
        with pytest.raises(TimeoutError, match="forbidden"):
            await view.start()
        assert view not in informers.views and view not in KubeSpawner.reflectors.values()
    finally:
        KubeSpawner.reflectors.pop(("pods-test", "jhub"), None)
        await informers.stop()


def test_stale_capacity_is_unknown_in_the_picker_not_zero():
    from jinja2 import Environment, FileSystemLoader

    import jupyterhub_gpu.hub
    from jupyterhub_gpu.hub import progress as explain

    cfg = load_profiles(EXAMPLE_PROFILES)
    state = ClusterState(cfg)
    state.is_current = lambda: False
    prof = cfg.by_slug["h100-full"]
    cap = state.profile_capacity(prof)
    assert not cap.known and not cap.full
    entry = picker.profile_entry(cfg, prof, True, cap)
    assert entry["gpuhub"]["unknown"] and entry["gpuhub"]["capacity"].startswith("unknown")
    assert "free" not in entry["gpuhub"]
    # and an unknown state never turns a spawn away as "can never start"
    assert explain.never_fits(prof, state) is None
    html = Environment(loader=FileSystemLoader(str(Path(jupyterhub_gpu.hub.__file__).parent / "templates")),
                       autoescape=True).get_template("form.html").render(profile_list=[entry], user_options={})
    assert 'class="gpuhub-cap unknown"' in html and "capacity not available right now" in html
    assert "data-free" not in html


# ---------------------------------------------------------------------------------------------- gpu-jobs side
async def test_gpu_jobs_says_503_when_the_cluster_does_not_answer_and_keeps_real_refusals(api):
    from jupyterhub_gpu.services.jobs.cache import ClusterUnavailable
    from jupyterhub_gpu.services.jobs.kube import api_json

    dead = client.Configuration()
    dead.host = "http://127.0.0.1:9"  # nothing listens: connection refused
    async with TimeoutApiClient(dead, request_timeout=2) as unreachable:
        with pytest.raises(ClusterUnavailable) as no_answer:
            await api_json(client.CoreV1Api(unreachable).list_pod_for_all_namespaces(_preload_content=False))
    assert no_answer.value.status_code == 503 and "try again" in no_answer.value.log_message
    for status in (429, 500, 503):
        api.list_answer = (status, json.dumps({"message": "etcdserver: request timed out"}))
        with pytest.raises(ClusterUnavailable) as busy:
            await api_json(api.core.list_pod_for_all_namespaces(_preload_content=False))
        assert "etcdserver: request timed out" in busy.value.log_message
    api.list_answer = (404, json.dumps({"message": "jobs.batch \"x\" not found"}))
    with pytest.raises(client.ApiException) as missing:  # an answer, not an outage: the caller decides
        await api_json(api.core.list_pod_for_all_namespaces(_preload_content=False))
    assert missing.value.status == 404 and not isinstance(missing.value, ClusterUnavailable)
