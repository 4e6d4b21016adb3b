"""Interactive servers in their team's fair queue, end to end: a real hub on the dev cluster, Kueue's pod
integration holding server pods at its admission gate, headless Chromium on the spawn and home pages.

Two small teams with one T4 slot each (no cohort, so no borrowing) and a short `start_timeout`, so a
queued spawn visibly outlives it. One hub for the module (its own settings, so not tests/e2e's)."""
from __future__ import annotations

import copy
import json
import re
import secrets
import time

import pytest
import requests
import yaml
from cluster.test_kueue_admission import job

from jupyterhub_gpu.builders.kueue import cluster_queue, render_kueue
from jupyterhub_gpu.contract import KUEUE_ADMISSION_GATE, KUEUE_GROUP, KUEUE_VERSION, PRIORITY_LABEL, QUEUE_LABEL
from jupyterhub_gpu.model import quantities
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu_dev.devhub import NAMESPACE, login
from jupyterhub_gpu_dev.testing import hub_with_agent, wait_until

pytestmark = pytest.mark.cluster

START_TIMEOUT = 40
GROUPS = {"qa1": ["qa-small"], "qa2": ["qa-small"], "qb1": ["qa-other"], "qc1": ["qa-big"], "qc2": ["qa-big"]}
TEAMS = {"qa-small": {"namespace": "team-qa", "quota": {"gput4": 1}},
         "qa-other": {"namespace": "team-qb", "quota": {"gput4": 1}},
         "qa-big": {"namespace": "team-qc", "quota": {"gpumig": 2}}}
#: qa-big's largest profile on the MIG pool asks more than a slice's share of a node (23.66 CPUs / 211 GiB
#: over 7 slices: 3.38 CPUs / 30.2 GiB), so the share alone would admit one server of it, not two.
BIG = {"slug": "mig-big", "display_name": "A100 MIG 1g.10gb, large", "pool": "gpumig",
       "gpu": {"kind": "mig", "profile": "1g.10gb", "count": 1}, "cpu": 5, "memory": "32Gi", "shm": "1Gi",
       "groups": ["qa-big"]}
#: A pool with no nodes that cannot grow: a spawn there fails at once (the failure the home page keeps).
GHOST_POOL = {"node_selector": {"kubernetes.azure.com/agentpool": "gpughost"},
              "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
              "gpu": {"model": "H200-141GB", "count_per_node": 8}, "max_nodes": 0}
GHOST = {"slug": "h200-ghost", "display_name": "H200 (retired pool)", "pool": "gpughost",
         "gpu": {"kind": "full", "count": 1}, "cpu": 8, "memory": "64Gi"}


class QueueHub:
    def __init__(self, url: str, token: str, cluster, profiles):
        self.url, self.token, self.cluster, self.profiles = url, token, cluster, profiles

    def api(self, method: str, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", 30)
        return requests.request(method, f"{self.url}/hub/api{path}", headers={"Authorization": f"token {self.token}"},
                                **kw)

    def server(self, user: str) -> dict | None:
        return self.api("GET", f"/users/{user}").json()["servers"].get("")

    def start(self, user: str, profile: str = "t4-shared") -> None:
        r = self.api("POST", f"/users/{user}/server", json={"profile": profile})
        assert r.status_code in (201, 202), r.text

    def wait_ready(self, user: str, timeout: float = 150) -> None:
        wait_until(lambda: (self.server(user) or {}).get("ready"), timeout, f"{user}'s server to be ready", 1)

    def progress_until(self, user: str, needle: str, timeout: float = 90) -> str:
        """The first spawn-page message (JupyterHub's progress event stream) that contains `needle`."""
        seen = []
        with self.api("GET", f"/users/{user}/server/progress", stream=True, timeout=timeout) as r:
            for line in r.iter_lines(decode_unicode=True):
                if line and line.startswith("data:"):
                    seen.append(json.loads(line[5:]).get("message") or "")
                    if needle in seen[-1]:
                        return seen[-1]
        raise AssertionError(f"no progress message with {needle!r}; seen: {seen}")

    def stop(self, user: str) -> None:
        self.api("DELETE", f"/users/{user}/server")
        wait_until(lambda: self.server(user) is None, 90, f"{user}'s server to stop", 0.5)

    def pod(self, user: str) -> dict | None:
        try:
            return self.cluster.core.read_namespaced_pod(f"jupyter-{user}", NAMESPACE).to_dict()
        except Exception as e:  # noqa: BLE001 - 404: no pod
            if getattr(e, "status", None) == 404:
                return None
            raise

    def gated(self, user: str) -> bool:
        pod = self.pod(user)
        gates = (pod or {}).get("spec", {}).get("scheduling_gates") or []
        return any(g["name"] == KUEUE_ADMISSION_GATE for g in gates)

    def workloads_of(self, user: str) -> list[dict]:
        items = self.cluster.custom.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, NAMESPACE,
                                                                  "workloads")["items"]
        return [w for w in items if any(r.get("kind") == "Pod" and r.get("name") == f"jupyter-{user}"
                                        for r in w["metadata"].get("ownerReferences") or [])]


