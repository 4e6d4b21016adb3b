"""`Idempotency-Key` on POST /jobs (pure, and create_submission against an in-memory API server): a retry
after a lost answer returns the job the first try made and creates nothing; a key is its user's; the same
key with another body is refused; the kernel's client resends a dropped POST under the same key."""
from __future__ import annotations

import asyncio
import json
import string
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.builders.jobs import JobRequestError
from jupyterhub_gpu.contract import IDEMPOTENCY_KEY_HEADER, REQUEST_DIGEST_ANNOTATION, SUBMISSION_LABEL
from jupyterhub_gpu.services.jobs import idempotency
from jupyterhub_gpu.services.jobs.lifecycle import create_submission
from jupyterhub_gpu.services.jobs.planner import digest_raw, plan_raw
from jupyterhub_gpu.services.jobs.submission import ServiceSettings, plan_submission
from jupyterhub_gpu.singleuser.client import JobsClient, JobsError

from .conftest import NB

ALICE, RITA = ["data-science"], ["ml-research"]
KEY_CHARS = string.ascii_letters + string.digits + "-_"


def body(**kw):
    return {"profile": "a100-mig-1g10gb", "notebook_path": "work/nb.ipynb", "notebook": NB, **kw}


# ------------------------------------------------------------------------------------------------ the key
@given(st.text(KEY_CHARS, min_size=8, max_size=64))
def test_keys_of_the_documented_syntax_are_taken(key):
    assert idempotency.check_key(key) == key


@given(st.text(max_size=200))
def test_any_other_header_value_is_a_clear_400(value):
    if all(c in KEY_CHARS for c in value) and 8 <= len(value) <= 64:
        return
    with pytest.raises(JobRequestError, match=IDEMPOTENCY_KEY_HEADER) as e:
        idempotency.check_key(value)
    assert len(str(e.value)) < 300  # a hostile value is cut, not echoed whole


def test_no_header_is_no_key_and_a_trailing_newline_is_refused():
    assert idempotency.check_key(None) is None
    with pytest.raises(JobRequestError):
        idempotency.check_key("a" * 16 + "\n")


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40), st.text(KEY_CHARS, min_size=8, max_size=64))
def test_a_key_is_its_users_own(user, other, key):
    """The same key of two users is two submissions: neither can reach the other's job."""
    assert idempotency.submission_id(user, key) == idempotency.submission_id(user, key)
    if user != other:
        assert idempotency.submission_id(user, key) != idempotency.submission_id(other, key)


def test_user_and_key_cannot_be_shifted_into_each_other():
    assert idempotency.submission_id("ab", "c" * 8) != idempotency.submission_id("a", "b" + "c" * 8)


# ------------------------------------------------------------------------------------------------ the plan
def test_a_keyed_plan_has_the_same_name_each_time_and_marks_both_objects(cfg):
    sid = idempotency.submission_id("alice", "k" * 20)
    first = plan_submission(cfg, "alice", ALICE, body(), 0, submission=sid)
    again = plan_submission(cfg, "alice", ALICE, body(), 0, submission=sid)
    assert [o["metadata"]["name"] for o in first] == [o["metadata"]["name"] for o in again]
    assert first[0]["metadata"]["name"].endswith("-" + sid[:6])
    for obj in first:
        assert obj["metadata"]["labels"][SUBMISSION_LABEL] == sid
        assert obj["metadata"]["annotations"][REQUEST_DIGEST_ANNOTATION] == idempotency.body_digest(body())
    other = plan_submission(cfg, "alice", ALICE, body(), 0, submission=idempotency.submission_id("alice", "j" * 20))
    assert other[0]["metadata"]["name"] != first[0]["metadata"]["name"]
    unkeyed = plan_submission(cfg, "alice", ALICE, body(), 0)
    assert SUBMISSION_LABEL not in unkeyed[0]["metadata"]["labels"]


