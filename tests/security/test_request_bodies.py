"""Big and parallel request bodies never stall gpu-jobs (finding 2 of issue 25), in this process: the real
service app (`make_app`) on a real HTTP server, a real HTTP hub API on this machine answering
`GET /hub/api/user` for the callers' tokens, the real watch-fed cache as its watches fill it (no jobs yet),
and the service's LoopGuard on this loop measuring every stall."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import time

import pytest
import pytest_asyncio
import requests
from jupyterhub.services.auth import HubAuth
from kubernetes_asyncio import client
from tornado import web
from tornado.httpserver import HTTPServer

from jupyterhub_gpu.contract import JOBS_ACCESS_SCOPE
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.services.auth import TokenAuth
from jupyterhub_gpu.services.jobs import limits
from jupyterhub_gpu.services.jobs.app import make_app
from jupyterhub_gpu.services.jobs.cache import JobsCache
from jupyterhub_gpu.services.jobs.kube import Kube
from jupyterhub_gpu.services.jobs.submission import ServiceSettings
from jupyterhub_gpu.services.loopguard import LoopGuard

from .hub_user import hub_user_app
from .stalls import StallMeter

pytestmark = pytest.mark.asyncio(loop_scope="module")  # one service (and worker process) for the module
USERS = {"tok-alice": "alice", "tok-bob": "bob"}


def _listen(app: web.Application) -> tuple[HTTPServer, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = HTTPServer(app, max_body_size=limits.HARD_BODY_BYTES)
    server.listen(port, "127.0.0.1")
    return server, port


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def service():
    hub, hub_port = _listen(hub_user_app(USERS))
    cfg = load_profiles(EXAMPLE_PROFILES)
    namespaces = [t.namespace for t in cfg.teams.values()]
    api = client.ApiClient()
    cache = JobsCache(api, namespaces)
    for store in cache.stores.values():
        store.replace([])
    for informer in cache.informers:
        informer.synced.set()
    auth = TokenAuth(HubAuth(api_url=f"http://127.0.0.1:{hub_port}/hub/api", api_token="svc"), {JOBS_ACCESS_SCOPE})
    app = make_app(cfg, Kube(api, namespaces, cache=cache), auth, ServiceSettings(submissions_in_flight=1), "/")
    guard = LoopGuard(app.settings["metrics"]).start()
    await app.settings["planner"].warm()
    server, port = _listen(app)
    yield f"http://127.0.0.1:{port}", port, StallMeter(registry=app.settings["metrics"]), app.settings["gate"]
    server.stop()
    hub.stop()
    guard._task.cancel()
    app.settings["planner"].close()
    await api.close()


def post(url: str, body: bytes, token: str = "tok-alice") -> requests.Response:
    return requests.post(f"{url}/jobs", data=body, timeout=60, headers={"Authorization": f"token {token}"})


def notebook(cells: int, source_bytes: int) -> dict:
    """A notebook of random sources: it does not compress, so its snapshot is too big (planned to the end)."""
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "source": os.urandom(source_bytes // 2).hex(), "metadata": {}, "outputs": []}
        for _ in range(cells)]}


BIG = {
    "4 MiB of empty objects": b"[" + b"{}," * (limits.MAX_BODY_BYTES // 3 - 1) + b"{}]",
    "4 MiB of zeros": b"[" + b"0," * (limits.MAX_BODY_BYTES // 2 - 2) + b"0]",
    "deep and wide": json.dumps([[[[{"a": [0] * 50}] * 20] * 20] * 12]).encode(),
    "a snapshot too big, planned to the end": json.dumps({"profile": "a100-mig-1g10gb", "notebook_path": "w.ipynb",
                                                          "notebook": notebook(14_000, 190)}).encode(),
}


@pytest.mark.parametrize("what", list(BIG))
async def test_big_bodies_are_refused_without_stalling_the_loop(service, what):
    url, _, meter, _ = service
    raw = BIG[what]
    assert len(raw) <= limits.MAX_BODY_BYTES, len(raw)
    with meter.request(f"POST /jobs ({what})"):
        r = await asyncio.to_thread(post, url, raw)
    assert r.status_code in (400, 413), (r.status_code, r.text[:300])
    assert r.json()["message"]
    print(meter.report())


async def test_too_many_json_values_is_413_naming_the_limit(service):
    url, *_ = service
    r = await asyncio.to_thread(post, url, BIG["4 MiB of zeros"])
    assert r.status_code == 413 and f"the limit is {limits.MAX_JSON_VALUES}" in r.json()["message"], r.text


async def _held_upload(port: int, token: str, declared: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A POST whose headers and first bytes were sent, the rest held back (a slow or hostile client)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /jobs HTTP/1.1\r\nHost: gpu-jobs\r\nAuthorization: token {token}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n{{".encode())
    await writer.drain()
    return reader, writer


async def test_a_users_submission_beyond_the_in_flight_limit_is_429_before_its_body_is_read(service):
    url, port, _, gate = service
    reader, writer = await _held_upload(port, "tok-alice", 2**20)
    deadline = time.monotonic() + 10
    while not gate.in_flight("alice") and time.monotonic() < deadline:  # its token checked by the hub
        await asyncio.sleep(0.01)
    r = await asyncio.to_thread(post, url, b"{}")
    assert r.status_code == 429 and "the limit is 1 at a time" in r.json()["message"], r.text
    assert r.headers["Retry-After"]
    other = await asyncio.to_thread(post, url, b"{}", "tok-bob")  # someone else is not held up
    assert other.status_code == 400, other.text
    writer.close()  # the held upload goes away: its slot is free again
    await writer.wait_closed()
    while gate.in_flight("alice") and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert (await asyncio.to_thread(post, url, b"{}")).status_code == 400


async def test_a_body_over_the_limit_sent_whole_is_answered_413(service):
    """Read and dropped, then answered (a proxy in front could not pass on an answer given mid-upload)."""
    url, *_ = service
    r = await asyncio.to_thread(post, url, b'{"x": "' + b"a" * (5 * 2**20) + b'"}')
    assert r.status_code == 413 and "the limit is 4 MiB" in r.json()["message"], r.text


@pytest.mark.parametrize("key", ["short", "x" * 65, "a b c d e f g h", "key/with/slashes", "ключ-ключ-ключ"])
async def test_a_malformed_idempotency_key_is_a_400_naming_the_header(service, key):
    url, *_ = service
    r = await asyncio.to_thread(requests.post, f"{url}/jobs", data=b"{}", timeout=60,
                                headers={"Authorization": "token tok-alice",
                                         "Idempotency-Key": key.encode("utf-8").decode("latin-1")})
    assert r.status_code == 400 and "Idempotency-Key header must be 8 to 64" in r.json()["message"], r.text
    good = await asyncio.to_thread(requests.post, f"{url}/jobs", data=b"{}", timeout=60,
                                   headers={"Authorization": "token tok-alice", "Idempotency-Key": "k" * 20})
    assert good.status_code == 400 and "profile" in good.json()["message"], good.text  # the body's own refusal


async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """One HTTP/1.1 answer from a kept-alive connection: its status and headers, its body read to its end."""
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)).decode()
    status, *lines = head.split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}
    await reader.readexactly(int(headers.get("content-length", "0")))
    return int(status.split()[1]), headers


async def test_a_refused_get_keeps_the_connection_for_the_next_request(service):
    """A proxy keeps its connections to gpu-jobs alive (configurable-http-proxy does) and hands the next request,
    maybe another user's, to one that has just been answered. A GET refused before tornado had read it to its end
    closed its connection: the next request on it got the proxy's 503 "socket hang up" (seen in CI, right after
    a 403). Refused and accepted GETs on one connection are all answered."""
    _, port, _, _ = service
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for auth, expected in [("", 403), ("token", 403), ("token tok-alice", 200), ("Basic x", 403),
                               ("token tok-bob", 200)]:
            line = f"Authorization: {auth}\r\n" if auth else ""
            writer.write(f"GET /jobs HTTP/1.1\r\nHost: gpu-jobs\r\n{line}\r\n".encode())
            await writer.drain()
            status, headers = await _answer(reader)
            assert (status, headers.get("connection", "")) == (expected, ""), (auth, status, headers)
    finally:
        writer.close()


async def test_a_post_refused_before_its_body_is_read_says_connection_close(service):
    """Issue 50 item 6: a POST refused before its body is read (bad token, too many in flight) is answered and its
    connection closed; without `Connection: close` the proxy may hand the next request, anyone's, to the closing
    socket (a 503 "socket hang up"). The answer says so, and the connection then ends; an accepted POST keeps it."""
    _, port, _, _ = service
    for auth in ("", "token nope", "Basic x"):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            line = f"Authorization: {auth}\r\n" if auth else ""
            writer.write(f"POST /jobs HTTP/1.1\r\nHost: gpu-jobs\r\n{line}Content-Length: 2\r\n\r\n{{}}".encode())
            await writer.drain()
            status, headers = await _answer(reader)
            assert (status, headers.get("connection")) == (403, "close"), (auth, status, headers)
            assert await asyncio.wait_for(reader.read(), 30) == b""  # and it does close
        finally:
            writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:  # read to its end and refused for what it says: the connection stays for the next request
        for _ in range(2):
            writer.write(b"POST /jobs HTTP/1.1\r\nHost: gpu-jobs\r\nAuthorization: token tok-alice\r\n"
                         b"Content-Length: 2\r\n\r\n{}")
            await writer.drain()
            status, headers = await _answer(reader)
            assert (status, headers.get("connection", "")) == (400, ""), (status, headers)
    finally:
        writer.close()