@pytest.fixture(scope="module")
def qhub(cluster, tmp_path_factory):
    data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    data["teams"] = {**TEAMS, **data["teams"]}
    data["pools"]["gpughost"] = GHOST_POOL
    data["profiles"] += [GHOST, BIG]
    path = tmp_path_factory.mktemp("queueprofiles") / "profiles.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    # the admin's step: `gpuhub render kueue FILE | kubectl apply -f -`
    objs = render_kueue(load_profiles(path), NAMESPACE)
    kube = cluster.kube()
    for obj in objs:
        kube.apply(obj)
    wait_until(lambda: all(any(c["type"] == "Active" and c["status"] == "True" for c in (
        cluster.custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", f"team-{t}")
        .get("status") or {}).get("conditions") or []) for t in TEAMS), 60, "the test teams' ClusterQueues")
    token = secrets.token_hex(16)
    extra = (f"c.GPUSpawner.start_timeout = {START_TIMEOUT}\n"
             "c.GPUSpawner.queue_status_interval = 1\n"
             # KubeSpawner's "Please be patient" would start at 5 s: the spawn page must not show it
             "c.GPUSpawner.slow_spawn_message_threshold = 5\n")
    try:
        with hub_with_agent(cluster, tmp_path_factory.mktemp("queuehub"), path, GROUPS, {"queue-tests": token},
                            extra=extra) as (dev, agent):
            hub = QueueHub(dev.settings.url, token, cluster, load_profiles(path))
            for user in GROUPS:
                login(hub.url, user)  # the DevAuthenticator gives their groups at login
            yield hub
    finally:
        for obj in reversed(objs):
            if obj["kind"] in ("LocalQueue", "ClusterQueue") and obj["metadata"]["name"] in {
                    *TEAMS, *(f"team-{t}" for t in TEAMS)}:
                kube.delete(obj)
        kube.close()
        for team in TEAMS.values():
            cluster.core.delete_namespace(team["namespace"])


def test_team_at_quota_queues_while_another_team_starts_and_stop_removes_the_queued_pod(qhub):
    try:
        qhub.start("qa1")
        qhub.wait_ready("qa1")
        pod = qhub.pod("qa1")
        assert pod["metadata"]["labels"][QUEUE_LABEL] == "qa-small"
        assert pod["metadata"]["labels"][PRIORITY_LABEL] == "gpuhub-server-normal"
        (wl,) = qhub.workloads_of("qa1")
        assert wl["spec"]["priority"] == 10901  # the profile's server WorkloadPriorityClass, resolved by Kueue

        qhub.start("qa2")  # qa-small's one slot is taken: Kueue holds the pod at its gate
        wait_until(lambda: qhub.gated("qa2") and qhub.workloads_of("qa2"), 60, "qa2's pod queued")
        qhub.start("qb1")  # another team, its own quota: starts at once
        qhub.wait_ready("qb1")
        assert qhub.gated("qa2") and not qhub.server("qa2")["ready"]
        (waiting,) = qhub.workloads_of("qa2")
        assert not any(c["type"] == "QuotaReserved" and c["status"] == "True"
                       for c in waiting.get("status", {}).get("conditions", []))
        # Stop removes the queued pod, and with it its place (the Workload)
        qhub.stop("qa2")
        wait_until(lambda: qhub.pod("qa2") is None and not qhub.workloads_of("qa2"), 60,
                   "the queued pod and its Workload to be gone")
    finally:
        for user in ("qb1", "qa2", "qa1"):
            qhub.stop(user)


