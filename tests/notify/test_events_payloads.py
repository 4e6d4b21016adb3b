"""Notifications, pure parts: which job changes are events, the e-mail / Slack / Teams bodies, the users'
choices (validated whole; channels and destinations the admin's), opt-in filtering and the backoff."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.contract import ADMITTED, FAILED, JOB_STATES, QUEUED, RESUMED, RUNNING, SUCCEEDED
from jupyterhub_gpu.services.notify.events import cull_event, job_events, job_kinds
from jupyterhub_gpu.services.notify.payloads import email_message, slack_payload, teams_payload, webhook_payload
from jupyterhub_gpu.services.notify.prefs import Channels, PreferencesError, PreferenceStore, parse_webhooks, validate
from jupyterhub_gpu.services.notify.send import backoff_delays


def status(state, preempted=0, user="alice", **kw):
    return {"name": "gpu-alice-train-ab12cd", "namespace": "team-ds", "user": user, "notebook": "work/train.ipynb",
            "profile": "a100-mig-1g10gb", "state": state, "preempted": preempted, "message": "",
            "cluster_queue": "team-data-science", **kw}


@pytest.mark.parametrize("before, after, kinds", [
    (None, status(QUEUED), []),
    (status(QUEUED), status(ADMITTED), ["admitted"]),
    (None, status(RUNNING), ["admitted"]),
    (status(ADMITTED), status(RUNNING), []),
    (status(RUNNING), status(QUEUED, preempted=1), ["preempted"]),
    (status(QUEUED, preempted=1), status(RESUMED, preempted=1), ["resumed"]),  # not "admitted" again
    (status(RUNNING), status(RESUMED, preempted=1), ["preempted", "resumed"]),  # both between two looks
    (status(RUNNING), status(SUCCEEDED), ["succeeded"]),
    (status(QUEUED), status(FAILED, message="the job ran past its timeout"), ["failed"]),
    (status(SUCCEEDED), status(SUCCEEDED), []),
    (status(FAILED), status(FAILED, preempted=3), []),  # a finished job is never reported again
    # seen only after the fact (gpu-jobs away meanwhile): its first admission is still sent, once
    (status(QUEUED), status(QUEUED, preempted=1), ["admitted", "preempted"]),
    (status(QUEUED), status(RESUMED, preempted=1), ["admitted", "preempted", "resumed"]),
    (status(QUEUED), status(SUCCEEDED), ["admitted", "succeeded"]),
    (None, status(SUCCEEDED), ["admitted", "succeeded"]),
])
def test_job_kinds(before, after, kinds):
    assert job_kinds(before, after) == kinds


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(JOB_STATES), st.integers(0, 3), st.sampled_from(JOB_STATES), st.integers(0, 3))
def test_job_kinds_at_most_one_final_and_never_after_the_end(s1, p1, s2, p2):
    kinds = job_kinds(status(s1, p1), status(s2, max(p1, p2)))
    assert sum(k in ("succeeded", "failed") for k in kinds) <= (1 if s2 in (SUCCEEDED, FAILED) else 0)
    if s1 in (SUCCEEDED, FAILED):
        assert kinds == []


def test_events_are_the_owners_with_a_link_to_the_output():
    (ev,) = job_events(status(RUNNING), status(SUCCEEDED), "https://hub.example.org/")
    assert ev.user == "alice" and ev.kind == "succeeded" and ev.title == "GPU job gpu-alice-train-ab12cd succeeded"
    assert ev.link == "https://hub.example.org/hub/user-redirect/lab/tree/gpu-jobs/gpu-alice-train-ab12cd/train.ipynb"
    assert ("Output", "~/gpu-jobs/gpu-alice-train-ab12cd/train.ipynb") in ev.facts
    assert job_events(None, status(SUCCEEDED, user=None)) == []  # a job without an owner notifies nobody
    assert job_events(status(RUNNING), status(SUCCEEDED))[0].link is None  # no hub URL set: no link


def test_email_is_plain_text_with_the_facts_and_no_header_injection():
    ev = job_events(status(RUNNING), status(FAILED, message="a cell raised\r\nBcc: victim@example.org"),
                    "https://hub.example.org")[0]
    msg = email_message(ev, "alice@example.org", "hub@example.org")
    assert msg["Subject"] == "[JupyterHub GPU] GPU job gpu-alice-train-ab12cd failed"
    assert msg["To"] == "alice@example.org" and msg["Bcc"] is None and msg["Auto-Submitted"] == "auto-generated"
    assert msg.get_content_type() == "text/plain"
    body = msg.get_content()
    assert "It stopped: a cell raised Bcc: victim@example.org." in body  # folded into one line of text
    assert "Open the output notebook: https://hub.example.org/hub/user-redirect/lab/tree/gpu-jobs/" in body


def test_slack_payload_shape_and_escaping():
    ev = cull_event("bob", {"server": "", "profile": "t4-shared", "cull_in_s": 540, "message": "idle <b>&</b>",
                            "cull_at": "2026-12-01T11:00:00+00:00"}, "https://hub.example.org")
    p = slack_payload(ev)
    assert p["text"].startswith("Your server will be stopped in about 9 min (for bob)")
    assert [b["type"] for b in p["blocks"]] == ["section", "section", "context"]
    assert "idle &lt;b&gt;&amp;&lt;/b&gt;" in p["blocks"][0]["text"]["text"]
    assert p["blocks"][2]["elements"][0]["text"] == "<https://hub.example.org/hub/home|Open JupyterHub>"
    assert {"type": "mrkdwn", "text": "*Profile*\nt4-shared"} in p["blocks"][1]["fields"]
    json.dumps(p)


def test_teams_payload_is_one_adaptive_card():
    ev = job_events(status(RUNNING), status(SUCCEEDED), "https://hub.example.org")[0]
    p = teams_payload(ev)
    assert p["type"] == "message" and len(p["attachments"]) == 1
    att = p["attachments"][0]
    assert att["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = att["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    assert card["body"][0]["text"] == "GPU job gpu-alice-train-ab12cd succeeded"
    facts = [[i["text"] for i in b["inlines"]] for b in card["body"][2:]]  # plain TextRuns (security.md)
    assert ["Profile: ", "a100-mig-1g10gb"] in facts
    assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open the output notebook", "url": ev.link}]
    with pytest.raises(ValueError):
        webhook_payload("discord", ev)


HOOKS = parse_webhooks({"ml-team": "teams:https://example.webhook.office.com/x?sig=a=b", "all": "slack:https://h/1"},
                       {"ml-team": "ml-research, admins"})
CHANNELS = Channels(email=True, email_template="{username}@example.org", email_domains=("example.org",),
                    webhooks=HOOKS)


def test_webhooks_are_the_admins_and_checked():
    assert HOOKS["ml-team"].url == "https://example.webhook.office.com/x?sig=a=b" and HOOKS["ml-team"].kind == "teams"
    assert HOOKS["ml-team"].groups == ("ml-research", "admins") and HOOKS["all"].groups == ()
    for bad in ({"email": "slack:https://h"}, {"x": "https://h"}, {"x": "slack:ftp://h"},
                {"Bad Name": "slack:https://h"}):
        with pytest.raises(ValueError):
            parse_webhooks(bad)
    with pytest.raises(ValueError, match="unknown webhooks"):
        parse_webhooks({"a": "slack:https://h"}, {"b": "x"})


def test_validate_keeps_only_known_channels_and_events():
    prefs = validate({"channels": {"email": ["failed", "succeeded", "failed"], "all": []}}, "alice", ["ds"], CHANNELS)
    assert prefs == {"channels": {"email": ["succeeded", "failed"]}, "email": None}
    assert CHANNELS.address("alice", prefs) == "alice@example.org"
    own = validate({"channels": {"email": ["admitted"]}, "email": "Alice.W@Example.org"}, "alice", [], CHANNELS)
    assert CHANNELS.address("alice", own) == "alice@example.org"  # not confirmed yet: the template's
    assert CHANNELS.address("alice", {**own, "email_confirmed": "Alice.W@Example.org"}) == "Alice.W@Example.org"
    # a team's webhook only for its groups; a destination never from the user
    assert validate({"channels": {"ml-team": ["failed"]}}, "rita", ["ml-research"], CHANNELS)["channels"] == \
        {"ml-team": ["failed"]}
    bad = [{"channels": {"ml-team": ["failed"]}}, {"channels": {"https://evil.example/hook": ["failed"]}},
           {"channels": {"email": ["everything"]}}, {"channels": {"email": "failed"}}, {"webhook": "https://x"},
           {"channels": {"email": ["failed"]}, "email": "me@gmail.com"}, {"email": "not an address"},
           {"email": "a@b.org\r\nBcc: x@y.org"}, [], "x", None, {"channels": {str(i): [] for i in range(10)}}]
    for body in bad:
        with pytest.raises(PreferencesError):
            validate(body, "alice", ["data-science"], CHANNELS)


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=30),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                    max_leaves=20))
def test_validate_any_json_is_a_clear_refusal_or_known_channels_only(body):
    try:
        prefs = validate(body, "alice", [], CHANNELS)
    except PreferencesError:
        return
    assert set(prefs["channels"]) <= {"email", "all"}


def test_template_address_must_be_a_plain_address():
    t = Channels(email=True, email_template="{username}@example.org")
    assert t.template_address("alice") == "alice@example.org"
    assert t.template_address("a b,evil@x.org") is None  # a hub name that would make two recipients
    assert Channels(email=False, email_template="{username}@example.org").address("alice", None) is None


def test_store_persists_and_filters_by_opt_in(tmp_path):
    path = str(tmp_path / "prefs.sqlite")
    store = PreferenceStore(path)
    store.put("alice", {"channels": {"email": ["failed"], "all": ["succeeded"]}, "email": None}, ["data-science"])
    store.put("rita", {"channels": {"ml-team": ["failed"]}, "email": None}, ["ml-research"])
    store.close()
    store = PreferenceStore(path)  # a restart
    assert store.wants("alice", "failed", CHANNELS) == ["email"]
    assert store.wants("alice", "succeeded", CHANNELS) == ["all"]
    assert store.wants("alice", "admitted", CHANNELS) == []
    assert store.wants("bob", "failed", CHANNELS) == []  # never opted in
    assert store.wants("rita", "failed", CHANNELS) == ["ml-team"]
    # the admin removed the webhook: not sent there any more
    assert store.wants("rita", "failed", Channels(email=True, webhooks={})) == []
    store.delete("alice")
    assert store.wants("alice", "failed", CHANNELS) == [] and PreferenceStore(path).get("alice") is None


def test_backoff_doubles_up_to_the_cap_with_bounded_jitter():
    assert backoff_delays(5, 2.0, 10.0, jitter=0) == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff_delays(0, 2.0, 10.0) == []
    spread = backoff_delays(3, 1.0, 100.0, jitter=0.1, rand=lambda: 1.0)
    assert spread == pytest.approx([1.1, 2.2, 4.4])


def test_only_the_cullers_token_model_may_post_warnings():
    from jupyterhub_gpu.services.notify.web import _is_culler

    culler = {"kind": "service", "name": "gpu-culler", "scopes": ["access:services!service=gpu-jobs", "list:users"]}
    assert _is_culler(culler)
    for model in (None, [], {**culler, "kind": "user"}, {**culler, "name": "gpu-jobs"}, {**culler, "scopes": []},
                  {**culler, "scopes": "access:services!service=gpu-jobs"}, {**culler, "scopes": ["!!bad!!"]},
                  {**culler, "scopes": ["access:services!service=other"]}):
        assert not _is_culler(model)


def test_an_odd_warning_still_makes_a_message():
    ev = cull_event("alice", {"cull_in_s": "soon", "server": {"x": 1}, "message": None})
    assert ev.title == "Your server will be stopped in about 1 min" and ev.kind == "cull-warning"


def test_an_own_address_is_used_only_after_its_link_came_back_and_tags_are_refused(tmp_path):
    """`all-staff@example.org` given as one's own address: nothing goes there until someone with that mailbox
    brings the mailed code back; a code works once, for that address only; `+` tags never make an address."""
    store = PreferenceStore(str(tmp_path / "p.sqlite"))
    prefs = validate({"channels": {"email": ["failed"]}, "email": "all-staff@example.org"}, "mallory", [], CHANNELS)
    store.put("mallory", prefs, [])
    assert CHANNELS.address("mallory", store.get("mallory")) == "mallory@example.org"
    code = store.new_confirmation("mallory", "all-staff@example.org")
    assert not store.confirm("wrong", "mallory") and not store.confirm(code, "bob")  # nor someone else's
    assert store.confirm(code, "mallory")  # another user's try did not use it up
    assert CHANNELS.address("mallory", store.get("mallory")) == "all-staff@example.org"
    assert not store.confirm(code, "mallory")  # once
    store.put("mallory", {**prefs, "email": "other@example.org"}, [])  # a new address: confirmed again first
    assert CHANNELS.address("mallory", store.get("mallory")) == "mallory@example.org"
    stale = store.new_confirmation("mallory", "old@example.org")  # the user wants another address now
    assert not store.confirm(stale, "mallory")
    for tagged in ("alice+x@example.org", "a+@example.org"):
        with pytest.raises(PreferencesError):
            validate({"email": tagged}, "bob", [], CHANNELS)
    assert Channels(email=True, email_template="{username}@example.org").address("alice+x", None) is None
