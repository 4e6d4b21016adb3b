"""A preemptible interactive server, end to end (issue 28 item 6): a real hub on the dev cluster, Kueue's pod
integration, the dev agent playing the kubelet's grace period. A team with one T4 slot runs a server of a
`preemptible: true` profile; a `low` job of the team needs the slot: Kueue preempts the server (its class ranks
below every job's), the server says at gpuhub/stopping that it is stopping while it still answers (the open
JupyterLab's cue to warn and save), the job is admitted, and the hub's home page says the server was preempted,
with "Start it again" and %gpu_submit. One small team of its own (no cohort), so nothing else shares its quota.
The opposite, that a non-preemptible server is never preempted by a job, is tests/queue/test_queued_servers.py."""
from __future__ import annotations

import secrets

import pytest
import requests
import yaml
from cluster.test_kueue_admission import admitted, job

from jupyterhub_gpu.builders.kueue import PREEMPTIBLE_PRIORITY_PREFIX, preemptible_priority_values, render_kueue
from jupyterhub_gpu.contract import KUEUE_GROUP, KUEUE_VERSION, PREEMPTIBLE_LABEL, PRIORITY_LABEL
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu_dev.devhub import NAMESPACE, login
from jupyterhub_gpu_dev.testing import hub_with_agent, wait_until

pytestmark = pytest.mark.cluster

TEAM, QUEUE_NS, USER, GRACE = "qp-preempt", "team-qp", "qp1", 30
PROFILE = {"slug": "t4-preemptible", "display_name": "T4, preemptible", "pool": "gput4",
           "gpu": {"kind": "time-sliced", "count": 1}, "cpu": 1, "memory": "2Gi", "groups": [TEAM],
           "preemptible": True}


def active(cluster) -> bool:
    cq = cluster.custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", f"team-{TEAM}")
    return any(c["type"] == "Active" and c["status"] == "True" for c in (cq.get("status") or {}).get("conditions")
               or [])


class PreemptHub:
    def __init__(self, url: str, token: str, cluster, cfg):
        self.url, self.token, self.cluster, self.cfg = url, token, cluster, cfg

    def api(self, method: str, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", 30)
        return requests.request(method, f"{self.url}/hub/api{path}", headers={"Authorization": f"token {self.token}"},
                                **kw)

    def server(self) -> dict | None:
        return self.api("GET", f"/users/{USER}").json()["servers"].get("")

    def pod(self) -> dict | None:
        try:
            return self.cluster.core.read_namespaced_pod(f"jupyter-{USER}", NAMESPACE).to_dict()
        except Exception as e:  # noqa: BLE001 - 404: no pod
            if getattr(e, "status", None) == 404:
                return None
            raise

    def workload(self) -> dict | None:
        items = self.cluster.custom.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, NAMESPACE,
                                                                  "workloads")["items"]
        return next((w for w in items if any(r.get("kind") == "Pod" and r.get("name") == f"jupyter-{USER}"
                                             for r in w["metadata"].get("ownerReferences") or [])), None)


@pytest.fixture(scope="module")
def phub(cluster, tmp_path_factory):
    data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    data["teams"] = {TEAM: {"namespace": QUEUE_NS, "quota": {"gput4": 1}}, **data["teams"]}
    data["profiles"].append(PROFILE)
    path = tmp_path_factory.mktemp("preemptprofiles") / "profiles.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    cfg = load_profiles(path)
    # the test team's own objects and the preemptible classes (`gpuhub render kueue FILE | kubectl apply -f -`)
    objs = [o for o in render_kueue(cfg, NAMESPACE) if o["metadata"]["name"] in (TEAM, f"team-{TEAM}", QUEUE_NS)
            or o["metadata"]["name"].startswith(PREEMPTIBLE_PRIORITY_PREFIX)]
    kube = cluster.kube()
    for obj in objs:
        kube.apply(obj)
    wait_until(lambda: active(cluster), 60, "the test team's ClusterQueue")
    token = secrets.token_hex(16)
    extra = (f"c.GPUSpawner.preemption_grace_period = {GRACE}\n"
             "c.GPUSpawner.poll_interval = 2\n")  # the hub notices a stopped server within seconds
    try:
        with hub_with_agent(cluster, tmp_path_factory.mktemp("preempthub"), path, {USER: [TEAM]},
                            {"preempt-tests": token}, extra=extra) as (dev, agent):
            login(dev.settings.url, USER)  # the DevAuthenticator gives the groups at login
            yield PreemptHub(dev.settings.url, token, cluster, cfg)
    finally:
        for obj in reversed(objs):
            if obj["kind"] != "Namespace":
                kube.delete(obj)
        kube.close()
        cluster.clean(QUEUE_NS)
        cluster.core.delete_namespace(QUEUE_NS)


