"""The culler's new warnings, forwarded to gpu-jobs, which e-mails / posts them to the users who opted in
(services/notify). Each warning is forwarded once; one that could not be forwarded is tried again the
next cycle, while it still stands."""
from __future__ import annotations

import json
import logging
import os

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

log = logging.getLogger("gpuhub.culler")

Warnings = dict[str, dict[str, dict]]  # user → server name → warning


def keys(warnings: Warnings) -> set[tuple[str, str]]:
    return {(user, server) for user, servers in warnings.items() for server in servers}


def new_warnings(warnings: Warnings, forwarded: set[tuple[str, str]]) -> Warnings:
    """The warnings of this cycle not forwarded yet (pure)."""
    out: Warnings = {}
    for user, servers in warnings.items():
        for server, w in servers.items():
            if (user, server) not in forwarded:
                out.setdefault(user, {})[server] = w
    return out


class Forwarder:
    """POSTs each cycle's new warnings to gpu-jobs with the culler's own hub token."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 10.0):
        self.url, self.timeout = url, timeout
        self.token = token if token is not None else os.environ.get("JUPYTERHUB_API_TOKEN", "")
        self.forwarded: set[tuple[str, str]] = set()

    async def cycle(self, warnings: Warnings) -> int:
        """Forward what is new; returns how many warnings went out (0 when gpu-jobs did not take them)."""
        current = keys(warnings)
        self.forwarded &= current  # a warning that ended may come back later: then it is new again
        fresh = new_warnings(warnings, self.forwarded)
        if not fresh:
            return 0
        req = HTTPRequest(self.url, method="POST", body=json.dumps({"warnings": fresh}),
                          headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
                          request_timeout=self.timeout)
        try:
            await AsyncHTTPClient().fetch(req)
        except (HTTPClientError, OSError) as e:
            log.warning("could not forward %d cull warning(s) to %s (%s); trying again next cycle",
                        len(keys(fresh)), self.url, e)
            return 0
        self.forwarded |= keys(fresh)
        return len(keys(fresh))