def test_a_teammates_high_priority_job_never_preempts_a_running_server(qhub):
    """Servers sit above every job priority: a `high` job waits for quota a `normal` server holds."""
    team_ns, name = TEAMS["qa-small"]["namespace"], f"job-{secrets.token_hex(3)}"
    try:
        qhub.start("qa1")  # fills qa-small's one T4 slot
        qhub.wait_ready("qa1")
        uid = qhub.pod("qa1")["metadata"]["uid"]
        high = job(name, team_ns, "qa-small", "nvidia.com/gpu")
        high["metadata"]["labels"][PRIORITY_LABEL] = "high"
        qhub.cluster.create(high)

        def evaluated() -> dict | None:  # Kueue has tried to admit it, preemption included
            items = qhub.cluster.custom.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, team_ns,
                                                                      "workloads")["items"]
            for w in items:
                if any(r.get("name") == name for r in w["metadata"].get("ownerReferences") or []):
                    return next((c for c in (w.get("status") or {}).get("conditions") or []
                                 if c["type"] == "QuotaReserved" and c.get("message")), None)
            return None

        reserved = wait_until(evaluated, 60, "Kueue to evaluate the high-priority job", 0.5)
        assert reserved["status"] == "False" and "preempt" not in reserved["message"].lower(), reserved
        pod = qhub.pod("qa1")
        assert pod and pod["metadata"]["uid"] == uid and not pod["metadata"].get("deletion_timestamp")
        (wl,) = qhub.workloads_of("qa1")
        assert not any(c["type"] == "Evicted" and c["status"] == "True" for c in wl["status"]["conditions"])
        assert qhub.cluster.batch.read_namespaced_job(name, team_ns).spec.suspend  # still queued
        assert qhub.server("qa1")["ready"]
    finally:
        qhub.cluster.clean(team_ns)
        qhub.stop("qa1")


def test_queued_spawn_waits_past_start_timeout_and_starts_when_a_server_stops(qhub, hub_page, artifacts):
    try:
        qhub.start("qa1")
        qhub.wait_ready("qa1")
        page = hub_page(qhub.url, "qa2")
        page.wait_for_selector("#gpuhub-picker")
        page.check("#profile-item-t4-shared")
        began = time.monotonic()
        page.click("#spawn_form button[type=submit]")
        message = page.locator("#progress-message")
        only_one = "Waiting in the qa-small team's queue: yours is the team's only waiting server"
        message.filter(has_text=only_one).wait_for(timeout=90_000)
        assert "Please be patient" not in message.inner_text()
        # past start_timeout, still waiting in the queue: not failed, the place kept, the time counted
        while time.monotonic() - began < START_TIMEOUT + 10:
            assert "bg-danger" not in (page.get_attribute("#progress-bar", "class") or "")
            page.wait_for_timeout(1000)
        assert "only waiting server" in message.inner_text()
        assert "patient" not in page.inner_text("#progress-log")  # nor in the event log
        waited = re.fullmatch(r"Waiting for (?:(\d+) min )?(\d+) s so far\.", page.inner_text("#gpuhub-elapsed"))
        assert waited and int(waited.group(1) or 0) * 60 + int(waited.group(2)) > START_TIMEOUT
        assert "gpuhub-indeterminate" in page.get_attribute("#progress-bar", "class")
        assert page.get_attribute("#progress-bar", "aria-valuenow") is None
        assert qhub.gated("qa2")
        page.screenshot(path=str(artifacts / "queued-spawn.png"), full_page=True)

        qhub.stop("qa1")  # a server of the team stops: the queue admits qa2, which starts
        page.wait_for_url("**/user/qa2/**", timeout=150_000)
        assert qhub.server("qa2")["ready"]
    finally:
        qhub.stop("qa2")
        qhub.stop("qa1")


