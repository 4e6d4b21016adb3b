"""DevAuthenticator: for `gpuhub dev` and tests only — any name logs in, groups come from a YAML file.

Production hubs use a real authenticator (e.g. OAuthenticator with groups from the identity
provider; see README). Groups matter here because profiles and teams are chosen by group.
"""
from __future__ import annotations

from pathlib import Path

import yaml
from jupyterhub.auth import Authenticator
from traitlets import Unicode, default


class DevAuthenticator(Authenticator):
    """Any user name logs in (no password); JupyterHub groups are read from `groups_file`."""

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
        return {"name": name, "groups": self.groups_for(name)}
