"""Notifications end to end: a real hub with gpu-jobs on the dev cluster, a user opts in through the
service's own API, a real job runs, and e-mails arrive at a local SMTP server (aiosmtpd) and webhooks at a
local HTTP receiver (which refuses the first post of each webhook: retried) with Slack's and Teams' shapes.
Nothing for users who did not ask, nor for another user's jobs; only the culler may post cull warnings."""
from __future__ import annotations

import json
import secrets

import pytest
import requests

from jupyterhub_gpu_dev.testing import PARAMETERS_NB, JobsHub, hub_with_agent, wait_until

from .receivers import SmtpSink, WebhookSink

pytestmark = pytest.mark.cluster

KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
GROUPS = {"alice": ["data-science"], "bob": ["data-science"], "admin": ["data-science", "ml-research"]}


@pytest.fixture(scope="module")
def sinks():
    with SmtpSink() as smtp, WebhookSink(fail_first=1) as hooks:
        yield smtp, hooks


@pytest.fixture(scope="module")
def notify_hub(cluster, sinks, tmp_path_factory) -> JobsHub:
    smtp, hooks = sinks
    state = tmp_path_factory.mktemp("notifyhub")
    token, culler_token = secrets.token_hex(16), secrets.token_hex(16)
    webhooks = {"team-slack": f"slack:{hooks.url}/slack", "team-teams": f"teams:{hooks.url}/teams",
                "mlr-only": f"slack:{hooks.url}/mlr"}
    args = ["--Notifications.smtp_host=127.0.0.1", f"--Notifications.smtp_port={smtp.port}",
            "--Notifications.smtp_security=none", "--Notifications.smtp_from=jupyterhub@example.org",
            "--Notifications.email_template={username}@example.org", "--Notifications.hub_url=https://hub.example.org",
            "--Notifications.webhook_groups=mlr-only=ml-research", "--Notifications.backoff=0.2"]
    extra = f'''
c.JupyterHub.load_roles = list(c.JupyterHub.load_roles) + [{{"name": "notify-tests-tokens",
    "scopes": ["tokens", "admin:users", "admin:servers"], "services": ["notify-tests"]}}]
for _s in c.JupyterHub.services:
    if _s["name"] == "gpu-jobs":  # the admin's channels; the webhook URLs through the environment
        _s["command"] = _s["command"] + {args!r}
        _s["environment"] = {{**_s.get("environment", {{}}), "GPUHUB_NOTIFY_WEBHOOKS": {json.dumps(webhooks)!r},
                              "GPUHUB_NOTIFY_DB": {str(state / "notify.sqlite")!r}}}
    if _s["name"] == "gpu-culler":  # a known token, so the test can post as the culler does
        _s["api_token"] = {culler_token!r}
'''
    # the worker's cluster is shared with the files before this one: alice's jobs of another file (still
    # finishing) would count against her per-profile limit here
    cluster.clean("team-ds", timeout=90)
    with hub_with_agent(cluster, state, cluster.profiles, GROUPS, {"notify-tests": token}, extra) as (dev, agent):
        hub = JobsHub(dev.settings.url, token, dev, agent, state, {})
        hub.culler_token = culler_token
        wait_until(lambda: requests.get(f"{hub.url}/services/gpu-jobs/health", timeout=10).status_code == 200, 60,
                   "the gpu-jobs service")
        yield hub
    cluster.clean("team-ds", timeout=90)


