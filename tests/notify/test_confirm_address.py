"""A user's own e-mail address is used only after the code mailed to it came back with that user's token
(finding 4 of issue 25). The real gpu-jobs app (`make_app`) on a real HTTP server, in a thread with its own
event loop; a real HTTP hub API on this machine answering `GET /hub/api/user` for the callers' tokens; a real
SMTP server (aiosmtpd) receiving the confirmation mails and the job events (tests/notify/jobs_app.py)."""
from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .jobs_app import Service
from .receivers import SmtpSink


@pytest.fixture
def service(tmp_path):
    with SmtpSink() as smtp, Service(tmp_path, smtp) as svc:
        yield svc


def _own(svc: Service, token: str) -> dict:
    r = svc.call("GET", token)
    assert r.status_code == 200, r.text
    return r.json()


WANT_OWN = {"channels": {"email": ["failed"]}, "email": "all-staff@example.org"}


def test_an_own_address_gets_mail_only_after_its_mailed_code_came_back_with_the_users_token(service):
    """alice sets all-staff@: a confirmation link goes there (and only that), her job's mail still goes to her
    template address; bob holding her code is refused and changes nothing; her own token with it confirms,
    and from then on her job's mail goes to the address; the code works once."""
    r = service.call("PUT", "tok-alice", WANT_OWN)
    assert r.status_code == 200, r.text
    assert "check that inbox" in r.json()["message"] and "alice@example.org" in r.json()["message"]
    assert r.json()["preferences"]["email_confirmed"] is False
    code, link = service.mailed_code("all-staff@example.org")
    assert service.smtp.envelopes == [("hub@example.org", ["all-staff@example.org"])]
    assert urlparse(link).path == "/hub/user-redirect/gpuhub/confirm-email" and parse_qs(urlparse(link).query) == \
        {"code": [code]}
    service.notify("alice", "gpu-alice-one")
    assert service.smtp.envelopes[-1] == ("hub@example.org", ["alice@example.org"])  # not confirmed: the template's

    theirs = service.confirm("tok-bob", code)  # another user holding alice's code
    assert theirs.status_code == 400 and "not valid for you" in theirs.json()["message"], theirs.text
    assert _own(service, "tok-alice")["preferences"]["email_confirmed"] is False
    assert _own(service, "tok-bob")["preferences"]["email"] is None

    ok = service.confirm("tok-alice", code)  # bob's try did not use it up
    assert ok.status_code == 200 and ok.json()["preferences"]["email_confirmed"] is True, ok.text
    assert "all-staff@example.org" in ok.json()["message"]
    assert service.confirm("tok-alice", code).status_code == 400  # once
    service.notify("alice", "gpu-alice-two")
    assert service.smtp.envelopes[-1] == ("hub@example.org", ["all-staff@example.org"])

    again = service.call("PUT", "tok-alice", WANT_OWN)  # the same, confirmed address: no new mail
    assert again.status_code == 200 and "message" not in again.json()
    mails = len(service.smtp.messages)
    service.drain()
    assert len(service.smtp.messages) == mails


def test_confirmation_mails_are_rate_limited_and_a_refusal_changes_nothing(service):
    for i in range(3):
        r = service.call("PUT", "tok-carol", {"channels": {"email": ["failed"]}, "email": f"list{i}@example.org"})
        assert r.status_code == 200, r.text
    fourth = service.call("PUT", "tok-carol", {"channels": {"email": ["failed"]}, "email": "list9@example.org"})
    assert fourth.status_code == 429 and "at most 3 confirmation mails an hour" in fourth.json()["message"]
    assert _own(service, "tok-carol")["preferences"]["email"] == "list2@example.org"  # the 429 stored nothing
    service.drain()
    assert sorted(to for _, (to,) in service.smtp.envelopes) == [f"list{i}@example.org" for i in range(3)]
    code, _ = service.mailed_code("list0@example.org")  # an older address's code: void now
    assert service.confirm("tok-carol", code).status_code == 400
    assert service.notifier.stats["rate_limited"] == 1


def test_without_a_template_an_own_address_is_chosen_first_and_used_once_confirmed(service):
    service.notifier.channels = type(service.notifier.channels)(email=True, email_domains=("example.org",))
    r = service.call("PUT", "tok-bob", {"channels": {"email": ["failed"]}})
    assert r.status_code == 400 and "the hub knows no address for you" in r.json()["message"]
    r = service.call("PUT", "tok-bob", {"channels": {"email": ["failed"]}, "email": "bob.b@example.org"})
    assert r.status_code == 200 and r.json()["message"].endswith("Until then your e-mail goes nowhere."), r.text
    service.notify("bob", "gpu-bob-one")
    assert [to for _, (to,) in service.smtp.envelopes] == ["bob.b@example.org"]  # only the confirmation mail
    code, _ = service.mailed_code("bob.b@example.org")
    assert service.confirm("tok-bob", code).status_code == 200
    service.notify("bob", "gpu-bob-two")
    assert [to for _, (to,) in service.smtp.envelopes] == ["bob.b@example.org"] * 2


def test_an_expired_code_is_refused(service):
    assert service.call("PUT", "tok-alice", WANT_OWN).status_code == 200
    stale = service.notifier.store.new_confirmation("alice", "all-staff@example.org", ttl=-1)
    r = service.confirm("tok-alice", stale)
    assert r.status_code == 400 and _own(service, "tok-alice")["preferences"]["email_confirmed"] is False


codes = st.one_of(st.text(max_size=300), st.from_regex(r"[A-Za-z0-9_-]{43}", fullmatch=True),
                  st.from_regex(r"[A-Za-z0-9_-]{40,46}", fullmatch=True), st.integers(), st.none(), st.booleans(),
                  st.lists(st.text(max_size=5), max_size=3), st.dictionaries(st.text(max_size=5), st.integers()),
                  st.just("%" * 43), st.just(" " * 5000), st.just("0" * 5000))


def test_adversarial_codes_are_a_clear_400_and_change_nothing(service):
    assert service.call("PUT", "tok-alice", WANT_OWN).status_code == 200
    code, _ = service.mailed_code("all-staff@example.org")

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.one_of(codes, codes.map(lambda c: {"code": c}), codes.map(lambda c: [c])))
    def probe(body):
        if body == {"code": code}:
            return
        r = service.call("POST", "tok-alice", body if isinstance(body, (dict, list)) else {"code": body}, "/confirm")
        assert r.status_code in (400, 413), (body, r.status_code, r.text)  # 413: over the body's 4 KiB
        assert r.json()["message"]
        assert _own(service, "tok-alice")["preferences"]["email_confirmed"] is False

    probe()
    for raw in (b"{", b"\xff\xfe", b"[" * 10_000, b"x" * 5000):
        r = requests.post(service.url + "/confirm", data=raw, timeout=30, headers={"Authorization": "token tok-alice"})
        assert r.status_code in (400, 413), (raw[:10], r.status_code)
    assert service.call("POST", "tok-nobody", {"code": code}, "/confirm").status_code == 403
    assert service.confirm("tok-alice", code).status_code == 200  # none of that used up the real code
