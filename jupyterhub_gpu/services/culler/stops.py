"""The culler's DELETEs, off the cycle: a cull is issued at once and answered in the background.

The hub handles each DELETE in its own (single) process — tens of ms apiece, however many the culler
sends at a time — so a cycle that waited for 100 of them would take seconds longer than one without
culls, and DELETEs sent while the cycle still pages through users slow those pages down. Here a cycle
only decides and queues its culls; once its last page is read they are `release`d: at most
`concurrency` DELETEs in flight, the rest wait their turn, and a server whose stop is still under way is
not culled twice. The hub's time is measured apart (`hub_seconds`: the summed DELETE round trips).
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPRequest


class Stopper:
    """Bounded background DELETEs of servers, by (user, server name)."""

    def __init__(self, api_url: str, token: str, concurrency: int, remove_named: bool, log: logging.Logger):
        self.api_url, self.token, self.remove_named, self.log = api_url.rstrip("/"), token, remove_named, log
        self.slots = asyncio.Semaphore(max(concurrency, 1))
        self.queued: dict[tuple[str, str], None] = {}  # decided this cycle, not yet sent
        self.pending: dict[tuple[str, str], asyncio.Task] = {}
        self.issued = self.done = self.failed = 0
        self.hub_seconds = 0.0  # summed DELETE round trips: the hub's share, not the cycle's

    def stopping(self, user: str, server: str) -> bool:
        return (user, server) in self.pending or (user, server) in self.queued

    def stop(self, user: str, server: str) -> None:
        """Queue the DELETE; `release` sends it (in the background: nobody waits for it)."""
        if not self.stopping(user, server):
            self.queued[(user, server)] = None

    def release(self) -> None:
        """Send every queued DELETE (at most `concurrency` at a time), answered in the background."""
        queued, self.queued = self.queued, {}
        for user, server in queued:
            self.issued += 1
            self.pending[(user, server)] = asyncio.create_task(self._delete(user, server),
                                                               name=f"cull {user}/{server}")

    def request(self, user: str, server: str) -> HTTPRequest:
        path = f"/users/{quote(user, safe='')}/server"
        body = None
        if server:
            path = f"/users/{quote(user, safe='')}/servers/{quote(server, safe='')}"
            body = json.dumps({"remove": True}) if self.remove_named else None
        return HTTPRequest(self.api_url + path, method="DELETE", body=body, allow_nonstandard_methods=True,
                           headers={"Authorization": f"token {self.token}"})

    async def _delete(self, user: str, server: str) -> None:
        client = AsyncHTTPClient(force_instance=True)
        try:
            async with self.slots:
                t0 = time.perf_counter()
                resp = await client.fetch(self.request(user, server), raise_error=False)
                self.hub_seconds += time.perf_counter() - t0
            if resp.code in (202, 204) or resp.code == 404:  # 202: stopping; 404: gone already
                self.done += 1
            else:
                self.failed += 1
                self.log.warning("Culling %s/%s: the hub answered %s %s", user, server, resp.code, resp.reason)
        except Exception as e:  # the next cycle decides again
            self.failed += 1
            self.log.warning("Culling %s/%s failed: %s", user, server, e)
        finally:
            client.close()
            self.pending.pop((user, server), None)

    async def drain(self) -> None:
        """Until every DELETE decided so far is answered (`--once` exits only then)."""
        self.release()
        while self.pending:
            await asyncio.gather(*list(self.pending.values()), return_exceptions=True)
