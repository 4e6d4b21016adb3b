"""gpu-jobs' notification endpoints.

  GET    /notifications                 the caller's channels (never a webhook URL), events and choices
  PUT    /notifications                 {"channels": {"email": ["succeeded", "failed"], "<webhook>": [...]},
                                         "email": "me@example.org" (optional)}: validated whole, then stored
  DELETE /notifications                 opt out of everything
  POST   /notifications/cull-warnings   the culler's new warnings (the gpu-culler service's token only)
Each user reads and sets only their own choices (the caller's own token, as for jobs).
"""
from __future__ import annotations

import json
import logging

from jupyterhub.services.auth import check_scopes
from tornado import web

from gpu_spawner.contract import CULLER_SERVICE, JOBS_ACCESS_SCOPE, NOTIFY_CULL_PATH, NOTIFY_EVENTS
from gpu_spawner.services.jobs.app import Base
from gpu_spawner.services.jobs.auth import TokenAuth
from gpu_spawner.services.notify.events import cull_event
from gpu_spawner.services.notify.prefs import MAX_BODY, PreferencesError, validate
from gpu_spawner.services.notify.send import Notifier

log = logging.getLogger("gpuhub.notify")
MAX_WARNINGS_BODY = 512 * 1024
MAX_WARNINGS = 2000


class PreferencesHandler(Base):
    @property
    def notifier(self) -> Notifier | None:
        return self.settings.get("notifier")

    def view(self) -> dict:
        n = self.notifier
        prefs = n.store.get(self.who.name) if n else None
        return {"user": self.who.name, "events": list(NOTIFY_EVENTS),
                "channels": n.channels.describe(self.who.name, self.who.groups, prefs) if n else [],
                "preferences": {"channels": (prefs or {}).get("channels", {}), "email": (prefs or {}).get("email")}}

    def get(self):
        self.send(self.view())

    def put(self):
        n = self.notifier
        if n is None:
            raise web.HTTPError(400, "notifications are not set up on this hub (ask an admin)")
        if len(self.request.body) > MAX_BODY:
            raise web.HTTPError(413, f"at most {MAX_BODY} bytes")
        try:
            body = json.loads(self.request.body or b"null")
            prefs = validate(body, self.who.name, self.who.groups, n.channels)
        except (ValueError, RecursionError) as e:
            raise web.HTTPError(400, str(e) if isinstance(e, PreferencesError) else "the body is not JSON") from None
        n.store.put(self.who.name, prefs, self.who.groups)
        log.info("%s set notifications %s", self.who.name, prefs["channels"])
        self.send(self.view())

    def delete(self):
        if self.notifier is not None:
            self.notifier.store.delete(self.who.name)
        self.send(self.view())


def _is_culler(model) -> bool:
    """The hub's model of the caller's token is the culler service's, with access to gpu-jobs (fails closed)."""
    if not isinstance(model, dict) or model.get("kind") != "service" or model.get("name") != CULLER_SERVICE:
        return False
    scopes = model.get("scopes")
    try:
        return check_scopes({JOBS_ACCESS_SCOPE}, {s for s in scopes if isinstance(s, str)}
                            if isinstance(scopes, list) else set())
    except ValueError:  # a scope JupyterHub itself cannot parse
        return False


class CullWarningsHandler(web.RequestHandler):
    """The culler's new warnings, `{"warnings": {user: {server: warning}}}`, queued for those who opted in."""

    def check_xsrf_cookie(self):  # token-authenticated: no cookies
        return

    async def post(self):
        auth: TokenAuth = self.settings["auth"]
        token = auth.token_from(self.request.headers.get("Authorization"))
        try:  # the hub's answer now, never HubAuth's cached one: a revoked token stops at once
            model = await auth.hub_auth.user_for_token(token, use_cache=False, sync=False) if token else None
        except web.HTTPError:  # the hub is unreachable or answered 5xx
            raise web.HTTPError(503, "cannot check the token with JupyterHub just now; try again") from None
        if not _is_culler(model):
            raise web.HTTPError(403, f"only the {CULLER_SERVICE} service posts cull warnings")
        if len(self.request.body) > MAX_WARNINGS_BODY:
            raise web.HTTPError(413)
        try:
            warnings = json.loads(self.request.body)["warnings"]
            items = [(u, w) for u, servers in warnings.items() for w in servers.values()]
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            raise web.HTTPError(400, 'send {"warnings": {user: {server: warning}}}') from None
        if len(items) > MAX_WARNINGS or not all(isinstance(u, str) and isinstance(w, dict) for u, w in items):
            raise web.HTTPError(400, "warnings: users' warning objects, at most %d" % MAX_WARNINGS)
        n: Notifier | None = self.settings.get("notifier")
        queued = sum(n.notify(cull_event(u, w, self.settings.get("hub_url", ""))) for u, w in items) if n else 0
        self.set_status(202)
        self.finish({"queued": queued})


def routes(prefix: str) -> list:
    return [(rf"{prefix}/notifications/?", PreferencesHandler),
            (rf"{prefix}/{NOTIFY_CULL_PATH}", CullWarningsHandler)]
