"""The hub banner of cull warnings (pure file round trip; the live one is in test_hub_culler.py)."""
from __future__ import annotations

from types import SimpleNamespace

from jupyterhub_gpu.services.culler.banner import Announcement, write_warnings


def test_each_user_sees_only_their_own_warnings_escaped(tmp_path):
    path = tmp_path / "w.json"
    write_warnings(path, {"ana": {"": {"message": "Your <T4> server will be stopped in 5 min"}}, "bo": {}})
    banner = Announcement(path, max_age=0)
    assert banner(SimpleNamespace(name="ana")) == "Your &lt;T4&gt; server will be stopped in 5 min"
    assert banner(SimpleNamespace(name="bo")) == ""
    assert banner(None) == ""  # the login page has no user
    write_warnings(path, {})
    assert banner(SimpleNamespace(name="ana")) == ""


def test_missing_or_broken_file_shows_nothing(tmp_path):
    assert Announcement(tmp_path / "absent.json", max_age=0)(SimpleNamespace(name="ana")) == ""
    (tmp_path / "bad.json").write_text("{not json")
    assert Announcement(tmp_path / "bad.json", max_age=0)(SimpleNamespace(name="ana")) == ""
