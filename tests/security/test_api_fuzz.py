"""Arbitrary JSON, query strings and job names at EVERY gpu-jobs endpoint of a real running service
(cluster tier: real hub, CHP, gpu-jobs, dev cluster): never a 5xx, nothing is created except by a
request that was answered 201, and no request stalls the service's event loop over 50 ms (its own
LoopGuard's metrics, read at /metrics before and after each request: tests/security/stalls.py); strings
are the kind parsers choke on: long whitespace runs, nested and repeated separators, huge digit strings,
deep and wide JSON, unicode (hypothesis, property-based)."""
from __future__ import annotations

import json
from urllib.parse import quote, urlencode

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .api_hub import NB, api_hub, clean_teams, team_objects, write_profiles
from .stalls import StallMeter

pytestmark = pytest.mark.cluster

GROUPS = {"fuzz": ["data-science"]}
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

#: Strings built to make a parser backtrack or a number conversion raise: runs of whitespace between valid
#: parts (pytimeparse2's ReDoS: "1d" + spaces + "x"), separators nested and repeated, thousands of digits.
PARTS = ["1d", "2h", "30m", "1", ".", ":", "/", ",", "-", "e", "x", "h", "ü", "٣", "\u200b", "\\", "..", "[", "{"]
hostile_text = st.builds(
    lambda parts, runs: "".join(p + " " * r for p, r in zip(parts, runs)),
    st.lists(st.sampled_from(PARTS), min_size=1, max_size=8), st.lists(st.integers(0, 3000), min_size=8, max_size=8)) \
    | st.builds(lambda sep, n: sep * n, st.sampled_from([" ", "\t", "/", "../", "1h", ":", "9", "\u3000"]),
                st.integers(1, 20_000)) \
    | st.text(max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=10**300, max_value=10**400)
    | st.floats(allow_nan=False, allow_infinity=False) | hostile_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20)
#: Deep and wide: nested to just under and over the depth limit, and wide within the body limit.
SHAPES = [json.dumps(json.loads("[" * 63 + "]" * 63)).encode(), b"[" * 65 + b"]" * 65,
          json.dumps({"profile": "t4-shared", "notebook_path": "w.ipynb", "notebook": {"cells": [
              {"cell_type": "code", "source": ["x\n"] * 2000, "metadata": {}, "outputs": []}] * 100}}).encode(),
          b"[" + b"0," * 300_000 + b"0]", json.dumps({f"k{i}": {"a": [1] * 10} for i in range(20_000)}).encode()]
FIELDS = ["profile", "notebook_path", "notebook", "parameters", "priority", "timeout", "gpus", "name", "options",
          "nodes"]
VALID = {"profile": "t4-shared", "notebook_path": "work/fuzz.ipynb", "notebook": NB}
#: Raw bodies JSON parsers disagree on, or that are not JSON at all.
RAW = [b'{"profile": "t4-shared", "timeout": Infinity}', b'{"timeout": NaN}', b"[" * 50_000, b"\xff\xfe",
       b'{"notebook_path": "\\ud800.ipynb"}', b'{"a": ' + b"9" * 5000 + b"}", b"null", b'"x"', b"",
       b'{"profile": "t4-shared", "notebook_path": "a\\u0000b.ipynb", "notebook": {"cells": []}}']


@st.composite
def bodies(draw):
    kind = draw(st.sampled_from(["any", "near-valid", "raw", "shape"]))
    if kind == "raw":
        return draw(st.sampled_from(RAW))
    if kind == "shape":
        return draw(st.sampled_from(SHAPES))
    if kind == "any":
        return json.dumps(draw(json_values)).encode()
    body = dict(VALID)  # one valid submission with one or two fields replaced by anything
    for field in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=2, unique=True)):
        body[field] = draw(json_values)
    return json.dumps(body).encode()


names = st.text(min_size=1, max_size=80) | st.sampled_from(["..", ".", "%2e%2e", "a" * 64, "-", "gpu-x-y-123456"]) \
    | hostile_text.filter(lambda s: 0 < len(s) < 2000)
queries = st.dictionaries(st.sampled_from(["tail", "all", "cells", "token", "rank", "x"]) | st.text(max_size=10),
                          st.text(max_size=20) | st.sampled_from(["abc", "0", "-1", "1e9", "99999999999", "1"])
                          | st.sampled_from(["9" * 250, " " * 250, "1" + " " * 200 + "x"]),
                          max_size=5)
ENDPOINTS = [("GET", "/jobs"), ("POST", "/jobs"), ("GET", "/jobs/{n}"), ("DELETE", "/jobs/{n}"),
             ("GET", "/jobs/{n}/logs"), ("GET", "/profiles"), ("GET", "/notifications"), ("PUT", "/notifications"),
             ("DELETE", "/notifications"), ("POST", "/notifications/confirm"), ("POST", "/notifications/cull-warnings"),
             ("GET", "/health")]