def test_failure_reason_is_still_shown_after_a_reload(qhub, hub_page):
    page = hub_page(qhub.url, "qb1")
    page.wait_for_selector("#gpuhub-picker")
    page.check("#profile-item-h200-ghost")
    page.click("#spawn_form button[type=submit]")
    page.wait_for_selector("text=can never start", timeout=120_000)
    qhub_wait = time.monotonic()
    while qhub.server("qb1") is not None and time.monotonic() - qhub_wait < 60:
        page.wait_for_timeout(500)
    for where in ("home", "spawn"):
        page.goto(f"{qhub.url}/hub/{where}")
        banner = page.locator("#gpuhub-last-failure")
        banner.wait_for(timeout=30_000)
        text = banner.inner_text()
        assert "Your last server start did not work (H200 (retired pool)" in text
        assert "can never start. Choose another profile" in text
        assert banner.get_attribute("role") == "alert"
    # the next start clears it
    try:
        qhub.start("qb1")
        qhub.wait_ready("qb1")
        page.goto(f"{qhub.url}/hub/home")
        page.wait_for_selector("#start")
        assert page.locator("#gpuhub-last-failure").count() == 0
    finally:
        qhub.stop("qb1")


def test_two_slices_of_quota_start_two_servers_above_a_slices_share_and_a_cpu_bound_wait_says_cpu(qhub):
    """Issue 34: with only each slice's share of a node as CPU quota (what was rendered before) the second
    server waits on CPU, and the spawn page says so; the file's own ClusterQueue admits both."""
    cfg = qhub.profiles
    pool, big = cfg.pools["gpumig"], cfg.profile("mig-big")
    per_slot = pool.shape().cpu / 7
    assert big.cpu > per_slot and big.memory_limit > pool.shape().memory / 7  # above a slice's share
    rendered = cluster_queue(cfg, "qa-big", cfg.teams["qa-big"], NAMESPACE)
    (flavor,) = rendered["spec"]["resourceGroups"][0]["flavors"]
    res = {r["name"]: r for r in flavor["resources"]}
    assert res["cpu"]["nominalQuota"] == "10" and res["nvidia.com/mig-1g.10gb"]["nominalQuota"] == 2
    share = copy.deepcopy(rendered)
    for r in share["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
        if r["name"] == "cpu":
            r["nominalQuota"] = quantities.cpu(per_slot * 2)  # 6.76 CPUs: one server of 5
    kube = qhub.cluster.kube()
    try:
        kube.apply(share)
        qhub.start("qc1", "mig-big")
        qhub.wait_ready("qc1")
        qhub.start("qc2", "mig-big")
        said = qhub.progress_until("qc2", "CPU quota")
        assert "Your team's CPU quota on the A100 80GB pool is used up: 5 of 6.76 CPUs in use" in said, said
        assert "1 of 2 A100 80GB MIG slices is free" in said and "slices are in use" not in said, said
        assert qhub.gated("qc2")

        kube.apply(rendered)  # `gpuhub render kueue FILE | kubectl apply`: both servers fit the quota
        qhub.wait_ready("qc2")
        for user in ("qc1", "qc2"):
            assert qhub.server(user)["ready"]
            node = qhub.cluster.node_labels(qhub.pod(user)["spec"]["node_name"])
            assert all(node.get(k) == v for k, v in pool.node_selector.items())
    finally:
        kube.apply(rendered)
        kube.close()
        for user in ("qc2", "qc1"):
            qhub.stop(user)
