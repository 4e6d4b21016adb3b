"""Delivery to real receivers on this machine: an SMTP server (aiosmtpd) and an HTTP webhook endpoint.
Only the channels a user opted into, for their own events; retried with backoff when a receiver fails
first; a refusal is not retried."""
from __future__ import annotations

from jupyterhub_gpu.contract import FAILED, RUNNING, SUCCEEDED
from jupyterhub_gpu.services.culler.forward import Forwarder, new_warnings
from jupyterhub_gpu.services.notify.events import cull_event, job_events
from jupyterhub_gpu.services.notify.prefs import Channels, PreferenceStore, parse_webhooks
from jupyterhub_gpu.services.notify.send import Notifier, Smtp

from .receivers import SmtpSink, WebhookSink
from .test_events_payloads import status


def notifier(tmp_path, smtp: SmtpSink | None, hooks: WebhookSink, **kw) -> Notifier:
    channels = Channels(email=smtp is not None, email_template="{username}@example.org",
                        webhooks=parse_webhooks({"team-slack": f"slack:{hooks.url}/slack",
                                                 "team-teams": f"teams:{hooks.url}/teams"}))
    store = PreferenceStore(str(tmp_path / "prefs.sqlite"))
    store.put("alice", {"channels": {"email": ["succeeded", "failed", "cull-warning"],
                                     "team-slack": ["succeeded"], "team-teams": ["failed"]}, "email": None}, [])
    store.put("bob", {"channels": {"team-slack": ["admitted"]}, "email": None}, [])
    return Notifier(channels, store, Smtp("127.0.0.1", smtp.port, "none", sender="hub@example.org") if smtp else None,
                    **kw)


async def test_each_opted_in_channel_gets_the_owners_event_once(tmp_path):
    with SmtpSink() as smtp, WebhookSink() as hooks:
        n = notifier(tmp_path, smtp, hooks, backoff=0.01)
        for ev in job_events(status(RUNNING), status(SUCCEEDED)):
            assert await n.notify(ev) == 2  # alice: e-mail and Slack
            assert await n.notify(ev) == 0  # the same event again (a relist): not twice
        for ev in job_events(status(RUNNING, user="bob"), status(SUCCEEDED, user="bob")):
            assert await n.notify(ev) == 0  # bob asked for "admitted" only
        await n.drain()
        await n.close()
    assert n.stats == {"queued": 2, "sent": 2}
    (msg,) = smtp.messages
    assert smtp.envelopes == [("hub@example.org", ["alice@example.org"])]
    assert msg["Subject"] == "[JupyterHub GPU] GPU job gpu-alice-train-ab12cd succeeded"
    assert "The notebook ran to the end." in msg.get_content()
    ((path, body),) = hooks.received
    assert path == "/slack" and body["text"].startswith("GPU job gpu-alice-train-ab12cd succeeded (for alice)")
    assert body["blocks"][0]["type"] == "section"


async def test_a_failing_receiver_is_retried_with_growing_waits(tmp_path):
    with WebhookSink(fail_first=3) as hooks:
        n = notifier(tmp_path, None, hooks, retries=5, backoff=0.1, backoff_max=10)
        (ev,) = job_events(status(RUNNING), status(FAILED, message="a cell of the notebook raised an error"))
        assert await n.notify(ev) == 1  # alice: Teams (no mail server here)
        await n.drain()
        await n.close()
    tries = hooks.attempts["/teams"]
    assert len(tries) == 4 and n.stats == {"queued": 1, "retried": 3, "sent": 1}
    waits = [b - a for a, b in zip(tries, tries[1:])]
    assert waits[0] >= 0.08 and waits[1] >= 0.17 and waits[2] >= 0.35  # 0.1, 0.2, 0.4 s ±10 %
    ((path, body),) = hooks.received
    assert path == "/teams" and body["attachments"][0]["content"]["body"][0]["text"].endswith("failed")


