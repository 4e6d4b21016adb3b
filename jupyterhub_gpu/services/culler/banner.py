"""Cull warnings shown on the hub's own pages: the culler writes them to a small JSON file, the hub reads it.

Both run in the hub's pod (the culler is a hub-managed service), so a file is the cheapest channel: a
page render reads it at most once per second and makes no HTTP call.
"""
from __future__ import annotations

import html
import json
import os
import time
from pathlib import Path

DEFAULT_FILE = "gpuhub-culler-warnings.json"


def warnings_file() -> Path:
    return Path(os.environ.get("GPUHUB_CULLER_WARNINGS_FILE") or Path.cwd() / DEFAULT_FILE).resolve()


def write_warnings(path: str | Path, warnings: dict[str, dict[str, dict]]) -> None:
    """user → [message, ...], replaced atomically each cycle (an empty file when nobody is warned)."""
    path = Path(path)
    data = {user: [w["message"] for w in servers.values()] for user, servers in warnings.items() if servers}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


class Announcement:
    """`c.JupyterHub.template_vars["announcement"]`: the logged-in user's cull warnings, as a banner."""

    def __init__(self, path: str | Path, max_age: float = 1.0):
        self.path, self.max_age = Path(path), max_age
        self._read_at, self._data = 0.0, {}

    def _warnings(self) -> dict[str, list[str]]:
        if time.monotonic() - self._read_at > self.max_age:
            self._read_at = time.monotonic()
            try:
                self._data = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self._data = {}
        return self._data

    def __call__(self, user) -> str:
        messages = self._warnings().get(getattr(user, "name", None) or "", []) if user is not None else []
        return "<br>".join(html.escape(m) for m in messages)
