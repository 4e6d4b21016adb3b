"""The real gpu-jobs app (`make_app`) with e-mail notifications on a real HTTP server, in a thread with its own
event loop; a real HTTP hub API on this machine answering `GET /hub/api/user` for the callers' tokens; mail to
a real SMTP server (receivers.SmtpSink). For tests that call it as users do, over HTTP."""
from __future__ import annotations

import asyncio
import re
import socket
import threading

import requests
from jupyterhub.services.auth import HubAuth
from kubernetes_asyncio import client
from security.hub_user import hub_user_app
from tornado.httpserver import HTTPServer

from jupyterhub_gpu.contract import FAILED, JOBS_ACCESS_SCOPE, RUNNING
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.services.auth import TokenAuth
from jupyterhub_gpu.services.jobs.app import make_app
from jupyterhub_gpu.services.jobs.cache import JobsCache
from jupyterhub_gpu.services.jobs.kube import Kube
from jupyterhub_gpu.services.jobs.submission import ServiceSettings
from jupyterhub_gpu.services.notify.events import job_events
from jupyterhub_gpu.services.notify.prefs import Channels, PreferenceStore
from jupyterhub_gpu.services.notify.send import Notifier, Smtp

from .receivers import SmtpSink
from .test_events_payloads import status

USERS = {"tok-alice": "alice", "tok-bob": "bob", "tok-carol": "carol"}
HUB_URL = "https://hub.example.org"
CODE_LINE = re.compile(r"^Code: ([A-Za-z0-9_-]+)", re.M)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """gpu-jobs with e-mail notifications (template {username}@example.org, own addresses in example.org)."""

    def __init__(self, tmp_path, smtp: SmtpSink):
        self.smtp, self.tmp_path = smtp, tmp_path
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self.ready.set()
        self.loop.run_forever()

    async def _start(self):
        hub_port, port = _port(), _port()
        self.hub = HTTPServer(hub_user_app(USERS))
        self.hub.listen(hub_port, "127.0.0.1")
        cfg = load_profiles(EXAMPLE_PROFILES)
        namespaces = [t.namespace for t in cfg.teams.values()]
        self.api = client.ApiClient()
        cache = JobsCache(self.api, namespaces)
        channels = Channels(email=True, email_template="{username}@example.org", email_domains=("example.org",))
        self.notifier = Notifier(channels, PreferenceStore(str(self.tmp_path / "prefs.sqlite")),
                                 Smtp("127.0.0.1", self.smtp.port, "none", sender="hub@example.org"),
                                 backoff=0.01, max_confirmations_hour=3, hub_url=HUB_URL)
        auth = TokenAuth(HubAuth(api_url=f"http://127.0.0.1:{hub_port}/hub/api", api_token="svc"),
                         {JOBS_ACCESS_SCOPE})
        self.app = make_app(cfg, Kube(self.api, namespaces, cache=cache), auth, ServiceSettings(), "/",
                            self.notifier, HUB_URL)
        self.server = HTTPServer(self.app)
        self.server.listen(port, "127.0.0.1")
        self.url = f"http://127.0.0.1:{port}/notifications"

    def __enter__(self) -> "Service":
        self.thread.start()
        assert self.ready.wait(30)
        return self

    def __exit__(self, *exc):
        async def stop():
            self.server.stop()
            self.hub.stop()
            await self.notifier.close()
            self.app.settings["planner"].close()
            await self.api.close()
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)

    def drain(self):
        asyncio.run_coroutine_threadsafe(self.notifier.drain(), self.loop).result(30)

    def notify(self, user: str, job: str) -> None:
        async def go():
            for ev in job_events(status(RUNNING, user=user, name=job), status(FAILED, user=user, name=job)):
                await self.notifier.notify(ev)
            await self.notifier.drain()
        asyncio.run_coroutine_threadsafe(go(), self.loop).result(30)

    def mailed_code(self, to: str) -> tuple[str, str]:
        """(the code, the link) of the last confirmation mail sent to `to`."""
        self.drain()
        msgs = [m for m in self.smtp.messages if m["To"] == to]
        assert msgs, [m["To"] for m in self.smtp.messages]
        body = msgs[-1].get_content()
        return CODE_LINE.search(body).group(1), re.search(r"Confirm the address: (\S+)", body).group(1)

    def call(self, method: str, token: str, json=None, path: str = "") -> requests.Response:
        return requests.request(method, self.url + path, json=json, timeout=30,
                                headers={"Authorization": f"token {token}"})

    def confirm(self, token: str, code) -> requests.Response:
        return self.call("POST", token, {"code": code}, "/confirm")