requests_ = st.tuples(st.sampled_from(ENDPOINTS), names, queries, bodies())


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    profiles = write_profiles(cluster, tmp_path_factory.mktemp("fuzzprofiles") / "profiles.yaml")
    with api_hub(cluster, tmp_path_factory.mktemp("fuzzhub"), profiles, GROUPS) as h:
        yield h
    clean_teams(cluster)


def test_no_request_gives_a_5xx_creates_anything_unless_accepted_or_stalls_the_loop(cluster, hub):
    token = hub.token("fuzz")
    base = f"{hub.url}/services/gpu-jobs"
    meter = StallMeter(url=f"{base}/metrics")
    before = team_objects(cluster)
    accepted: set[tuple[str, str]] = set()
    seen: list[tuple[str, int]] = []

    @SETTINGS
    @given(requests_)
    def one(req):
        (method, path), name, query, body = req
        url = base + path.replace("{n}", quote(name, safe="")) + ("?" + urlencode(query) if query else "")
        with meter.request(f"{method} {path}", f"{url[:200]} {body[:200]!r}"):
            r = requests.request(method, url, data=body if method in ("POST", "PUT") else None, timeout=60,
                                 headers={**hub.auth(token), "Content-Type": "application/json"})
        seen.append((method + " " + path, r.status_code))
        assert r.status_code < 500, (method, url, body[:300], r.status_code, r.text[:500])
        if r.status_code == 201:
            accepted.add((r.json()["namespace"], r.json()["name"]))
        elif r.status_code >= 400 and r.headers.get("Content-Type", "").startswith("application/json"):
            assert r.json()["message"], r.text  # a clear message

    one()
    print("worst stall per endpoint under the fuzz:\n" + meter.report())
    after = team_objects(cluster)
    assert after["jobs"] - before["jobs"] == accepted
    assert after["configmaps"] - before["configmaps"] <= accepted  # a Job's notebook ConfigMap has its name
    assert after["claims"] == before["claims"]
    assert len(seen) >= 100 and any(s == 400 for _, s in seen) and any(s == 200 for _, s in seen)  # it ran
    assert len({p for p, _ in seen}) == len(ENDPOINTS)  # every endpoint


def _valid(**kw) -> bytes:
    return json.dumps({**VALID, **kw}).encode()


#: The shapes and strings above, each sent for certain (the fuzz draws some of them), with what they must get.
STALLERS = [(f"shape {i}", "POST", "/jobs", raw) for i, raw in enumerate(SHAPES)] + [
    ("timeout: 1d, 100 spaces, x (pytimeparse2 took 92 s)", "POST", "/jobs", _valid(timeout="1d" + " " * 100 + "x")),
    ("timeout: 1d, 50k spaces, x", "POST", "/jobs", _valid(timeout="1d" + " " * 50_000 + "x")),
    ("timeout: 5,000 digits", "POST", "/jobs", _valid(timeout="9" * 5000 + "s")),
    ("timeout: 20k repeated units", "POST", "/jobs", _valid(timeout="1h" * 20_000)),
    ("notifications: 300k values", "PUT", "/notifications", b'{"channels": [' + b"0," * 300_000 + b"0]}"),
    ("cull warnings: deep", "POST", "/notifications/cull-warnings", b"[" * 50_000 + b"]" * 50_000),
]


@pytest.mark.parametrize("what,method,path,raw", STALLERS, ids=[s[0] for s in STALLERS])
def test_bodies_built_to_stall_a_parser_never_stall_the_loop(cluster, hub, what, method, path, raw):
    """Each answered 4xx or accepted, nothing else created, and gpu-jobs' loop never held over 50 ms."""
    base = f"{hub.url}/services/gpu-jobs"
    meter, before = StallMeter(url=f"{base}/metrics"), team_objects(cluster)
    with meter.request(f"{method} {path} ({what})"):
        r = requests.request(method, base + path, data=raw, headers=hub.auth(hub.token("fuzz")), timeout=120)
    assert r.status_code < 500, (r.status_code, r.text[:300])
    print(meter.report())
    created = team_objects(cluster)["jobs"] - before["jobs"]
    if r.status_code == 201:
        assert created == {(r.json()["namespace"], r.json()["name"])}
        assert hub.call("fuzz", "DELETE", f"/jobs/{r.json()['name']}").status_code == 200
    else:
        assert not created, (r.text[:300], created)
        assert not r.headers.get("Content-Type", "").startswith("application/json") or r.json()["message"]


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