async def test_a_refusal_is_not_retried_and_retries_end(tmp_path):
    with WebhookSink(fail_first=100, fail_status=404) as hooks:
        n = notifier(tmp_path, None, hooks, retries=3, backoff=0.01)
        await n.notify(job_events(status(RUNNING), status(SUCCEEDED))[0])
        await n.drain()
        assert len(hooks.attempts["/slack"]) == 1 and n.stats["failed"] == 1 and n.stats["sent"] == 0
        hooks.fail_status = 500
        await n.notify(job_events(status(RUNNING, name="other"), status(SUCCEEDED, name="other"))[0])
        await n.drain()
        await n.close()
    assert len(hooks.attempts["/slack"]) == 1 + 4 and n.stats["failed"] == 2  # 1 try + 3 retries, then given up


async def test_no_mail_server_answering_is_retried_then_given_up(tmp_path):
    with WebhookSink() as hooks:
        n = notifier(tmp_path, None, hooks, retries=2, backoff=0.01)
        n.smtp, n.channels = Smtp("127.0.0.1", 1, "none", sender="hub@example.org", timeout=2), \
            Channels(email=True, email_template="{username}@example.org", webhooks=n.channels.webhooks)
        ev = cull_event("alice", {"server": "", "profile": "t4-shared", "cull_in_s": 300, "message": "idle"})
        assert await n.notify(ev) == 1
        await n.drain()
        await n.close()
    assert n.stats == {"queued": 1, "retried": 2, "failed": 1}


def test_the_culler_forwards_each_warning_once():
    w = {"alice": {"": {"cull_in_s": 500}}, "bob": {"gpu": {"cull_in_s": 100}}}
    assert new_warnings(w, set()) == w
    assert new_warnings(w, {("alice", "")}) == {"bob": {"gpu": {"cull_in_s": 100}}}
    assert new_warnings(w, {("alice", ""), ("bob", "gpu")}) == {}


async def test_the_culler_posts_new_warnings_once_and_retries_the_next_cycle():
    w = {"alice": {"": {"server": "", "cull_in_s": 500}}}
    with WebhookSink(fail_first=1) as gpu_jobs:
        f = Forwarder(f"{gpu_jobs.url}/services/gpu-jobs/notifications/cull-warnings", token="culler-token")
        assert await f.cycle(w) == 0  # refused: kept for the next cycle
        assert await f.cycle(w) == 1
        assert await f.cycle(w) == 0  # still the same warning: not again
        assert await f.cycle({}) == 0
        assert await f.cycle(w) == 1  # it ended and came back: a new warning
    assert len(gpu_jobs.attempts["/services/gpu-jobs/notifications/cull-warnings"]) == 3
    assert [body for _, body in gpu_jobs.received] == [{"warnings": w}, {"warnings": w}]
    assert gpu_jobs.headers[0]["Authorization"] == "token culler-token"


async def test_a_users_sends_are_rate_limited_per_hour(tmp_path):
    """One user's flood of events (or confirmation requests) stops at the per-user limit; others still get theirs."""
    from jupyterhub_gpu.services.notify.events import Event
    from jupyterhub_gpu.services.notify.prefs import Channels, PreferenceStore
    from jupyterhub_gpu.services.notify.send import Notifier

    store = PreferenceStore(str(tmp_path / "p.sqlite"))
    for user in ("mallory", "bob"):
        store.put(user, {"channels": {"email": ["failed"]}, "email": None}, [])
    now = [0.0]
    n = Notifier(Channels(email=True, email_template="{username}@example.org"), store, None,
                 max_per_user_hour=5, clock=lambda: now[0], retries=0)
    queued = sum([await n.notify(Event("mallory", "failed", f"job-{i}", "t", "x")) for i in range(20)])
    assert queued == 5 and n.stats["rate_limited"] == 15
    assert await n.notify(Event("bob", "failed", "job-1", "t", "x")) == 1
    now[0] += 3601  # an hour later: room again
    assert await n.notify(Event("mallory", "failed", "job-99", "t", "x")) == 1
    await n.close()