def test_a_keyed_multi_node_job_keeps_its_name_within_the_jobset_limit(cfg):
    from jupyterhub_gpu.builders.jobsets import JOBSET_NAME_LIMIT

    sid = idempotency.submission_id("rita", "r" * 30)
    js, cm = plan_submission(cfg, "rita", RITA, {"profile": "h100-full", "notebook": NB, "nodes": 2,
                                                  "notebook_path": "a/very-long-notebook-name-for-training.ipynb"},
                             0, submission=sid)
    assert js["kind"] == "JobSet" and len(js["metadata"]["name"]) <= JOBSET_NAME_LIMIT
    assert js["metadata"]["labels"][SUBMISSION_LABEL] == cm["metadata"]["labels"][SUBMISSION_LABEL] == sid


def test_a_retry_reserialised_is_the_same_request_and_another_body_is_refused(cfg):
    raw = json.dumps(body(parameters={"epochs": 3, "lr": 0.1})).encode()
    reordered = json.dumps(dict(reversed(list(json.loads(raw).items()))), indent=2).encode()
    sid = idempotency.submission_id("alice", "z" * 12)
    (job, _), _ = plan_raw(raw, "alice", ALICE, {}, cfg, ServiceSettings(), sid)
    idempotency.check_replay(job, digest_raw(reordered))  # key order and whitespace do not matter
    changed = json.dumps(body(parameters={"epochs": 4, "lr": 0.1})).encode()
    with pytest.raises(idempotency.KeyReused, match=f"{IDEMPOTENCY_KEY_HEADER} was already used for job"):
        idempotency.check_replay(job, digest_raw(changed))


def test_find_matches_only_the_users_own_job_of_that_submission(cfg):
    sid = idempotency.submission_id("alice", "q" * 10)
    job, _ = plan_submission(cfg, "alice", ALICE, body(), 0, submission=sid)
    forged = json.loads(json.dumps(job))
    forged["metadata"]["annotations"]["gpuhub.io/username"] = "bob"  # the same label on bob's object
    assert idempotency.find([forged, job], "alice", sid) is job
    assert idempotency.find([forged], "alice", sid) is None
    assert idempotency.find([job], "alice", idempotency.submission_id("alice", "p" * 10)) is None


# ------------------------------------------------------------------------ create_submission, retried
class Resp:
    def __init__(self, status: int, obj: dict | None = None, reason: str = ""):
        self.status, self.reason, self._body = status, reason, json.dumps(obj or {}).encode()

    async def read(self):
        return self._body

    def release(self):
        pass


class Store:
    """An API server's object store: create (409 when the name is taken), read, delete, patch."""

    def __init__(self):
        self.objs: dict[tuple[str, str, str], dict] = {}
        self.creates: list[str] = []
        self.deleted: list[str] = []

    async def _create(self, kind, ns, obj):
        self.creates.append(kind)
        key = (kind, ns, obj["metadata"]["name"])
        if key in self.objs:
            return Resp(409, {"message": "already exists"}, "Conflict")
        self.objs[key] = json.loads(json.dumps(obj))
        self.objs[key]["metadata"]["uid"] = f"uid-{len(self.creates)}"
        return Resp(201, self.objs[key])

    async def _read(self, kind, ns, name):
        found = self.objs.get((kind, ns, name))
        return Resp(200, found) if found else Resp(404, {}, "Not Found")

    def create_namespaced_config_map(self, ns, obj, **_):
        return self._create("ConfigMap", ns, obj)

    def create_namespaced_job(self, ns, obj, **_):
        return self._create("Job", ns, obj)

    def read_namespaced_config_map(self, name, ns, **_):
        return self._read("ConfigMap", ns, name)

    def read_namespaced_job(self, name, ns, **_):
        return self._read("Job", ns, name)

    async def _delete(self, name, ns):
        self.deleted.append(name)
        return Resp(200, self.objs.pop(("ConfigMap", ns, name), {}))

    def delete_namespaced_config_map(self, name, ns, **_):
        return self._delete(name, ns)

    async def _patch(self, name, ns, patch):
        self.objs[("ConfigMap", ns, name)]["metadata"].update(patch["metadata"])
        return Resp(200, self.objs[("ConfigMap", ns, name)])

    def patch_namespaced_config_map(self, name, ns, patch, **_):
        return self._patch(name, ns, patch)


class FakeKube:
    def __init__(self):
        self.core = self.batch = Store()

    def cached(self, *_):
        return False


