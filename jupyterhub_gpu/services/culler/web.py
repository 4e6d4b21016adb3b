"""The culler's small web server, under its hub prefix (`/services/gpu-culler/`): each user's warnings,
Prometheus metrics, health. The culler itself is in service.py; this module knows only what it reads of it
(`CullerState`), so service.py imports web.py and not the other way round."""
from __future__ import annotations

import json
import os
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from tornado import web


class _HasRegistry(Protocol):
    registry: CollectorRegistry


class _HasSeconds(Protocol):
    seconds: float


class CullerState(Protocol):
    """What the web server reads of the culler (service.GPUCuller): its hub API URL, its last cycle's
    warnings, its recent culls, whether it runs dry, its metrics and its last cycle."""

    url: str
    warnings: dict[str, dict[str, dict[str, Any]]]
    culled: dict[str, list[dict[str, Any]]]
    dry_run: bool
    metrics: _HasRegistry
    last_cycle: _HasSeconds | None


def make_app(culler: CullerState) -> web.Application:
    from jupyterhub.services.auth import HubAuth

    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpu-culler/")
    hub_auth = HubAuth(api_token=os.environ.get("JUPYTERHUB_API_TOKEN", ""), api_url=culler.url,
                       cache_max_age=60)
    args = {"culler": culler, "hub_auth": hub_auth}
    return web.Application([
        (prefix + r"warnings/([^/]+)/?", WarningsHandler, args),
        (prefix + r"warnings/?", WarningsHandler, args),
        (prefix + r"metrics", MetricsHandler, args),
        (prefix + r"health", HealthHandler, args),
    ])


class _Base(web.RequestHandler):
    def initialize(self, culler: CullerState, hub_auth) -> None:
        self.culler = culler
        self.hub_auth = hub_auth

    async def requester(self) -> dict | None:
        """The caller's hub model, from the Authorization header only (a token in a URL ends up in logs)."""
        header = self.request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() not in ("token", "bearer") or not token.strip():
            return None
        return await self.hub_auth.user_for_token(token.strip(), sync=False)


class WarningsHandler(_Base):
    async def get(self, user: str | None = None):
        who = await self.requester()
        if who is None:
            raise web.HTTPError(401, "send your hub token: Authorization: token <token>")
        if who.get("kind", "user") != "user":
            raise web.HTTPError(403)
        if user is None and not who.get("admin"):
            raise web.HTTPError(403, "only admins may list everyone's warnings")
        if user is not None and user != who.get("name") and not who.get("admin"):
            raise web.HTTPError(403, "you may only read your own warnings")
        c = self.culler
        if user is None:
            body = {"warnings": c.warnings, "culled": c.culled}
        else:
            body = {"user": user, "warnings": list(c.warnings.get(user, {}).values()),
                    "culled": c.culled.get(user, []), "dry_run": c.dry_run}
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))


class MetricsHandler(_Base):
    def get(self):
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(generate_latest(self.culler.metrics.registry))


class HealthHandler(_Base):
    def get(self):
        self.finish({"ok": True, "last_cycle_seconds": self.culler.last_cycle.seconds
                     if self.culler.last_cycle else None})