def test_a_teams_job_preempts_the_preemptible_server_after_a_warning_and_the_home_page_says_why(phub):
    hub, name = phub, f"job-{secrets.token_hex(3)}"
    try:
        r = hub.api("POST", f"/users/{USER}/server", json={"profile": PROFILE["slug"]})
        assert r.status_code in (201, 202), r.text
        wait_until(lambda: (hub.server() or {}).get("ready"), 150, "the preemptible server to be ready", 1)
        pod = hub.pod()
        labels = pod["metadata"]["labels"]
        assert labels[PRIORITY_LABEL] == "gpuhub-preemptible-normal" and labels[PREEMPTIBLE_LABEL] == "true"
        assert pod["spec"]["termination_grace_period_seconds"] == GRACE
        priority = hub.workload()["spec"]["priority"]  # the class's value, resolved by Kueue
        assert priority == preemptible_priority_values(hub.cfg)["normal"] < min(hub.cfg.priorities.values())

        # the user's JupyterLab asks the server about its end (its token; at the pod's own address, which answers
        # while the server saves, after the hub may have dropped its proxy route)
        session = login(hub.url, USER)  # the user makes a token of their own (the test's service token may not)
        r = session.post(f"{hub.url}/hub/api/users/{USER}/tokens", json={"note": "preemption test", "expires_in": 600},
                         headers={"X-XSRFToken": session.cookies.get("_xsrf", path="/hub/")}, timeout=30)
        assert r.status_code == 201, r.text
        auth = {"Authorization": f"token {r.json()['token']}"}
        port = pod["spec"]["containers"][0]["ports"][0]["container_port"]
        stopping_url = f"http://{pod['status']['pod_ip']}:{port}/user/{USER}/gpuhub/stopping"
        before = requests.get(stopping_url, headers=auth, timeout=10)
        assert before.ok and before.json() == {"preemptible": True, "stopping": False, "grace_s": GRACE}, before.text

        low = job(name, QUEUE_NS, TEAM, "nvidia.com/gpu")
        low["metadata"]["labels"][PRIORITY_LABEL] = "low"  # even the lowest job priority outranks the server
        hub.cluster.create(low)

        def warned() -> dict | None:
            try:
                said = requests.get(stopping_url, headers=auth, timeout=5).json()
            except (requests.RequestException, ValueError):
                return None
            return said if said.get("stopping") else None

        said = wait_until(warned, 60, "the server to say it is stopping", 0.5)
        assert 0 < said["seconds_left"] <= GRACE and "%gpu_submit" in said["message"], said
        wait_until(lambda: admitted(hub.cluster, QUEUE_NS, name), 60, "the job to be admitted in the server's place")
        wait_until(lambda: hub.server() is None, 90, "the hub to notice the server stopped", 1)

        home = login(hub.url, USER).get(f"{hub.url}/hub/home", timeout=30)
        assert home.ok and 'data-kind="stopped"' in home.text, home.text[-3000:]
        assert "was preempted" in home.text and "a training job of your team" in home.text
        assert "Start it again" in home.text and "%gpu_submit" in home.text
    finally:
        hub.cluster.clean(QUEUE_NS)
        hub.api("DELETE", f"/users/{USER}/server")
        wait_until(lambda: hub.server() is None and hub.pod() is None, 90, "the server and its pod to be gone", 0.5)
