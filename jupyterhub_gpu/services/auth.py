"""Who is calling gpu-jobs (and the notification endpoints it hosts): the hub's answer for the caller's OWN token,
never a name looked up by URL.

`GET /hub/api/user` with the caller's token returns that token's user with `name`, `groups` and
`admin` (JupyterHub adds the identify scopes on that endpoint for any token) and the token's `scopes`.
So no user-controlled string ever goes into a hub URL, and the service's own token needs no hub
scopes (`contract.JOBS_SERVICE_SCOPES`).

The lookup is asynchronous (HubAuth's `sync=False` path; the synchronous `get_current_user()` of
`HubAuthenticated` blocks the event loop on every unknown token), concurrent lookups of one token
share one request, and answers are kept in two bounded TTL caches, so a flood of random tokens can
neither stall other users nor evict their cached identities. Tokens come from the Authorization
header only: no `?token=` (it ends up in proxy and access logs) and no cookies (no CSRF surface).
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass

from cachetools import TTLCache
from jupyterhub.services.auth import HubAuth, check_scopes
from tornado import web

log = logging.getLogger("gpuhub.jobs")

#: `Authorization: token <t>` or `Bearer <t>`; a token is printable ASCII without spaces.
HEADER = re.compile(r"(?:token|bearer) +([\x21-\x7e]{1,512})", re.IGNORECASE)


@dataclass(frozen=True)
class Caller:
    name: str
    groups: tuple[str, ...]
    admin: bool


def caller_from_model(model: dict | None, required_scopes: set[str]) -> Caller | None:
    """The caller if the hub's model is a user whose token grants one of `required_scopes` (pure).
    Anything missing or of the wrong type fails closed: no user, no groups, not an admin."""
    if not isinstance(model, dict) or model.get("kind", "user") != "user" or not isinstance(model.get("name"), str):
        return None
    scopes = model.get("scopes")
    try:
        if required_scopes and not check_scopes(required_scopes, {s for s in scopes if isinstance(s, str)}
                                                if isinstance(scopes, list) else set()):
            return None
    except ValueError:  # a scope JupyterHub itself cannot parse
        return None
    groups = model.get("groups")
    return Caller(name=model["name"], groups=tuple(g for g in groups if isinstance(g, str))
                  if isinstance(groups, list) else (), admin=model.get("admin") is True)


class TokenAuth:
    """Token → `Caller` (or None), asked of the hub without blocking the loop; bounded caches."""

    def __init__(self, hub_auth: HubAuth, required_scopes: set[str], ttl: float = 30,
                 size: int = 4096, unknown_size: int = 1024):
        self.hub_auth, self.required_scopes = hub_auth, set(required_scopes)
        self.known: TTLCache = TTLCache(size, ttl)             # valid tokens
        self.unknown: TTLCache = TTLCache(unknown_size, ttl)   # refused tokens: random ones cannot evict valid ones
        self._inflight: dict[str, asyncio.Future] = {}
        self.hub_requests = 0

    @staticmethod
    def token_from(authorization: str | None) -> str | None:
        m = HEADER.fullmatch((authorization or "").strip())
        return m.group(1) if m else None

    async def caller(self, authorization: str | None) -> Caller | None:
        token = self.token_from(authorization)
        if token is None:
            return None
        key = hashlib.sha256(token.encode()).hexdigest()
        if key in self.known:
            return self.known[key]
        if key in self.unknown:
            return None
        if key not in self._inflight:
            self._inflight[key] = asyncio.ensure_future(self._lookup(key, token))
            self._inflight[key].add_done_callback(lambda _: self._inflight.pop(key, None))
        return await asyncio.shield(self._inflight[key])

    async def _lookup(self, key: str, token: str) -> Caller | None:
        self.hub_requests += 1
        try:
            model = await self.hub_auth.user_for_token(token, use_cache=False, sync=False)
        except web.HTTPError as e:  # HubAuth: the hub is unreachable or answered 5xx
            log.warning("cannot check a token with the hub: %s", e)
            raise web.HTTPError(503, "cannot check your token with JupyterHub just now; try again shortly") from None
        found = caller_from_model(model, self.required_scopes)
        (self.known if found else self.unknown)[key] = found
        return found
