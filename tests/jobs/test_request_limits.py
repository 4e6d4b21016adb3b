"""Hostile requests to gpu-jobs, checked before anything is created (pure): each is a 400 or 413 whose
message names the limit, never an exception that would become a 500."""
from __future__ import annotations

import json

import pytest

from jupyterhub_gpu.builders.jobs import JobRequestError
from jupyterhub_gpu.services.auth import TokenAuth, caller_from_model
from jupyterhub_gpu.services.jobs import limits
from jupyterhub_gpu.services.jobs.app import SubmitGate
from jupyterhub_gpu.services.jobs.submission import ServiceSettings, plan_submission
from jupyterhub_gpu.services.web import check_query

from .conftest import NB

ALICE = ["data-science"]
ACCESS = {"access:services!service=gpu-jobs"}


def body(**kw):
    return {"profile": "a100-mig-1g10gb", "notebook_path": "work/nb.ipynb", "notebook": NB, **kw}


@pytest.mark.parametrize("raw,needle", [
    (b'{"timeout": Infinity}', "must be finite"),
    (b'{"timeout": NaN}', "must be finite"),
    (b'{"timeout": -Infinity}', "must be finite"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"a": ' * 65 + b"1" + b"}" * 65, "the limit is 64 levels"),
    (b"\xff\xfe{", "not JSON"),
    (b'{"x": "\\ud800"}', "invalid Unicode"),
    (b'{"x": ' + b"9" * 5000 + b"}", "not JSON"),
    (b"{", "not JSON"),
])
def test_bodies_that_are_not_acceptable_json(raw, needle):
    with pytest.raises(JobRequestError, match=None) as e:
        limits.parse_body(raw)
    assert needle in str(e.value)


def test_a_body_over_the_limit_is_413_naming_it():
    with pytest.raises(limits.TooLarge, match="the limit is 4 MiB"):
        limits.parse_body(b" " * (limits.MAX_BODY_BYTES + 1))
    assert limits.parse_body(b"") == {} and limits.parse_body(b'{"a": [1, 2.5]}') == {"a": [1, 2.5]}


def test_the_count_of_json_values_is_bounded():
    """Small bodies of tiny values cost the most to parse and walk: their count is capped, not just bytes."""
    n = limits.MAX_JSON_VALUES
    assert len(limits.parse_body(b"[" + b"0," * (n - 2) + b"0]")) == n - 1  # the list itself is a value too
    for raw in (b"[" + b"0," * (n - 1) + b"0]", b'{"a": [' + b"{}," * n + b"{}]}"):
        with pytest.raises(limits.TooLarge, match=f"more than {n} JSON values; the limit is {n}"):
            limits.parse_body(raw)


def test_the_body_limit_is_what_a_snapshot_can_be():
    """A body over the limit could never become a job: its snapshot (gzipped, outputs stripped) would be
    over MAX_SNAPSHOT_BYTES unless it compressed better than code and markdown do."""
    from jupyterhub_gpu.builders.jobs import MAX_SNAPSHOT_BYTES

    assert 3 * MAX_SNAPSHOT_BYTES < limits.MAX_BODY_BYTES <= 5 * MAX_SNAPSHOT_BYTES


@pytest.mark.parametrize("value,ok", [(None, 65536), ("", 65536), ("1", 1), ("1048576", 1048576),
                                      ("abc", None), ("0", None), ("-1", None), ("1.5", None), ("1048577", None),
                                      ("9" * 40, None), (" 5", None)])
def test_log_tail(value, ok):
    if ok is None:
        with pytest.raises(JobRequestError, match="tail must be a whole number of bytes from 1 to 1048576"):
            limits.log_tail(value)
    else:
        assert limits.log_tail(value) == ok


def test_query_count_and_length_are_bounded():
    check_query({"all": [b"1"], "cells": [b"0"]})
    with pytest.raises(JobRequestError, match="the limit is 16"):
        check_query({f"a{i}": [b"1"] for i in range(17)})
    with pytest.raises(JobRequestError, match="the limit is 256 bytes"):
        check_query({"tail": [b"1" * 257]})


@pytest.mark.parametrize("name", ["A", "a_b", "-a", "a-", "a" * 64, "..", "a/b", "a%2fb", "", "ü"])
def test_bad_job_names(name):
    with pytest.raises(JobRequestError, match="is not a job name"):
        limits.job_name(name)


@pytest.mark.parametrize("path,needle", [
    ("/etc/x.ipynb", "not absolute"), ("~/x.ipynb", "not absolute"), ("C:/x.ipynb", "not absolute"),
    ("../bob/x.ipynb", "no '..'"), ("work/../../x.ipynb", "no '..'"), ("work\\..\\x.ipynb", "no '..'"),
    ("a\0b.ipynb", "NUL"), ("a\nb.ipynb", "control"), ("x" * 1020 + ".ipynb", "the limit is 1024"),
    (5, "ending in .ipynb"), (None, "ending in .ipynb"), ("x.py", "ending in .ipynb"),
])
def test_notebook_paths(cfg, path, needle):
    with pytest.raises(JobRequestError, match=None) as e:
        plan_submission(cfg, "alice", ALICE, body(notebook_path=path), 0)
    assert needle in str(e.value)


@pytest.mark.parametrize("nb,needle", [
    ({"cells": [1, 2]}, "cells[0] must be a cell object; got int"),
    ({"cells": [{"cell_type": "code", "source": 5}]}, "cells[0].source must be text"),
    ({"cells": [{"cell_type": "code", "source": ["a", 1]}]}, "cells[0].source must be text"),
    ({"cells": [{"cell_type": "widget", "source": ""}]}, "cell_type must be one of code, markdown, raw"),
    ({"cells": [{"cell_type": "code", "source": "", "metadata": []}]}, "cells[0].metadata must be an object"),
    ({"cells": [{"cell_type": "code", "source": "", "outputs": {}}]}, "cells[0].outputs must be a list"),
    ({"cells": [], "metadata": 3}, "notebook.metadata must be an object"),
    ({"cells": "x"}, "nbformat 4"), ([], "nbformat 4"),
])
def test_notebooks_of_the_wrong_shape(cfg, nb, needle):
    with pytest.raises(JobRequestError, match=None) as e:
        plan_submission(cfg, "alice", ALICE, body(notebook=nb), 0)
    assert needle in str(e.value)


@pytest.mark.parametrize("kw,needle", [
    ({"timeout": [1]}, "not a duration"), ({"timeout": {"h": 1}}, "not a duration"),
    ({"timeout": True}, "not a duration"), ({"timeout": 10**30}, "out of bounds"),
    ({"gpus": True}, "GPU(s) per job"), ({"gpus": [1]}, "GPU(s) per job"),
    ({"priority": 3}, "priority of type int does not exist"), ({"priority": ["high"]}, "does not exist"),
    ({"parameters": [1]}, "object of name: value"), ({"parameters": {str(i): 1 for i in range(65)}}, "the limit is 64"),
    ({"parameters": {"x": "a" * 20000}}, "the limit is 16384 bytes per value"),
    ({"parameters": {f"p{i}": "a" * 15000 for i in range(7)}}, "the limit is 98304 bytes"),
    ({"parameters": {"x" * 101: 1}}, "the limit is 100 characters"),
    ({"profile": ["a"]}, "no profile"), ({"profile": {"a": 1}}, "no profile"),
    ({"name": 5}, "name must be text"),
])
def test_wrong_types_inside_the_body(cfg, kw, needle):
    with pytest.raises(JobRequestError, match=None) as e:
        plan_submission(cfg, "alice", ALICE, body(**kw), 0)
    assert needle in str(e.value)


def test_size_errors_are_413():
    assert issubclass(limits.TooLarge, JobRequestError)
    with pytest.raises(limits.TooLarge):
        limits.check_parameters({"x": "a" * 20000})


# ------------------------------------------------------------------ limits per user and priority
def test_overall_cap_per_user_counts_every_profile(cfg):
    s = ServiceSettings(max_jobs_per_user=3)
    plan_submission(cfg, "alice", ALICE, body(), 0, s, active_total=2)
    with pytest.raises(JobRequestError, match="the limit is 3 per user over all profiles"):
        plan_submission(cfg, "alice", ALICE, body(profile="t4-shared"), 0, s, active_total=3)
    plan_submission(cfg, "alice", ALICE, body(), 0, ServiceSettings(max_jobs_per_user=0), active_total=500)


def test_every_job_carries_an_explicit_priority_within_the_ceiling(cfg):
    def prio(**kw):
        job = next(o for o in plan_submission(cfg, "rita", ["ml-research"], body(**kw), 0) if o["kind"] == "Job")
        return job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"]

    assert prio() == "normal" and prio(priority="") == "normal"                # the profile's, never none
    assert prio(priority="high") == "high" and prio(priority="low") == "low"   # max_priority: high
    assert prio(profile="a100-spot") == "low"
    with pytest.raises(JobRequestError, match="above what you may pick on 'a100-spot'; allowed: low"):
        prio(profile="a100-spot", priority="normal")


def test_the_gate_counts_jobs_the_cache_does_not_list_yet():
    gate = SubmitGate(remember=60)
    gate.created("alice", "j1", "t4")
    gate.created("alice", "j2", "mig")
    assert gate.unfinished("alice", {}) == {"t4": 1, "mig": 1}
    assert gate.unfinished("alice", {"j1": "t4"}) == {"t4": 1, "mig": 1}  # listed now: counted once
    gate.forget("alice", "j2")
    assert gate.unfinished("alice", {}) == {}  # j1 was dropped once the cache listed it
    assert gate.unfinished("bob", {"x": "t4"}) == {"t4": 1}
    assert gate.lock("alice") is gate.lock("alice") and gate.lock("alice") is not gate.lock("bob")


# ------------------------------------------------------------------ identity from the token's own model
def test_identity_comes_from_the_tokens_model_and_fails_closed():
    model = {"kind": "user", "name": "admin?", "groups": ["g"], "admin": False, "scopes": sorted(ACCESS)}
    who = caller_from_model(model, ACCESS)
    assert (who.name, who.groups, who.admin) == ("admin?", ("g",), False)
    assert caller_from_model({**model, "scopes": ["read:users:name!user=admin?"]}, ACCESS) is None  # no access
    assert caller_from_model({**model, "scopes": ["access:services!service="]}, ACCESS) is None  # unparsable
    assert caller_from_model({**model, "scopes": ["access:services"]}, ACCESS) is not None   # unfiltered access
    assert caller_from_model({**model, "kind": "service"}, ACCESS) is None
    assert caller_from_model(None, ACCESS) is None and caller_from_model({"scopes": []}, set()) is None
    odd = caller_from_model({"name": "x", "groups": "admins", "admin": "yes", "scopes": sorted(ACCESS)}, ACCESS)
    assert odd.groups == () and odd.admin is False


@pytest.mark.parametrize("header,token", [
    ("token abc", "abc"), ("Bearer abc", "abc"), ("TOKEN  abc ", "abc"),
    ("", None), (None, None), ("abc", None), ("token ", None), ("token a b", None), ("token ü", None),
    ("Basic abc", None), ("token " + "a" * 513, None),
])
def test_tokens_only_from_the_authorization_header(header, token):
    assert TokenAuth.token_from(header) == token


def test_json_dumps_of_parsed_values_never_fails():
    data = limits.parse_body(json.dumps({"a": [1, -2.5e300, "ü", None, True, {"b": []}]}).encode())
    assert json.loads(json.dumps(data)) == data
