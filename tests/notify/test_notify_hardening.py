"""Notifications attacked: the webhook URL (a bearer secret) never reaches the logs, user strings cannot
ping a whole Slack channel, addresses cannot be relayed elsewhere (the % hack), and the culler's
endpoint answers odd bodies, a token the hub no longer accepts and a hub outage with clear 4xx/503s.
Real receivers and a real (tiny) hub API on this machine; the real gpu-jobs handler."""
from __future__ import annotations

import json
import logging
import socket

import pytest
from jupyterhub.services.auth import HubAuth
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.httpserver import HTTPServer

from jupyterhub_gpu.contract import CULLER_SERVICE, FAILED, JOBS_ACCESS_SCOPE, NOTIFY_CULL_PATH, RUNNING
from jupyterhub_gpu.services.auth import TokenAuth
from jupyterhub_gpu.services.notify import web as notify_web
from jupyterhub_gpu.services.notify.events import cull_event, job_events
from jupyterhub_gpu.services.notify.outbox import SENT, Outbox
from jupyterhub_gpu.services.notify.payloads import slack_payload
from jupyterhub_gpu.services.notify.prefs import Channels, PreferencesError, PreferenceStore, parse_webhooks, validate
from jupyterhub_gpu.services.notify.send import Notifier

from .receivers import WebhookSink
from .test_events_payloads import status

SECRET = "T0SECRET/B0SECRET/xoxSECRETsig"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("fail_status", [503, 429, 404])
async def test_a_webhooks_url_never_reaches_the_logs(tmp_path, caplog, fail_status):
    """A Slack/Teams webhook URL is its own credential: a refused or failed post logs the channel's name,
    never the URL (aiohttp's ClientResponseError puts the URL into its text)."""
    caplog.set_level(logging.DEBUG)
    with WebhookSink(fail_first=100, fail_status=fail_status) as hooks:
        channels = Channels(webhooks=parse_webhooks({"team-slack": f"slack:{hooks.url}/services/{SECRET}"}))
        store = PreferenceStore(str(tmp_path / "prefs.sqlite"))
        store.put("alice", {"channels": {"team-slack": ["failed"]}, "email": None}, [])
        n = Notifier(channels, store, retries=2, backoff=0.01)
        for ev in job_events(status(RUNNING), status(FAILED)):
            assert await n.notify(ev) == 1
        await n.drain()
        await n.close()
    assert n.stats["failed"] == 1 and len(hooks.attempts[f"/services/{SECRET}"]) == (1 if fail_status == 404 else 3)
    assert "team-slack" in caplog.text
    assert "SECRET" not in caplog.text


