"""The request-handler base of the services' token-authenticated JSON APIs (gpu-jobs and the notification
endpoints it hosts): the caller's identity from their own token (`services/auth.py`), the query's bounds,
JSON errors and JSON answers. It knows nothing of any one service."""
from __future__ import annotations

import json
from typing import Mapping

from tornado import web

from jupyterhub_gpu.builders.jobs import JobRequestError
from jupyterhub_gpu.services.auth import Caller

MAX_QUERY_ARGS = 16
MAX_QUERY_VALUE = 256


def check_query(arguments: Mapping[str, list[bytes]]) -> None:
    """At most MAX_QUERY_ARGS query values, each at most MAX_QUERY_VALUE bytes."""
    count = sum(len(v) for v in arguments.values())
    if count > MAX_QUERY_ARGS:
        raise JobRequestError(f"{count} query parameters; the limit is {MAX_QUERY_ARGS}")
    for name, values in arguments.items():
        if len(name) > MAX_QUERY_VALUE or any(len(v) > MAX_QUERY_VALUE for v in values):
            raise JobRequestError(f"query parameter {name[:40]!r} is too long; the limit is {MAX_QUERY_VALUE} bytes")


class Base(web.RequestHandler):
    """`self.who`: the caller (403 without a token that has access to the service, `settings["auth"]`)."""

    who: Caller

    def check_xsrf_cookie(self):  # token-authenticated JSON API: no cookies, no XSRF
        return

    async def prepare(self):
        try:
            check_query(self.request.query_arguments)
        except JobRequestError as e:
            raise web.HTTPError(400, str(e)) from None
        who = await self.settings["auth"].caller(self.request.headers.get("Authorization"))
        if who is None:
            raise web.HTTPError(403, "a JupyterHub token with access to the gpu-jobs service is required, in the "
                                     "Authorization header (Authorization: token <token>)")
        self.who = who

    def write_error(self, status_code, **kwargs):
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = getattr(exc, "log_message", None) or self._reason
        self.set_header("Content-Type", "application/json")
        if status_code == 429:  # the in-flight limit: free again as soon as the user's others are answered
            self.set_header("Retry-After", "2")
        self.finish(json.dumps({"status": status_code, "message": message}))

    def send(self, obj, status: int = 200):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(obj))