def test_a_retry_after_a_lost_answer_returns_the_first_job_and_creates_nothing(cfg):
    kube = FakeKube()
    sid = idempotency.submission_id("alice", "lost-answer-1")
    objs = plan_submission(cfg, "alice", ALICE, body(), 0, submission=sid)
    job, made = asyncio.run(create_submission(kube, objs))
    assert made and kube.core.creates == ["ConfigMap", "Job"]
    again = plan_submission(cfg, "alice", ALICE, body(), 0, submission=sid)  # a restarted gpu-jobs plans anew
    held, made = asyncio.run(create_submission(kube, again))
    assert not made and held["metadata"]["name"] == job["metadata"]["name"]
    assert sum(k[0] == "Job" for k in kube.core.objs) == 1 and not kube.core.deleted  # its ConfigMap kept


def test_a_retry_after_a_crash_between_the_creates_makes_the_job_once(cfg):
    kube = FakeKube()
    sid = idempotency.submission_id("alice", "crashed-after-cm")
    cm = next(o for o in plan_submission(cfg, "alice", ALICE, body(), 0, submission=sid) if o["kind"] == "ConfigMap")
    asyncio.run(kube.core.create_namespaced_config_map("team-ds", cm))  # the first try died here
    job, made = asyncio.run(create_submission(kube, plan_submission(cfg, "alice", ALICE, body(), 0, submission=sid)))
    assert made and [k[0] for k in kube.core.objs].count("Job") == 1
    assert kube.core.objs[("ConfigMap", "team-ds", job["metadata"]["name"])]["metadata"]["ownerReferences"]


def test_the_key_reused_with_another_body_changes_nothing(cfg):
    kube = FakeKube()
    sid = idempotency.submission_id("alice", "reused-key-1")
    asyncio.run(create_submission(kube, plan_submission(cfg, "alice", ALICE, body(), 0, submission=sid)))
    before = json.dumps(list(kube.core.objs.values()), sort_keys=True)
    other = plan_submission(cfg, "alice", ALICE, body(parameters={"epochs": 9}), 0, submission=sid)
    with pytest.raises(idempotency.KeyReused):
        asyncio.run(create_submission(kube, other))
    assert json.dumps(list(kube.core.objs.values()), sort_keys=True) == before and not kube.core.deleted


def test_a_name_held_by_another_users_job_is_never_returned(cfg):
    """Under one name (a slug clash), bob's object is an error for alice, and bob's ConfigMap stays."""
    kube = FakeKube()
    sid = idempotency.submission_id("alice", "clash-key-12")
    objs = plan_submission(cfg, "alice", ALICE, body(), 0, submission=sid)
    for obj in json.loads(json.dumps(objs)):
        obj["metadata"]["annotations"]["gpuhub.io/username"] = "bob"
        asyncio.run(kube.core._create(obj["kind"], "team-ds", obj))
    from kubernetes_asyncio.client import ApiException

    with pytest.raises(ApiException) as e:
        asyncio.run(create_submission(kube, objs))
    assert e.value.status == 409 and not kube.core.deleted


# ------------------------------------------------------------------------------------------- the client
def test_the_client_resends_a_dropped_post_under_the_same_key_and_a_new_submission_under_a_new_one():
    keys: list[str] = []

    class DropFirst(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            keys.append(self.headers[IDEMPOTENCY_KEY_HEADER])
            if len(keys) == 1:  # read, then the connection closes with no answer: a lost response
                self.close_connection = True
                return
            self.send_response(201 if len(keys) == 2 else 503)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"name": "gpu-alice-nb-abc123", "message": "unavailable"}')

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), DropFirst)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = JobsClient(f"http://127.0.0.1:{server.server_port}/", "token", attempts=2, backoff=0.01)
        assert client.submit("t4-shared", "work/nb.ipynb", NB)["name"] == "gpu-alice-nb-abc123"
        with pytest.raises(JobsError) as e:  # a second submission: a new key; 503 twice, then given up
            client.submit("t4-shared", "work/nb.ipynb", NB)
    finally:
        server.shutdown()
    assert e.value.status == 503
    assert keys[0] == keys[1] != keys[2] == keys[3] and len(keys) == 4
    assert all(idempotency.check_key(k) for k in keys)