async def test_an_unreachable_webhooks_url_never_reaches_the_logs(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    url = f"http://127.0.0.1:{_free_port()}/services/{SECRET}"  # nothing listens there
    channels = Channels(webhooks=parse_webhooks({"team-slack": f"slack:{url}"}))
    store = PreferenceStore(str(tmp_path / "prefs.sqlite"))
    store.put("alice", {"channels": {"team-slack": ["failed"]}, "email": None}, [])
    n = Notifier(channels, store, retries=1, backoff=0.01)
    for ev in job_events(status(RUNNING), status(FAILED)):
        await n.notify(ev)
    await n.drain()
    await n.close()
    assert n.stats["failed"] == 1 and "SECRET" not in caplog.text


def test_slack_text_cannot_mention_the_channel_or_hide_a_link():
    """User strings (a hub name, a named server's name, a job's message) must not become Slack control
    sequences (<!channel>, <!here>, <url|text>) anywhere in the body, the notification's fallback `text`
    included: Slack parses it as mrkdwn."""
    hostile = "<!channel> <!here> <https://evil.example/login|Open JupyterHub> &"
    events = [cull_event(hostile, {"server": "x", "cull_in_s": 60, "message": hostile}, "https://hub.example.org"),
              *job_events(status(RUNNING, user=hostile), status(FAILED, user=hostile, message=hostile))]
    for ev in events:
        p = slack_payload(ev)
        raw = json.dumps(p)
        assert "<!" not in raw and "evil.example/login|" not in raw.replace("&lt;https://evil.example/login|", "")
        assert "&lt;!channel&gt;" in p["text"]
        links = [e["text"] for b in p["blocks"] if b["type"] == "context" for e in b["elements"]]
        assert all(t.startswith("<https://hub.example.org/") for t in links)  # the only link: the hub's own


@pytest.mark.parametrize("name", ["bob%evil.org", "bob%evil.org%x"])
def test_no_address_relays_through_the_percent_hack(name):
    """`bob%evil.org@example.org` is delivered to bob@evil.org by mail servers that honour the % hack:
    neither the template (a hub name with %) nor a user's own address may contain it."""
    channels = Channels(email=True, email_template="{username}@example.org", email_domains=("example.org",))
    assert channels.template_address(name) is None
    with pytest.raises(PreferencesError):
        validate({"channels": {"email": ["failed"]}, "email": f"{name}@example.org"}, "alice", [], channels)
    assert channels.address(name, {"email": f"{name}@example.org"}) is None


# ---------------------------------------------------------------- the culler's endpoint, with a real hub API

CULLER_TOKEN, USER_TOKEN = "culler-token-123", "user-token-456"


class FakeHubUser(web.RequestHandler):
    """GET /hub/api/user as JupyterHub answers it: the token's model, or 403."""

    def get(self):
        hub = self.settings["hub"]
        hub["requests"] += 1
        token = self.request.headers.get("Authorization", "").partition(" ")[2]
        model = hub["tokens"].get(token)
        if model is None:
            raise web.HTTPError(403)
        self.finish(model)


@pytest.fixture
async def culler_endpoint():
    hub = {"requests": 0, "tokens": {
        CULLER_TOKEN: {"kind": "service", "name": CULLER_SERVICE, "scopes": [JOBS_ACCESS_SCOPE]},
        USER_TOKEN: {"kind": "user", "name": "alice", "scopes": [JOBS_ACCESS_SCOPE], "groups": []}}}
    hub_server = HTTPServer(web.Application([(r"/hub/api/user", FakeHubUser)], hub=hub))
    hub_port = _free_port()
    hub_server.listen(hub_port, "127.0.0.1")
    hub_auth = HubAuth(api_url=f"http://127.0.0.1:{hub_port}/hub/api", api_token="svc-token")
    app = web.Application(notify_web.routes(""), auth=TokenAuth(hub_auth, {JOBS_ACCESS_SCOPE}), notifier=None)
    server = HTTPServer(app)
    port = _free_port()
    server.listen(port, "127.0.0.1")

    async def post(body: bytes, token: str = CULLER_TOKEN) -> int:
        r = await AsyncHTTPClient().fetch(HTTPRequest(f"http://127.0.0.1:{port}/{NOTIFY_CULL_PATH}", method="POST",
                                                      body=body, headers={"Authorization": f"token {token}"}),
                                          raise_error=False)
        return r.code

    yield post, hub, hub_server, app
    server.stop()
    hub_server.stop()


async def test_cull_warnings_odd_bodies_are_400_never_500(culler_endpoint):
    post, _, _, _ = culler_endpoint
    assert await post(json.dumps({"warnings": {"alice": {"": {"cull_in_s": 60}}}}).encode()) == 202
    assert await post(b"[" * 100_000 + b"]" * 100_000) == 400  # nesting beyond the parser: RecursionError
    assert await post(json.dumps({"warnings": {"alice": [1]}}).encode()) == 400
    assert await post(b"{}", token=USER_TOKEN) == 403


async def test_a_culler_token_the_hub_no_longer_accepts_is_refused_at_once(culler_endpoint):
    """No answer of the hub is reused: a revoked culler token (rotated, its service removed) cannot post
    more warnings for the minutes HubAuth would otherwise cache it."""
    post, hub, _, _ = culler_endpoint
    body = json.dumps({"warnings": {}}).encode()
    assert await post(body) == 202
    del hub["tokens"][CULLER_TOKEN]
    assert await post(body) == 403


async def test_cull_warnings_with_the_hub_down_is_503(culler_endpoint):
    post, _, hub_server, _ = culler_endpoint
    hub_server.stop()
    await hub_server.close_all_connections()
    assert await post(json.dumps({"warnings": {}}).encode()) == 503


async def test_a_cull_warnings_post_is_queued_in_one_outbox_transaction(culler_endpoint, tmp_path, monkeypatch):
    """Up to MAX_WARNINGS warnings in a POST: one `record` (one transaction, in a worker thread), not one each."""
    post, _, _, app = culler_endpoint
    real, calls = Outbox.record, []

    def counted(self, rows, changed=None):
        calls.append(list(rows))
        return real(self, rows, changed)

    monkeypatch.setattr(Outbox, "record", counted)
    with WebhookSink() as hooks:
        store = PreferenceStore(str(tmp_path / "prefs.sqlite"))
        store.put("alice", {"channels": {"team-slack": ["cull-warning"]}, "email": None}, [])
        n = Notifier(Channels(webhooks=parse_webhooks({"team-slack": f"slack:{hooks.url}/slack"})), store,
                     backoff=0.01, outbox=Outbox(str(tmp_path / "prefs.sqlite")))
        app.settings["notifier"] = n
        warnings = {"alice": {f"s{i}": {"server": f"s{i}", "cull_in_s": 60, "cull_at": f"t{i}", "message": "idle"}
                              for i in range(5)},
                    "bob": {"": {"server": "", "cull_in_s": 60, "message": "idle"}}}  # bob opted into nothing
        assert await post(json.dumps({"warnings": warnings}).encode()) == 202
        await n.drain()
        await n.close()
    assert len(calls) == 1 and len(calls[0]) == 5
    assert len(hooks.received) == 5 and set(n.outbox.states().values()) == {SENT}


def test_teams_cards_carry_user_strings_as_plain_text_runs():
    """Teams reads TextBlock text and FactSet values as Markdown ([text](url) is a link): a notebook path or a
    hub name such as `[Sign in again](https://evil.example)` would be a link in a card the hub posted. User
    strings go in TextRuns (never Markdown); the only link is the hub's own button."""
    from jupyterhub_gpu.services.notify.payloads import teams_payload

    hostile = "[Sign in again](https://evil.example/login) **now**"
    for ev in job_events(status(RUNNING, user=hostile), status(FAILED, user=hostile, message=hostile,
                                                               notebook=f"{hostile}/x.ipynb"), "https://hub.example.org"):
        card = teams_payload(ev)["attachments"][0]["content"]

        def markdown_texts(node):
            if isinstance(node, dict):
                if node.get("type") in ("TextBlock",):
                    yield node["text"]
                if node.get("type") == "FactSet":
                    for f in node["facts"]:
                        yield f["title"]
                        yield f["value"]
                for v in node.values():
                    yield from markdown_texts(v)
            elif isinstance(node, list):
                for v in node:
                    yield from markdown_texts(v)

        assert not any("evil.example" in t for t in markdown_texts(card["body"]))
        runs = [i["text"] for b in card["body"] if b["type"] == "RichTextBlock" for i in b["inlines"]]
        assert any(hostile in r for r in runs)  # still shown, as plain text
        assert any("Notebook" in r for r in runs) and any(f"{hostile}/x.ipynb" in r for r in runs)
        assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open the output notebook", "url": ev.link}]
