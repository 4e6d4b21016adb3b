"""Who is calling gpu-jobs comes from the caller's own token, never from a name put into a URL (cluster
tier: real JupyterHub with the DevAuthenticator, CHP, gpu-jobs, dev cluster).

Before: the service asked `GET /hub/api/users/<raw name>` with its own token, so a user called `admin?`
was answered with the model of `admin` (groups, admin flag): they listed everyone's jobs and submitted on
profiles of groups they are not in. Now the name, groups and admin flag are the hub's answer for the
caller's own token; tokens are read from the Authorization header only, asynchronously.
"""
from __future__ import annotations

import asyncio
import secrets
import threading
import time

import pytest
import requests
from jupyterhub.services.auth import HubAuth

from jupyterhub_gpu.services.auth import TokenAuth

from .api_hub import api_hub, clean_teams, write_profiles
from .stalls import loop_stall

pytestmark = pytest.mark.cluster

#: Names JupyterHub accepts, each with URL syntax or normalisation in it; none is in a group.
ODD = ["admin?", "a#b", "with space", "ünï", "Alice", "x%2fy", "admin?all=1"]
#: Names JupyterHub refuses at login (validate_username): they can never hold a token.
REFUSED = ["a/b", "..", "%2e%2e"]
#: The DevAuthenticator looks groups up by the hub's (lower-cased) name: `Alice` gets alice's groups.
GROUPS = {"alice": ["data-science"], "admin": ["data-science", "ml-research"],
          "rita": ["ml-research"]}


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    profiles = write_profiles(cluster, tmp_path_factory.mktemp("idprofiles") / "profiles.yaml")
    with api_hub(cluster, tmp_path_factory.mktemp("idhub"), profiles, GROUPS) as h:
        yield h


@pytest.fixture
def clean(cluster):
    yield
    clean_teams(cluster)


def test_names_with_url_syntax_are_their_own_users_never_the_admin(cluster, hub, clean):
    alice_job = hub.submit("alice").json()["name"]
    admins = hub.submit("admin", profile="h100-full", priority="high")
    assert admins.status_code == 201, admins.text
    for typed in ODD:
        name = hub.hub_name(typed)
        assert name == typed.lower()  # JupyterHub's normalisation: `Alice` is alice
        if typed == "Alice":
            continue
        profiles = hub.call(typed, "GET", "/profiles")
        assert profiles.status_code == 200, profiles.text
        body = profiles.json()
        assert body["user"] == name and body["team"] == "data-science"  # the default team, no groups
        assert {p["slug"] for p in body["profiles"]} == {"t4-shared"}    # not admin's MIG/H100 profiles
        everyone = hub.call(typed, "GET", "/jobs?all=1")
        assert everyone.status_code == 200 and everyone.json()["jobs"] == [], everyone.text  # not an admin
        for method, path in (("GET", f"/jobs/{alice_job}"), ("GET", f"/jobs/{alice_job}/logs"),
                             ("DELETE", f"/jobs/{alice_job}")):
            assert hub.call(typed, method, path).status_code == 404
        forged = hub.submit(typed, profile="h100-full")
        assert forged.status_code == 400 and "h100-full" in forged.json()["message"], forged.text
        own = hub.submit(typed)
        assert own.status_code == 201, own.text
        job = cluster.batch.read_namespaced_job(own.json()["name"], "team-ds")
        assert job.metadata.annotations["gpuhub.io/username"] == name  # the exact name, not a lookalike
        assert [j["name"] for j in hub.call(typed, "GET", "/jobs").json()["jobs"]] == [own.json()["name"]]
    # Alice logs in as alice and is alice: her job, her groups
    assert [j["name"] for j in hub.call("Alice", "GET", "/jobs").json()["jobs"]] == [alice_job]
    assert "a100-mig-1g10gb" in {p["slug"] for p in hub.call("Alice", "GET", "/profiles").json()["profiles"]}
    # the admin still sees everyone's, including the odd users' jobs
    listed = {j["user"] for j in hub.call("admin", "GET", "/jobs?all=1").json()["jobs"]}
    assert listed >= {"alice", "admin", *(t.lower() for t in ODD)}


