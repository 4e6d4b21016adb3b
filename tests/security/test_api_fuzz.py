"""Arbitrary JSON, query strings and job names at EVERY gpu-jobs endpoint of a real running service
(cluster tier: real hub, CHP, gpu-jobs, dev cluster): never a 5xx, and nothing is created except by a
request that was answered 201 (hypothesis, property-based)."""
from __future__ import annotations

import json
from urllib.parse import quote, urlencode

import pytest
import requests
from hypothesis import HealthCheck, given, settings, strategies as st

from .api_hub import NB, api_hub, clean_teams, team_objects, write_profiles

pytestmark = pytest.mark.cluster

GROUPS = {"fuzz": ["data-science"]}
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20)
FIELDS = ["profile", "notebook_path", "notebook", "parameters", "priority", "timeout", "gpus", "name", "options"]
VALID = {"profile": "t4-shared", "notebook_path": "work/fuzz.ipynb", "notebook": NB}
#: Raw bodies JSON parsers disagree on, or that are not JSON at all.
RAW = [b'{"profile": "t4-shared", "timeout": Infinity}', b'{"timeout": NaN}', b"[" * 50_000, b"\xff\xfe",
       b'{"notebook_path": "\\ud800.ipynb"}', b'{"a": ' + b"9" * 5000 + b"}", b"null", b'"x"', b"",
       b'{"profile": "t4-shared", "notebook_path": "a\\u0000b.ipynb", "notebook": {"cells": []}}']


@st.composite
def bodies(draw):
    kind = draw(st.sampled_from(["any", "near-valid", "raw"]))
    if kind == "raw":
        return draw(st.sampled_from(RAW))
    if kind == "any":
        return json.dumps(draw(json_values)).encode()
    body = dict(VALID)  # one valid submission with one or two fields replaced by anything
    for field in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=2, unique=True)):
        body[field] = draw(json_values)
    return json.dumps(body).encode()


names = st.text(min_size=1, max_size=80) | st.sampled_from(["..", ".", "%2e%2e", "a" * 64, "-", "gpu-x-y-123456"])
queries = st.dictionaries(st.sampled_from(["tail", "all", "cells", "token", "x"]) | st.text(max_size=10),
                          st.text(max_size=20) | st.sampled_from(["abc", "0", "-1", "1e9", "99999999999", "1"]),
                          max_size=5)
requests_ = st.tuples(
    st.sampled_from([("GET", "/jobs"), ("POST", "/jobs"), ("GET", "/jobs/{n}"), ("DELETE", "/jobs/{n}"),
                     ("GET", "/jobs/{n}/logs"), ("GET", "/profiles")]),
    names, queries, bodies())


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    profiles = write_profiles(cluster, tmp_path_factory.mktemp("fuzzprofiles") / "profiles.yaml")
    with api_hub(cluster, tmp_path_factory.mktemp("fuzzhub"), profiles, GROUPS) as h:
        yield h
    clean_teams(cluster)


def test_no_request_gives_a_5xx_or_creates_anything_unless_accepted(cluster, hub):
    token = hub.token("fuzz")
    base = f"{hub.url}/services/gpu-jobs"
    before = team_objects(cluster)
    accepted: set[tuple[str, str]] = set()
    seen: list[tuple[str, int]] = []

    @SETTINGS
    @given(requests_)
    def one(req):
        (method, path), name, query, body = req
        url = base + path.replace("{n}", quote(name, safe="")) + ("?" + urlencode(query) if query else "")
        r = requests.request(method, url, data=body if method == "POST" else None, timeout=60,
                             headers={**hub.auth(token), "Content-Type": "application/json"})
        seen.append((method + " " + path, r.status_code))
        assert r.status_code < 500, (method, url, body[:300], r.status_code, r.text[:500])
        if r.status_code == 201:
            accepted.add((r.json()["namespace"], r.json()["name"]))
        elif r.status_code >= 400 and r.headers.get("Content-Type", "").startswith("application/json"):
            assert r.json()["message"], r.text  # a clear message

    one()
    after = team_objects(cluster)
    assert after["jobs"] - before["jobs"] == accepted
    assert after["configmaps"] - before["configmaps"] <= accepted  # a Job's notebook ConfigMap has its name
    assert after["claims"] == before["claims"]
    assert len(seen) >= 100 and any(s == 400 for _, s in seen) and any(s == 200 for _, s in seen)  # it ran
    assert len({p for p, _ in seen}) == 6  # every endpoint


@pytest.mark.parametrize("raw,status,needle", [
    (b'{"profile": "t4-shared", "notebook_path": "w.ipynb", "notebook": {"cells": []}, "timeout": Infinity}',
     400, "must be finite"),
    (b'{"notebook": {"cells": [1, 2]}, "profile": "t4-shared", "notebook_path": "w.ipynb"}', 400, "cells[0]"),
    (b'{"profile": "t4-shared", "notebook_path": "w.ipynb", "notebook": {"cells": []}, "timeout": [1]}',
     400, "not a duration"),
    (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
    (b'{"profile": "t4-shared", "notebook_path": "/etc/w.ipynb", "notebook": {"cells": []}}', 400, "not absolute"),
    (b'{"profile": "t4-shared", "notebook_path": "../w.ipynb", "notebook": {"cells": []}}', 400, "no '..'"),
    (b'{"x": "' + b"a" * (5 * 2**20) + b'"}', 413, "the limit is 4 MiB"),
])
def test_named_malformed_bodies(cluster, hub, raw, status, needle):
    before = team_objects(cluster)
    r = requests.post(f"{hub.url}/services/gpu-jobs/jobs", data=raw, headers=hub.auth(hub.token("fuzz")), timeout=120)
    assert r.status_code == status and needle in r.json()["message"], (r.status_code, r.text[:300])
    assert team_objects(cluster) == before


@pytest.mark.parametrize("query,needle", [("tail=abc", "tail must be"), ("tail=0", "tail must be"),
                                          ("tail=-1", "tail must be"), ("tail=" + "9" * 300, "the limit is 256"),
                                          ("&".join(f"a{i}=1" for i in range(20)), "the limit is 16")])
def test_bad_log_queries_are_400_naming_the_rule(hub, query, needle):
    sub = hub.submit("fuzz")
    assert sub.status_code == 201, sub.text
    r = hub.call("fuzz", "GET", f"/jobs/{sub.json()['name']}/logs?{query}")
    assert r.status_code == 400 and needle in r.json()["message"], r.text
    assert hub.call("fuzz", "DELETE", f"/jobs/{sub.json()['name']}").status_code == 200


@pytest.mark.parametrize("name", ["UPPER", "a_b", "a" * 64, "ü", "a%00b", "a%20b"])
def test_odd_job_names_are_400(hub, name):
    r = hub.call("fuzz", "GET", f"/jobs/{quote(name, safe='%')}")
    assert r.status_code == 400 and "is not a job name" in r.json()["message"], r.text
