"""The hub's ClusterQueue watch (hub/team_quota.py) against a tiny scripted API server: one list, then watch
events keep each team's quota current; a picker render reads memory only (no request per page); an error
answer makes the team's quota "unknown", never a number; the card and the form say the team is the limit."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web
from jinja2 import Environment, FileSystemLoader
from kubernetes_asyncio import client
from unit.scripted_api import scripted_api, until

import jupyterhub_gpu.hub
from jupyterhub_gpu.hub import picker
from jupyterhub_gpu.hub.capacity import ProfileCapacity
from jupyterhub_gpu.hub.capacity_text import STARTS_NOW
from jupyterhub_gpu.hub.informers import CapacityInformers
from jupyterhub_gpu.hub.team_quota import TeamQuotas
from jupyterhub_gpu.kubeio.informer import WatchSettings
from tests.unit.test_team_room import CFG, GPU, live

FAST = WatchSettings(request_timeout=1, watch_seconds=30, silent_after=5, backoff_base=0.05, backoff_max=0.1)
PATH = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"
T4 = next(p for p in CFG.profiles if p.slug == "t4-shared")
CPU = next(p for p in CFG.profiles if p.gpu is None)


class FakeKueue:
    """GET clusterqueues (list and watch) from a script the test changes; nodes and pods: empty lists."""

    def __init__(self):
        self.items = [live("data-science"), live("ml-research")]
        self.list_answer: tuple[int, str] | None = None
        self.events: asyncio.Queue = asyncio.Queue()
        self.lists = self.watches = 0

    async def queues(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") in ("true", "True", "1"):
            self.watches += 1
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            while (line := await self.events.get()) is not None:
                await resp.write(json.dumps(line).encode() + b"\n")
            return resp
        self.lists += 1
        if self.list_answer:
            status, body = self.list_answer
            return web.Response(status=status, text=body, content_type="application/json")
        return web.json_response({"metadata": {"resourceVersion": "7"}, "items": self.items})

    async def empty(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") in ("true", "True", "1"):
            await asyncio.sleep(30)
        return web.json_response({"metadata": {"resourceVersion": "1"}, "items": []})


@pytest.fixture
async def api():
    fake = FakeKueue()
    async with scripted_api({PATH: fake.queues, "/api/v1/nodes": fake.empty, "/api/v1/pods": fake.empty}) as api_client:
        fake.custom, fake.core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
        yield fake




def card(teams: TeamQuotas, groups=("data-science",)) -> dict:
    cap = ProfileCapacity("t4-shared", GPU, 16, 5, 5, 0, 4, True, "5 of 16 T4 time-slices free", STARTS_NOW)
    return picker.profile_entry(CFG, T4, True, cap, list(groups), team=teams.view(CFG, T4, list(groups)))


async def test_the_watch_keeps_the_team_quota_current_and_renders_make_no_request(api):
    teams = TeamQuotas(api.custom, FAST)
    teams.start()
    try:
        assert await teams.informer.wait_synced(5)
        assert card(teams)["gpuhub"]["team"] == "your team (data-science): 8 of 8 T4 time-slices free in quota"
        requests = teams.informer.requests
        for _ in range(200):  # a busy picker: every render from memory
            card(teams)
        assert teams.informer.requests == requests and api.lists == 1
        # the team fills its quota (an admission): the card says the team, not the pool, is the limit
        full = live("data-science", {("gput4", GPU): 8}, pending=3)
        full["metadata"]["resourceVersion"] = "8"
        api.events.put_nowait({"type": "MODIFIED", "object": full})
        await until(lambda: card(teams)["gpuhub"].get("team_limit"), what="the MODIFIED event")
        g = card(teams)["gpuhub"]
        assert g["outlook"] == ("waits for your team's quota (8 of 8 in use): starts when one of your team's servers "
                                "or jobs on this pool stops — 3 waiting in your team's queue")
        assert g["capacity"] == "5 of 16 T4 time-slices free"
        # the queue deleted: unknown, not zero
        api.events.put_nowait({"type": "DELETED", "object": full})
        await until(lambda: card(teams)["gpuhub"].get("team_unknown"), what="the DELETED event")
    finally:
        await teams.stop()


async def test_an_error_answer_makes_the_team_quota_unknown_not_a_number(api):
    api.list_answer = (403, json.dumps({"kind": "Status", "message": "clusterqueues is forbidden", "code": 403}))
    teams = TeamQuotas(api.custom, FAST)
    teams.start()
    try:
        await until(lambda: api.lists >= 2, what="retries")
        g = card(teams)["gpuhub"]
        assert g["team"] == "your team (data-science): team quota unknown" and g["team_unknown"]
        assert g["outlook"] == "starts right away if your team's quota has room" and not g.get("team_limit")
        assert "HTTP 403" in teams.informer.error
    finally:
        await teams.stop()


async def test_the_hub_informers_watch_queues_only_for_queued_profiles(api):
    inf = CapacityInformers(CFG, api.core, FAST, custom=api.custom)
    try:
        assert await inf.start(timeout=5)
        assert inf.teams.informer.synced.is_set() and api.lists == 1
        assert inf.teams.view(CFG, CPU, ["data-science"]) is None  # a CPU server is never queued
        assert inf.teams.view(CFG, T4, ["data-science"]).room.nominal == 8
        assert inf.teams.view(CFG, T4, ["no-team-at-all"]).team == "data-science"  # the default team
    finally:
        await inf.stop()
    assert CapacityInformers(CFG, api.core, FAST).teams is None  # no Kueue client: no watch, no team line


def test_the_form_shows_the_team_line_and_marks_the_limit():
    from tests.unit.test_team_room import queues

    teams = TeamQuotas.__new__(TeamQuotas)
    teams.queues, teams.version, teams._memo = queues(data_science={("gput4", GPU): 8}), 1, {}
    teams.informer = type("Synced", (), {"stale": False})()
    html = Environment(loader=FileSystemLoader(str(Path(jupyterhub_gpu.hub.__file__).parent / "templates")),
                       autoescape=True).get_template("form.html").render(profile_list=[card(teams)], user_options={})
    assert 'id="profile-team-t4-shared" data-team-limit="true"' in html
    assert "your team (data-science): 0 of 8 T4 time-slices free in quota" in html
    assert "waits for your team&#39;s quota (8 of 8 in use)" in html and "starts right away" not in html
