"""The admin's notification settings: from configure(c) to gpu-jobs' command line and environment, into
`Notifications`; no channel set means no notifier (and no file); a bad setting stops the service by name."""
from __future__ import annotations

import json

import pytest
from traitlets.config import Config

from jupyterhub_gpu.config import configure
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.services.jobs.app import configured
from jupyterhub_gpu.services.notify.options import Notifications


def settings(argv: list[str]) -> Notifications:
    return Notifications(parent=configured(argv))


def test_configure_options_reach_the_service(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUHUB_NOTIFY_WEBHOOKS", json.dumps({"ml-team": "teams:https://example.webhook.office.com/x"}))
    monkeypatch.setenv("GPUHUB_SMTP_PASSWORD", "s3cret")
    c = Config()
    configure(c, str(EXAMPLE_PROFILES), options={"gpu-jobs": {
        "Notifications.smtp_host": "smtp.example.org", "Notifications.smtp_from": "hub@example.org",
        "Notifications.email_template": "{username}@example.org",
        "Notifications.preferences_file": str(tmp_path / "n.sqlite")}})
    (jobs,) = [s for s in c.JupyterHub.services if s["name"] == "gpu-jobs"]
    args = jobs["command"][jobs["command"].index("--profiles") + 2:]
    assert "--Notifications.smtp_host=smtp.example.org" in args and not any("s3cret" in a for a in args)
    n = settings(args)
    assert (n.smtp_host, n.smtp_port, n.smtp_security) == ("smtp.example.org", 587, "starttls")
    assert n.smtp_password == "s3cret"
    channels = n.channels()
    assert channels.email and channels.webhooks["ml-team"].kind == "teams"
    assert channels.template_address("alice") == "alice@example.org"
    notifier = n.notifier()
    assert notifier is not None and notifier.smtp.sender == "hub@example.org"
    assert (tmp_path / "n.sqlite").exists()
    notifier.store.close()


def test_no_channel_no_notifier(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUHUB_NOTIFY_WEBHOOKS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert settings([]).notifier() is None
    assert list(tmp_path.iterdir()) == []  # no preferences file either


@pytest.mark.parametrize("argv, env, what", [
    (["--Notifications.smtp_host=smtp.example.org"], None, "smtp_from"),
    ([], "not json", "GPUHUB_NOTIFY_WEBHOOKS"),
    ([], json.dumps({"ml-team": "https://example.webhook.office.com/x"}), "slack:URL"),
    (["--Notifications.webhook_groups=other=ml-research"], json.dumps({"a": "slack:https://h/1"}), "unknown"),
])
def test_bad_settings_stop_the_service_with_their_name(monkeypatch, argv, env, what):
    if env is None:
        monkeypatch.delenv("GPUHUB_NOTIFY_WEBHOOKS", raising=False)
    else:
        monkeypatch.setenv("GPUHUB_NOTIFY_WEBHOOKS", env)
    with pytest.raises(SystemExit, match=what):
        settings(argv).channels()
