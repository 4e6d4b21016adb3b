"""Showback of pods whose GPUs came through DRA: the lifetime records the devices its ResourceClaims were allocated
(a server with alternatives: a whole A100 or a 3g.40gb slice), the store keeps them (an older file gains the column
on the writer's open), and the collector reads the claims with one list per namespace, against a tiny scripted API
server; a refused list costs only that detail."""
from __future__ import annotations

import json
import sqlite3
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client

from jupyterhub_gpu.contract import PROFILE_LABEL, USER_ANNOTATION
from jupyterhub_gpu.services.usage import accounting as acc
from jupyterhub_gpu.services.usage import collect
from jupyterhub_gpu.services.usage.live import UsageReader
from jupyterhub_gpu.services.usage.store import UsageStore
from tests.unit.test_dra_capacity import CFG, claim

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)
RULES, TEAMS = acc.rules_and_teams(CFG)
WHOLE = "gpu.nvidia.com/aks-draa100-0/gpu-1"
SLICE = "gpu.nvidia.com/aks-draa100mig-0/gpu-0-mig-3g40gb-9-4"


def server(name: str, claim_name: str | None, end: datetime | None = None) -> dict:
    status = {"phase": "Running", "startTime": T0.isoformat()}
    if claim_name:
        status["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    if end:
        finished = {"terminated": {"finishedAt": end.isoformat()}}
        status |= {"phase": "Succeeded", "containerStatuses": [{"state": finished}]}
    return {"metadata": {"name": name, "namespace": "jhub", "uid": name, "labels": {PROFILE_LABEL: "a100-any"},
                         "annotations": {USER_ANNOTATION: "ann"}},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpuhub-a100-any"}]},
            "status": status}


def test_a_lifetime_says_which_devices_its_claim_got():
    claims = {"jupyter-ann-gpu-a": claim("jupyter-ann-gpu-a", [("aks-draa100mig-0", "gpu-0-mig-3g40gb-9-4")]),
              "jupyter-bob-gpu-b": claim("jupyter-bob-gpu-b", [("aks-draa100-0", "gpu-1")])}
    ann = acc.lifetime_of(server("jupyter-ann", "jupyter-ann-gpu-a"), RULES, TEAMS, claims=claims)
    bob = acc.lifetime_of(server("jupyter-bob", "jupyter-bob-gpu-b"), RULES, TEAMS, claims=claims)
    assert (ann.devices, bob.devices) == (SLICE, WHOLE)  # the same profile: one got a slice, one a whole A100
    # no claim read (not allocated yet, or gone): nothing made up
    assert acc.lifetime_of(server("jupyter-cy", "jupyter-cy-gpu-c"), RULES, TEAMS, claims=claims).devices == ""
    assert acc.lifetime_of(server("jupyter-ann", "jupyter-ann-gpu-a"), RULES, TEAMS).devices == ""


def test_the_devices_stay_when_the_claim_goes_before_the_pods_last_list():
    running = acc.lifetime_of(server("jupyter-ann", "c"), RULES, TEAMS, claims={"c": claim("c", [("n", "gpu-0")])})
    ended = acc.lifetime_of(server("jupyter-ann", "c", end=T0 + timedelta(hours=2)), RULES, TEAMS, claims={})
    still, done = acc.close_missing({running.uid: running}, [ended], T0 + timedelta(hours=3))
    assert [d.devices for d in done] == ["gpu.nvidia.com/n/gpu-0"] and still[running.uid].devices == done[0].devices


def test_a_server_is_priced_by_the_choice_its_claim_got():
    """a100-any at $8/h per whole A100 (a 2-GPU node at $16/h), else a 3g.40gb slice (a node of 2 slices at $8/h:
    $4/h each): the allocation result's subrequest (`gpu/c1-mig-3g-40gb`) says which it got."""
    pools = {"dra-a100": CFG.pools["dra-a100"].model_copy(update={"cost_per_node_hour": 16.0}),
             "dra-a100mig": CFG.pools["dra-a100mig"].model_copy(update={"cost_per_node_hour": 8.0})}
    rules, _ = acc.rules_and_teams(CFG.model_copy(update={"pools": CFG.pools | pools}))
    assert rules["a100-any"].choices == ((1, 8.0), (1, 4.0)) and rules["a100-dra"].choices == ()

    def got(request: str, device: str) -> dict:
        c = claim("c", [("n", device)])
        c["status"]["allocation"]["devices"]["results"][0]["request"] = request
        return {"c": c}

    def priced(claims: dict) -> tuple[int, float]:
        lt = acc.lifetime_of(server("jupyter-ann", "c"), rules, TEAMS, claims=claims)
        return lt.gpus, lt.hourly_cost

    assert priced(got("gpu/c0-dra-a100", "gpu-1")) == (1, 8.0)
    assert priced(got("gpu/c1-mig-3g-40gb", "gpu-0-mig-3g40gb-9-4")) == (1, 4.0)
    assert priced({}) == (1, 8.0)  # claim not read: its profile's own price, as before
    assert priced(got("gpu/c9-elsewhere", "gpu-0")) == (1, 8.0)  # a choice this file does not have: the same
    slice_then_gone = acc.lifetime_of(server("jupyter-ann", "c"), rules, TEAMS,
                                      claims=got("gpu/c1-mig-3g-40gb", "gpu-0-mig-3g40gb-9-4"))
    ended = acc.lifetime_of(server("jupyter-ann", "c", end=T0 + timedelta(hours=2)), rules, TEAMS, claims={})
    _, (done,) = acc.close_missing({slice_then_gone.uid: slice_then_gone}, [ended], T0 + timedelta(hours=3))
    assert (done.gpus, done.hourly_cost) == (1, 4.0)  # its claim went first: the price it was allocated stays
    (row,) = acc.aggregate([done], T0, T0 + timedelta(hours=3), "user")
    assert row.cost == pytest.approx(8.0)  # 2 h of a $4/h slice


def old_store(path) -> None:
    """A usage.sqlite as the version before wrote it (no devices column), with one row."""
    conn = sqlite3.connect(path / "usage.sqlite")
    conn.executescript("""
        CREATE TABLE finished (uid TEXT PRIMARY KEY NOT NULL, kind TEXT NOT NULL, namespace TEXT NOT NULL,
            pod TEXT NOT NULL, user TEXT NOT NULL, team TEXT NOT NULL, profile TEXT NOT NULL, job TEXT NOT NULL,
            gpus INTEGER NOT NULL, hourly_cost REAL NOT NULL, start_us INTEGER NOT NULL, end_us INTEGER NOT NULL,
            node TEXT NOT NULL, spot INTEGER NOT NULL, ended_by TEXT NOT NULL);
        CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value);
        INSERT INTO finished VALUES ('old', 'server', 'jhub', 'jupyter-old', 'ann', '', 'a100-dra', '', 1, 3.5,
            1767600000000000, 1767603600000000, 'n', 0, '');""")
    conn.commit()
    conn.close()


def test_the_store_keeps_the_devices_and_an_older_file_gains_the_column(tmp_path):
    old_store(tmp_path)
    reader = UsageReader(tmp_path)
    assert [lt.devices for lt in reader.finished()] == [""]  # a file not migrated yet reads as before
    store = UsageStore(tmp_path)
    lt = acc.lifetime_of(server("jupyter-ann", "c", end=T0 + timedelta(hours=1)), RULES, TEAMS,
                         claims={"c": claim("c", [("aks-draa100mig-0", "gpu-0-mig-3g40gb-9-4")])})
    assert store.append_finished([lt]) == 1
    assert {x.uid: x.devices for x in store.finished()} == {"old": "", "jupyter-ann": SLICE}
    assert {x.uid: x.devices for x in UsageReader(tmp_path).finished()} == {"old": "", "jupyter-ann": SLICE}
    store.close()
    UsageStore(tmp_path).close()  # opening a migrated file again changes nothing


class FakeAPI(BaseHTTPRequestHandler):
    """GET the pods and ResourceClaims of jhub (and empty team lists); `claims_status` answers the claims list."""

    pods: list[dict] = []
    claims: list[dict] = []
    claims_status = 200
    requests: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        path = self.path.split("?")[0]
        type(self).requests.append(path)
        items = {"/api/v1/namespaces/jhub/pods": self.pods,
                 "/apis/resource.k8s.io/v1/namespaces/jhub/resourceclaims": self.claims}.get(path, [])
        status = self.claims_status if path.endswith("/resourceclaims") else 200
        body = json.dumps({"metadata": {"resourceVersion": "9"}, "items": items} if status == 200
                          else {"kind": "Status", "code": status, "message": "resourceclaims is forbidden"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def api():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeAPI)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{httpd.server_address[1]}"
    FakeAPI.pods = [server("jupyter-ann", "jupyter-ann-gpu-a")]
    FakeAPI.claims = [claim("jupyter-ann-gpu-a", [("aks-draa100mig-0", "gpu-0-mig-3g40gb-9-4")])]
    FakeAPI.claims_status, FakeAPI.requests = 200, []
    with client.ApiClient(cfg) as api_client:
        yield api_client
    httpd.shutdown()
    httpd.server_close()


def test_the_collector_reads_the_claims_once_per_namespace_with_claimed_pods(api):
    lifetimes, _ = collect.read_cluster(api, CFG, "jhub", T0 + timedelta(hours=1))
    assert [lt.devices for lt in lifetimes] == [SLICE]
    assert FakeAPI.requests.count("/apis/resource.k8s.io/v1/namespaces/jhub/resourceclaims") == 1
    assert not any(p.endswith("team-ds/resourceclaims") for p in FakeAPI.requests)  # no pod there has a claim


def test_a_refused_claims_list_costs_only_the_devices(api):
    FakeAPI.claims_status = 403
    lifetimes, _ = collect.read_cluster(api, CFG, "jhub", T0 + timedelta(hours=1))
    assert [(lt.pod, lt.gpus, lt.devices) for lt in lifetimes] == [("jupyter-ann", 1, "")]


def test_the_picker_says_what_each_choice_costs():
    from jupyterhub_gpu.hub.picker import price_line

    pools = {"dra-a100": CFG.pools["dra-a100"].model_copy(update={"cost_per_node_hour": 16.0}),
             "dra-a100mig": CFG.pools["dra-a100mig"].model_copy(update={"cost_per_node_hour": 8.0})}
    cfg = CFG.model_copy(update={"pools": CFG.pools | pools})
    assert price_line(cfg, cfg.by_slug["a100-any"], 8.0) == \
        "$8.00/hour; $4.00/hour with 1 A100 80GB MIG (DRA) 3g.40gb slice instead"
    assert price_line(cfg, cfg.by_slug["a100-dra"], 8.0) == "$8.00/hour"
    assert price_line(CFG, CFG.by_slug["a100-any"], 0.0) == ""  # no prices in the file: no line
