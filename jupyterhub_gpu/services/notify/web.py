"""gpu-jobs' notification endpoints.

  GET    /notifications                 the caller's channels (never a webhook URL), events and choices
  PUT    /notifications                 {"channels": {"email": ["succeeded", "failed"], "<webhook>": [...]},
                                         "email": "me@example.org" (optional)}: validated whole, then stored
                                         an own address not yet confirmed is mailed a one-time link (429 when
                                         Notifications.max_confirmations_hour were sent this hour)
  POST   /notifications/confirm         {"code": "..."}: the code mailed to the caller's own address, back
                                         (the link opens the user's JupyterLab, which posts it with their token)
  DELETE /notifications                 opt out of everything
  POST   /notifications/cull-warnings   the culler's new warnings (the gpu-culler service's token only)
Each user reads and sets only their own choices (the caller's own token, as for jobs).
"""
from __future__ import annotations

import json
import logging

from jupyterhub.services.auth import check_scopes
from tornado import web

from jupyterhub_gpu.contract import CULLER_SERVICE, JOBS_ACCESS_SCOPE, NOTIFY_CULL_PATH, NOTIFY_EVENTS
from jupyterhub_gpu.services.auth import TokenAuth
from jupyterhub_gpu.services.notify.events import cull_event
from jupyterhub_gpu.services.notify.prefs import MAX_BODY, PreferencesError, validate
from jupyterhub_gpu.services.notify.send import Notifier
from jupyterhub_gpu.services.web import Base

log = logging.getLogger("gpuhub.notify")
MAX_WARNINGS_BODY = 512 * 1024
MAX_WARNINGS = 2000


class _Notifications(Base):
    @property
    def notifier(self) -> Notifier | None:
        return self.settings.get("notifier")

    def view(self, message: str = "") -> dict:
        n = self.notifier
        prefs = n.store.get(self.who.name) if n else None
        own = (prefs or {}).get("email")
        out = {"user": self.who.name, "events": list(NOTIFY_EVENTS),
               "channels": n.channels.describe(self.who.name, self.who.groups, prefs) if n else [],
               "preferences": {"channels": (prefs or {}).get("channels", {}), "email": own,
                               "email_confirmed": bool(own) and (prefs or {}).get("email_confirmed") == own}}
        return {**out, "message": message} if message else out

    def json_body(self):
        if len(self.request.body) > MAX_BODY:
            raise web.HTTPError(413, f"at most {MAX_BODY} bytes")
        try:
            return json.loads(self.request.body or b"null")
        except (ValueError, RecursionError):
            raise web.HTTPError(400, "the body is not JSON") from None


class PreferencesHandler(_Notifications):
    def get(self):
        self.send(self.view())

    async def put(self):  # the store's writes run in its writer thread, never on the loop
        n = self.notifier
        if n is None:
            raise web.HTTPError(400, "notifications are not set up on this hub (ask an admin)")
        body = self.json_body()
        try:
            prefs = validate(body, self.who.name, self.who.groups, n.channels)
        except PreferencesError as e:
            raise web.HTTPError(400, str(e)) from None
        own, before = prefs["email"], n.store.get(self.who.name) or {}
        message = ""
        if own and before.get("email_confirmed") != own and n.smtp is not None:
            if not await n.confirm_address(self.who.name, own):  # before anything is stored: a refusal changes nothing
                raise web.HTTPError(429, f"at most {n.max_confirmations_hour} confirmation mails an hour; "
                                         "try again later (nothing changed)")
            instead = n.channels.template_address(self.who.name)
            message = (f"We sent a confirmation link to {own}: check that inbox and open the link (logged in to "
                       f"JupyterHub as {self.who.name}) within 24 hours. Until then your e-mail goes "
                       + (f"to {instead}." if instead else "nowhere."))
        await n.store.put_async(self.who.name, prefs, self.who.groups)
        log.info("%s set notifications %s%s", self.who.name, prefs["channels"], " (confirmation sent)" * bool(message))
        self.send(self.view(message))

    async def delete(self):
        if self.notifier is not None:
            await self.notifier.store.delete_async(self.who.name)
        self.send(self.view())


class ConfirmHandler(_Notifications):
    """The code mailed to a user's own address, brought back with that user's own token."""

    async def post(self):
        body = self.json_body()
        n = self.notifier
        code = body.get("code") if isinstance(body, dict) else None
        if n is None or not await n.store.confirm_async(code, self.who.name):
            raise web.HTTPError(400, "this confirmation code is not valid for you (wrong, expired, already used, or "
                                     "for another address or user); set your address again for a new one")
        address = n.store.get(self.who.name)["email"]
        log.info("%s confirmed their e-mail address", self.who.name)
        self.send(self.view(f"Confirmed: your e-mail notifications now go to {address}."))


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
        hub_url = self.settings.get("hub_url", "")  # all of them in one outbox transaction, off the event loop
        queued = await n.notify_many([cull_event(u, w, hub_url) for u, w in items]) if n else 0
        self.set_status(202)
        self.finish({"queued": queued})


def routes(prefix: str) -> list:
    return [(rf"{prefix}/notifications/?", PreferencesHandler),
            (rf"{prefix}/notifications/confirm/?", ConfirmHandler),
            (rf"{prefix}/{NOTIFY_CULL_PATH}", CullWarningsHandler)]
