"""DevAuthenticator: for `gpuhub dev` and tests only — any name logs in, groups come from a YAML file.

Production hubs use a real authenticator (e.g. OAuthenticator with groups from the identity
provider; see README). Groups matter here because profiles and teams are chosen by group. Anyone
who can reach a hub using it can log in as anyone, so it refuses to load unless the hub (its public
side and its internal API) listens on loopback only.
"""
from __future__ import annotations

import ipaddress
from pathlib import Path
from urllib.parse import urlparse

import yaml
from jupyterhub.auth import Authenticator
from traitlets import Unicode, default


class NotLoopbackError(RuntimeError):
    """The DevAuthenticator was configured on a hub reachable from other machines."""


def _loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def bind_hosts(app) -> dict[str, str]:
    """Where a JupyterHub app listens: its public URL (the proxy) and its internal hub API."""
    hub = urlparse(app.hub_bind_url).hostname if app.hub_bind_url else app.hub_ip
    return {"the public URL (JupyterHub.ip / bind_url)": urlparse(app.bind_url).hostname or "",
            "the hub API (JupyterHub.hub_ip / hub_bind_url)": hub or ""}


class DevAuthenticator(Authenticator):
    """DEV ONLY. Any user name logs in (no password); JupyterHub groups are read from `groups_file`."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        app = self.parent
        if app is None or not hasattr(app, "bind_url"):
            raise NotLoopbackError("DevAuthenticator is for `gpuhub dev` and tests only and loads only in a "
                                   "JupyterHub that listens on loopback")
        exposed = {k: v for k, v in bind_hosts(app).items() if not _loopback(v)}
        if exposed:
            raise NotLoopbackError(
                "DevAuthenticator lets anyone log in as anyone without a password; it is for `gpuhub dev` and "
                "tests only and refuses to run on a hub that listens beyond loopback ("
                + ", ".join(f"{k} listens on {v or 'all interfaces'}" for k, v in exposed.items())
                + "). Use a real authenticator (README: Production authentication).")
        self.log.warning("DevAuthenticator: DEV ONLY, any name logs in without a password (loopback only)")

    groups_file = Unicode(
        "",
        config=True,
        help="""YAML mapping of user name to a list of JupyterHub groups, e.g. `alice: [data-science]`.

        Read at every login, so edits apply on the next login. Users not listed get no groups.
        """,
    )

    @default("manage_groups")
    def _manage_groups_default(self):
        return True

    @default("allow_all")
    def _allow_all_default(self):
        return True

    def groups_for(self, username: str) -> list[str]:
        if not self.groups_file:
            return []
        data = yaml.safe_load(Path(self.groups_file).read_text()) or {}
        return [str(g) for g in data.get(username) or []]

    async def authenticate(self, handler, data):
        name = (data.get("username") or "").strip()
        if not name:
            return None
        name = self.normalize_username(name)  # "Alice" logs in as the hub's "alice" and gets alice's groups
        return {"name": name, "groups": self.groups_for(name)}