def test_opted_in_job_events_arrive_by_mail_and_webhooks(cluster, notify_hub, sinks):
    smtp, hooks = sinks
    hub = notify_hub
    got = hub.call("alice", "GET", "/notifications").json()
    assert got["preferences"] == {"channels": {}, "email": None, "email_confirmed": False}
    assert {c["name"] for c in got["channels"]} == {"email", "team-slack", "team-teams"}  # not mlr-only
    assert next(c for c in got["channels"] if c["name"] == "email")["address"] == "alice@example.org"
    assert "url" not in json.dumps(got["channels"])  # a webhook's URL is the admin's secret
    for body in ({"channels": {"http://169.254.169.254/latest": ["failed"]}}, {"channels": {"mlr-only": ["failed"]}},
                 {"channels": {"email": ["all"]}}, {"webhook_url": "http://127.0.0.1:1/"}):
        r = hub.call("alice", "PUT", "/notifications", json=body)
        assert r.status_code == 400, r.text
    assert hub.call("alice", "PUT", "/notifications", data=b"{" * 5000).status_code == 413
    assert hub.call("alice", "GET", "/notifications").json()["preferences"]["channels"] == {}  # nothing stored
    mine = {"email": ["admitted", "succeeded", "failed", "cull-warning"], "team-slack": ["succeeded"],
            "team-teams": ["succeeded", "failed"]}
    r = hub.call("alice", "PUT", "/notifications", json={"channels": mine})
    assert r.status_code == 200 and r.json()["preferences"]["channels"] == mine, r.text
    # bob wants mail about finished jobs: his own, never alice's
    assert hub.call("bob", "PUT", "/notifications", json={"channels": {"email": ["succeeded"]}}).status_code == 200

    r = hub.submit("alice", notebook={**PARAMETERS_NB, "metadata": KERNEL})
    assert r.status_code == 201, r.text
    name = r.json()["name"]
    done = wait_until(lambda: (s := hub.status("alice", name))["state"] in ("Succeeded", "Failed") and s, 240,
                      "the job to finish")
    assert done["state"] == "Succeeded", done
    wait_until(lambda: len(smtp.messages) >= 2 and len(hooks.received) >= 2, 60, "the e-mails and webhooks")
    subjects = sorted(m["Subject"] for m in smtp.messages)
    assert subjects == [f"[JupyterHub GPU] GPU job {name} started", f"[JupyterHub GPU] GPU job {name} succeeded"]
    assert {tuple(rcpt) for _, rcpt in smtp.envelopes} == {("alice@example.org",)}  # nothing to bob
    body = next(m for m in smtp.messages if m["Subject"].endswith("succeeded")).get_content()
    assert f"https://hub.example.org/hub/user-redirect/lab/tree/gpu-jobs/{name}/train.ipynb" in body
    by_path = dict(hooks.received)
    assert by_path.keys() == {"/slack", "/teams"}
    assert by_path["/slack"]["text"].startswith(f"GPU job {name} succeeded (for alice)")
    card = by_path["/teams"]["attachments"][0]
    assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert card["content"]["body"][0]["text"] == f"GPU job {name} succeeded"
    assert len(hooks.attempts["/slack"]) == 2 and len(hooks.attempts["/teams"]) == 2  # refused once, retried


def test_only_the_culler_posts_cull_warnings(notify_hub, sinks):
    smtp, _ = sinks
    hub = notify_hub
    before = len(smtp.messages)
    warning = {"alice": {"": {"server": "", "profile": "a100-mig-1g10gb", "cull_in_s": 540,
                              "cull_at": "2026-12-01T12:00:00+00:00", "message": "Your server will be stopped."}}}
    url = f"{hub.url}/services/gpu-jobs/notifications/cull-warnings"
    as_alice = requests.post(url, json={"warnings": {"bob": warning["alice"]}}, headers=hub.auth(hub.token("alice")),
                             timeout=30)
    assert as_alice.status_code == 403
    r = requests.post(url, json={"warnings": warning}, headers=hub.auth(hub.culler_token), timeout=30)
    assert r.status_code == 202 and r.json() == {"queued": 1}, r.text
    assert requests.post(url, data=b"[]", headers=hub.auth(hub.culler_token), timeout=30).status_code == 400
    wait_until(lambda: len(smtp.messages) > before, 30, "the cull warning's e-mail")
    (msg,) = smtp.messages[before:]
    assert msg["To"] == "alice@example.org" and msg["Subject"] == \
        "[JupyterHub GPU] Your server will be stopped in about 9 min"
