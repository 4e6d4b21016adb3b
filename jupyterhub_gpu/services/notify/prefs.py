"""Which channels exist (the admin's) and which events each user wants on them (the user's).

Users choose events per channel, never a destination: webhook URLs come from the admin only (a user
cannot make the service POST anywhere), and an e-mail address is the admin's template filled with the
user's name, or one the user gives in a domain the admin allows. Preferences are validated whole
(nothing stored on a bad request) and kept in a small SQLite file, so they survive restarts.
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import re
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping
from urllib.parse import urlparse

from jupyterhub_gpu.contract import NOTIFY_EMAIL, NOTIFY_EVENTS
from jupyterhub_gpu.services.notify.payloads import WEBHOOK_KINDS
from jupyterhub_gpu.services.sqlite_db import open_wal

CHANNEL_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
#: A plain address: no quoting, comments or IP literals (what a template or a user may produce), and no
#: '%' (`bob%evil.org@example.org` is relayed to bob@evil.org by mail servers that honour the % hack), and
#: no '+' (`alice+x@example.org` is alice's mailbox: a hub user named `alice+x` must not get alice's mail).
EMAIL = re.compile(r"[A-Za-z0-9._-]{1,64}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}")
MAX_BODY = 4096
#: What new_confirmation makes (secrets.token_urlsafe(32): 43 characters); anything else is refused unread.
CODE = re.compile(r"[A-Za-z0-9_-]{43}")
SCHEMA = """
CREATE TABLE IF NOT EXISTS preferences (user TEXT PRIMARY KEY, data TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS confirmations (code TEXT PRIMARY KEY, user TEXT NOT NULL, address TEXT NOT NULL,
    expires REAL NOT NULL);
"""


class PreferencesError(ValueError):
    """A bad preferences request: the message says what to change (a 400)."""


@dataclass(frozen=True)
class Webhook:
    name: str
    kind: str
    url: str
    groups: tuple[str, ...] = ()  # empty: everyone may use it

    def allowed(self, groups: tuple[str, ...] | list[str]) -> bool:
        return not self.groups or bool(set(self.groups) & set(groups))


def parse_webhooks(spec: Mapping[str, str], groups: Mapping[str, str] | None = None) -> dict[str, Webhook]:
    """Admin settings → webhooks: `{"ml-team": "slack:https://hooks.slack.com/..."}` and, optionally,
    `{"ml-team": "ml-research,admins"}` (who may use it). Raises ValueError naming the bad entry."""
    out = {}
    for name, value in spec.items():
        kind, _, url = str(value).partition(":")
        if not CHANNEL_NAME.fullmatch(name) or name == NOTIFY_EMAIL:
            raise ValueError(f"webhook name {name!r}: lowercase letters, digits and '-', not {NOTIFY_EMAIL!r}")
        if kind not in WEBHOOK_KINDS:
            raise ValueError(f"webhook {name!r}: write it as 'slack:URL' or 'teams:URL'")
        parsed = urlparse(url)
        if parsed.scheme not in ("https", "http") or not parsed.hostname:
            raise ValueError(f"webhook {name!r}: not an http(s) URL")
        allowed = tuple(g.strip() for g in str((groups or {}).get(name, "")).split(",") if g.strip())
        out[name] = Webhook(name, kind, url, allowed)
    unknown = set(groups or {}) - set(out)
    if unknown:
        raise ValueError(f"webhook groups for unknown webhooks: {', '.join(sorted(unknown))}")
    return out


@dataclass(frozen=True)
class Channels:
    """What the admin turned on: e-mail (with the SMTP server set) and named webhooks."""
    email: bool = False
    email_template: str = ""
    email_domains: tuple[str, ...] = ()
    webhooks: dict[str, Webhook] = field(default_factory=dict)

    def template_address(self, user: str) -> str | None:
        if not self.email_template:
            return None
        address = self.email_template.replace("{username}", user)
        return address if EMAIL.fullmatch(address) else None

    def address(self, user: str, prefs: Mapping[str, Any] | None) -> str | None:
        """Where `user`'s e-mail goes: their own allowed address once they confirmed it (through the link sent
        to it: `email_confirmed`), else the template's (the identity provider's name), else nowhere."""
        if not self.email:
            return None
        own = (prefs or {}).get("email")
        if isinstance(own, str) and self.domain_allowed(own) and (prefs or {}).get("email_confirmed") == own:
            return own
        return self.template_address(user)

    def domain_allowed(self, address: str) -> bool:
        domain = address.rpartition("@")[2].lower()
        return bool(EMAIL.fullmatch(address)) and domain in {d.lower() for d in self.email_domains}

    def usable(self, name: str, groups: tuple[str, ...] | list[str]) -> bool:
        if name == NOTIFY_EMAIL:
            return self.email
        hook = self.webhooks.get(name)
        return hook is not None and hook.allowed(groups)

    def describe(self, user: str, groups: tuple[str, ...] | list[str], prefs: Mapping[str, Any] | None) -> list[dict]:
        """The channels this user may choose, for the API (never a webhook's URL)."""
        out = []
        if self.email:
            out.append({"name": NOTIFY_EMAIL, "kind": "email", "address": self.address(user, prefs),
                        "own_address_domains": list(self.email_domains)})
        out += [{"name": h.name, "kind": h.kind} for h in self.webhooks.values() if h.allowed(groups)]
        return out


def validate(body: Any, user: str, groups: tuple[str, ...] | list[str], channels: Channels) -> dict:
    """A PUT body → the preferences to store: `{"channels": {name: [events]}, "email": address or None}`."""
    if not isinstance(body, dict) or set(body) - {"channels", "email"}:
        raise PreferencesError('send {"channels": {"<channel>": ["<event>", ...]}, "email": "<address>" (optional)}')
    chosen = body.get("channels", {})
    if not isinstance(chosen, dict) or len(chosen) > 1 + len(channels.webhooks):
        raise PreferencesError("channels: an object of channel name → list of events")
    out: dict[str, list[str]] = {}
    for name, events in chosen.items():
        if not isinstance(name, str) or not channels.usable(name, groups):
            raise PreferencesError(f"no channel {str(name)[:40]!r} for you; GET /notifications lists yours")
        if not isinstance(events, list) or len(events) > len(NOTIFY_EVENTS) or \
                not all(isinstance(e, str) and e in NOTIFY_EVENTS for e in events):
            raise PreferencesError(f"channel {name!r}: a list of events, from {', '.join(NOTIFY_EVENTS)}")
        if events:
            out[name] = [e for e in NOTIFY_EVENTS if e in events]
    email = body.get("email")
    if email is not None:
        if not isinstance(email, str) or len(email) > 254 or not EMAIL.fullmatch(email):
            raise PreferencesError("email: a plain address (name@example.org)")
        if not channels.domain_allowed(email):
            raise PreferencesError("email: your address comes from the hub" if not channels.email_domains else
                                   f"email: an address in {', '.join(channels.email_domains)}")
    prefs = {"channels": out, "email": email}
    if NOTIFY_EMAIL in out and channels.address(user, prefs) is None and email is None:
        raise PreferencesError("email: the hub knows no address for you; give one (email)")  # (then confirm it)
    return prefs


class PreferenceStore:
    """user → preferences (with the user's groups when saved), in SQLite; reads come from memory. Requests write
    through the `*_async` methods: one writer thread, so a save waits behind the outbox's transactions there and
    never on the event loop (issue 50 item 5: 184 ms behind 2,000 cull warnings, 434 ms behind 20,000 statuses)."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuhub-prefs-writer")
        self._db = open_wal(path, SCHEMA)
        self._mem = {u: json.loads(d) for u, d in self._db.execute("SELECT user, data FROM preferences")}

    def get(self, user: str) -> dict | None:
        return self._mem.get(user)

    def put(self, user: str, prefs: dict, groups: tuple[str, ...] | list[str]) -> dict:
        """Store `prefs`; a confirmation stays only while the address is the same one."""
        confirmed = prefs.get("email_confirmed") or (self._mem.get(user) or {}).get("email_confirmed")
        saved = {**prefs, "groups": list(groups)}
        saved.pop("email_confirmed", None)
        if confirmed and confirmed == prefs.get("email"):
            saved["email_confirmed"] = confirmed
        with self._lock:
            self._db.execute("INSERT INTO preferences (user, data, updated) VALUES (?, ?, ?) ON CONFLICT(user) "
                             "DO UPDATE SET data = excluded.data, updated = excluded.updated",
                             (user, json.dumps(saved), time.time()))
            self._mem[user] = saved
        return saved

    def new_confirmation(self, user: str, address: str, ttl: float = 86400.0) -> str:
        """A one-time code that confirms `address` for `user` when it comes back (the link mailed to it);
        only its hash is kept."""
        code = secrets.token_urlsafe(32)
        with self._lock:
            self._db.execute("DELETE FROM confirmations WHERE user = ? OR expires < ?", (user, time.time()))
            self._db.execute("INSERT INTO confirmations VALUES (?, ?, ?, ?)",
                             (hashlib.sha256(code.encode()).hexdigest(), user, address, time.time() + ttl))
        return code

    def confirm(self, code: object, user: str) -> bool:
        """Confirm `user`'s address with `code` (the link mailed to it): only their own code, used once, before
        it expires, while they still want that address. Anything else (another user's code, a wrong one, not a
        string) changes nothing and is False; another user's code stays usable by its owner."""
        if not isinstance(code, str) or not CODE.fullmatch(code):
            return False
        digest = hashlib.sha256(code.encode()).hexdigest()
        with self._lock:
            row = self._db.execute("SELECT user, address, expires FROM confirmations WHERE code = ?",
                                   (digest,)).fetchone()
            if row is None or row[0] != user:
                return False
            self._db.execute("DELETE FROM confirmations WHERE code = ?", (digest,))
        _, address, expires = row
        prefs = self._mem.get(user)
        if expires < time.time() or not prefs or prefs.get("email") != address:
            return False
        self.put(user, {**prefs, "email_confirmed": address}, prefs.get("groups") or [])
        return True

    def delete(self, user: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM preferences WHERE user = ?", (user,))
            self._mem.pop(user, None)

    def wants(self, user: str, kind: str, channels: Channels) -> list[str]:
        """The channels `user` asked for `kind` on that still exist for them (the admin may have removed one)."""
        prefs = self._mem.get(user)
        if not prefs:
            return []
        groups = prefs.get("groups") or []
        return [name for name, kinds in (prefs.get("channels") or {}).items()
                if kind in kinds and channels.usable(name, groups)]

    async def _written(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._writer, functools.partial(fn, *args))

    async def put_async(self, user: str, prefs: dict, groups: tuple[str, ...] | list[str]) -> dict:
        return await self._written(self.put, user, prefs, groups)

    async def new_confirmation_async(self, user: str, address: str) -> str:
        return await self._written(self.new_confirmation, user, address)

    async def confirm_async(self, code: object, user: str) -> bool:
        return await self._written(self.confirm, code, user)

    async def delete_async(self, user: str) -> None:
        await self._written(self.delete, user)

    def close(self) -> None:
        self._writer.shutdown(wait=True)
        self._db.close()