def test_names_that_are_paths_never_log_in(hub):
    for typed in REFUSED:
        status, name = hub.login_status(typed)
        assert name is None, f"{typed!r} logged in as {name!r}"
    r = requests.get(f"{hub.url}/hub/api/users", headers=hub.auth(hub.admin_token), timeout=30)
    assert r.status_code == 200, r.text
    users = {u["name"] for u in r.json()}
    assert users and not users & {t.lower() for t in REFUSED}, users


def test_tokens_only_in_the_authorization_header(hub):
    token = hub.token("alice")
    base = f"{hub.url}/services/gpu-jobs"
    assert requests.get(f"{base}/jobs", headers=hub.auth(token), timeout=30).status_code == 200
    assert requests.get(f"{base}/jobs", headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code == 200
    assert requests.get(f"{base}/jobs?token={token}", timeout=30).status_code in (302, 401, 403)
    browser = hub.login("alice")  # a logged-in browser: hub cookies, no token
    assert browser.get(f"{base}/jobs", timeout=30, allow_redirects=False).status_code in (302, 401, 403)
    for bad in ("token", f"token {token}x", f"Basic {token}", f"token {token} {token}", "token \u00fc" * 3):
        r = requests.get(f"{base}/jobs", headers={"Authorization": bad.encode("utf-8")}, timeout=30)
        assert r.status_code == 403, (bad, r.status_code, r.text)
        assert "Authorization header" in r.json()["message"]
    weak = requests.post(f"{hub.url}/hub/api/users/alice/tokens", headers=hub.auth(hub.admin_token),
                         json={"scopes": ["read:users:name!user"]}, timeout=30).json()["token"]
    assert requests.get(f"{base}/jobs", headers=hub.auth(weak), timeout=30).status_code == 403


def test_random_tokens_do_not_stall_other_users(hub):
    """A flood of unknown tokens, each a hub lookup: they are refused while alice's calls keep working
    (the lookups no longer block the service's event loop one after another)."""
    token = hub.token("alice")
    base = f"{hub.url}/services/gpu-jobs"
    statuses: list[int] = []

    def flood():
        with requests.Session() as s:
            for _ in range(40):
                statuses.append(s.get(f"{base}/profiles", headers=hub.auth(secrets.token_hex(16)), timeout=60)
                                .status_code)

    threads = [threading.Thread(target=flood) for _ in range(6)]
    for t in threads:
        t.start()
    took = []
    while any(t.is_alive() for t in threads):
        start = time.monotonic()
        r = requests.get(f"{base}/jobs", headers=hub.auth(token), timeout=60)
        took.append(time.monotonic() - start)
        assert r.status_code == 200, r.text
    for t in threads:
        t.join()
    assert statuses == [403] * 240
    took.sort()
    assert took and took[len(took) // 2] < 2.0, took  # the median call of a known user stays quick


async def test_token_lookups_do_not_block_the_event_loop(hub):
    """The service's token check against the real hub: 300 unknown tokens at once keep the loop free, where
    the synchronous lookup that HubAuthenticated.get_current_user() makes blocks it for each of them. Wall-clock
    stalls on a loaded machine are noisy (a descheduled process stalls both ways alike), so the side-by-side
    comparison gets three tries with fresh tokens: a blocking check loses every one of them."""
    hub_auth = HubAuth(api_url=f"{hub.url}/hub/api", api_token=hub.admin_token)
    auth = TokenAuth(hub_auth, {"access:services!service=gpu-jobs"})
    tried, asked = [], 0
    for _ in range(3):
        tokens = [secrets.token_hex(16) for _ in range(300)]

        async def ours():
            assert await asyncio.gather(*(auth.caller(f"token {t}") for t in tokens)) == [None] * len(tokens)

        async def blocking():
            for t in tokens:
                assert hub_auth.user_for_token(t, use_cache=False) is None  # sync=True: what the old handler did

        stall_async, stall_sync = await loop_stall(ours), await loop_stall(blocking)
        asked += len(tokens)
        print(f"event loop stall for {len(tokens)} unknown tokens: async {stall_async:.3f} s, sync {stall_sync:.3f} s")
        assert auth.hub_requests == asked and len(auth.unknown) == asked
        tried.append((stall_async, stall_sync))
        if stall_async < stall_sync / 4:
            break
    else:
        raise AssertionError(f"the token check stalled the loop like the synchronous one, three times: {tried}")
    # asked again: answered from the bounded cache of refused tokens, no hub request
    assert await auth.caller(f"token {tokens[0]}") is None and auth.hub_requests == asked
