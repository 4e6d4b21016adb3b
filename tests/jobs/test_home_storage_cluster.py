"""Job outputs land in the user's real home (cluster tier: real hub, CHP, control plane with its PV binder,
Kueue, the dev agent). Storage is Kubernetes objects only: the home share is statically bound
PersistentVolumes and claims (hub namespace and team namespaces); servers mount `gpuhub-home` with their
`{username}` subPath as z2jh's static storage does, Jobs mount the same folder through their team's claim.
What the user sees is checked through their own server's Jupyter contents API (and a kernel of it). The example's
read-only dataset is bound the same way, to a stand-in folder, in the hub's and data-science's namespaces."""
from __future__ import annotations

import json
import secrets
import time

import pytest
import requests
from ship.lab_kernel import LabKernel

from jupyterhub_gpu_dev.storage import cluster_datasets
from jupyterhub_gpu_dev.testing import JobsHub, hub_with_agent

pytestmark = pytest.mark.cluster

GROUPS = {"alice": ["data-science"], "dave": ["data-science"], "admin": ["data-science"], "mallory": ["ml-research"]}
TEAM = "team-ds"


def cell(source: str) -> dict:
    return {"cell_type": "code", "id": secrets.token_hex(4), "metadata": {}, "source": source, "outputs": [],
            "execution_count": None}


def notebook(*sources: str) -> dict:
    return {"nbformat": 4, "nbformat_minor": 5, "cells": [cell(s) for s in sources],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory) -> JobsHub:
    state = tmp_path_factory.mktemp("storagehub")
    token = secrets.token_hex(16)
    extra = ('c.JupyterHub.load_roles = list(c.JupyterHub.load_roles) + [{"name": "storage-tests-tokens", '
             '"scopes": ["tokens", "admin:users", "admin:servers"], "services": ["jobs-tests"]}]')
    with hub_with_agent(cluster, state, cluster.profiles, GROUPS, {"jobs-tests": token}, extra) as (dev, agent):
        hub = JobsHub(dev.settings.url, token, dev, agent, state, {})
        cluster.wait_until(lambda: requests.get(f"{hub.url}/services/gpu-jobs/health", timeout=10).status_code == 200,
                           60, "the gpu-jobs service")
        yield hub
    cluster.clean(TEAM, timeout=90)


class Server:
    """A user's running server, reached with their own token (as JupyterLab reaches it)."""

    def __init__(self, hub: JobsHub, user: str):
        self.hub, self.user = hub, user
        hub.token(user)  # logs in: the DevAuthenticator gives the groups
        r = requests.post(f"{hub.url}/hub/api/users/{user}/tokens", headers=hub.auth(hub.admin_token),
                          json={"scopes": [f"access:servers!user={user}"], "note": "contents"}, timeout=30)
        assert r.status_code == 201, r.text
        self.token = r.json()["token"]

    def start(self) -> "Server":
        r = requests.post(f"{self.hub.url}/hub/api/users/{self.user}/server",
                          headers=self.hub.auth(self.hub.admin_token),
                          json={"profile": "cpu"}, timeout=60)
        assert r.status_code in (201, 202), r.text

        def ready():
            model = requests.get(f"{self.hub.url}/hub/api/users/{self.user}", timeout=30,
                                 headers=self.hub.auth(self.hub.admin_token)).json()
            return (model.get("servers") or {}).get("", {}).get("ready")

        deadline = time.monotonic() + 180
        while not ready():
            assert time.monotonic() < deadline, (f"{self.user}'s server never became ready:\n"
                                                 + self.hub.process.log_tail())
            time.sleep(1)
        return self

    def contents(self, path: str, method: str = "GET", token: str | None = None, **kw) -> requests.Response:
        return requests.request(method, f"{self.hub.url}/user/{self.user}/api/contents/{path}", timeout=30,
                                headers=self.hub.auth(token or self.token), **kw)


def run_job(hub: JobsHub, cluster, user: str, nb: dict, path: str) -> tuple[str, dict]:
    r = hub.submit(user, profile="t4-shared", notebook=nb, notebook_path=path)
    assert r.status_code == 201, r.text
    name = r.json()["name"]
    final = cluster.wait_until(lambda: (s := hub.status(user, name))["state"] in ("Succeeded", "Failed") and s,
                               180, f"{user}'s job to finish", interval=0.5)
    assert final["state"] == "Succeeded", (final, hub.call(user, "GET", f"/jobs/{name}/logs").text)
    return name, final


def outputs(nb: dict) -> str:
    return json.dumps([c.get("outputs") for c in nb["cells"]])


def test_a_job_reads_home_and_its_output_and_checkpoints_are_in_the_users_server_only(hub, cluster, hub_page,
                                                                                      artifacts):
    alice = Server(hub, "alice").start()
    # an input file, written through alice's own server (as she would upload it in JupyterLab)
    assert alice.contents("work", "PUT", json={"type": "directory"}).status_code in (200, 201)
    r = alice.contents("work/input.txt", "PUT", json={"type": "file", "format": "text",
                                                      "content": "hello from alice's home"})
    assert r.status_code in (200, 201), r.text
    nb = notebook("import os\nprint('INPUT', open('input.txt').read())",  # relative to the notebook, as in JupyterLab
                  "open(os.path.join(os.environ['CHECKPOINT_DIR'], 'step'), 'w').write('7')\nprint('CKPT done')")
    name, _ = run_job(hub, cluster, "alice", nb, "work/reader.ipynb")

    listing = alice.contents(f"gpu-jobs/{name}")
    assert listing.status_code == 200, listing.text
    entries = {e["name"]: e["type"] for e in listing.json()["content"]}
    assert entries.get("reader.ipynb") == "notebook" and entries.get("checkpoint") == "directory", entries
    out = alice.contents(f"gpu-jobs/{name}/reader.ipynb").json()["content"]
    assert "INPUT hello from alice's home" in outputs(out) and "CKPT done" in outputs(out)
    ckpt = alice.contents(f"gpu-jobs/{name}/checkpoint").json()["content"]
    assert [e["name"] for e in ckpt] == ["step"]
    # and it opens in alice's JupyterLab (Chromium), with the output the job wrote
    page = hub_page(hub.url, "alice", width=1300, height=900)
    page.goto(f"{hub.url}/user/alice/lab/tree/gpu-jobs/{name}/reader.ipynb?reset", timeout=180_000)
    page.locator(".jp-OutputArea-output:has-text(\"INPUT hello from alice's home\")").first.wait_for(timeout=120_000)
    page.screenshot(path=str(artifacts / "job-output-in-home.png"))

    # dave (same team, same share) sees none of it: not in his server, not with his token on hers
    dave = Server(hub, "dave").start()
    assert dave.contents(f"gpu-jobs/{name}").status_code == 404
    assert dave.contents("work/input.txt").status_code == 404
    assert alice.contents(f"gpu-jobs/{name}", token=dave.token).status_code in (302, 403, 404)
    # and dave's job's home is his own folder of the share
    nb = notebook("import os\nprint('HOME', sorted(os.listdir(os.path.expanduser('~'))))\n"
                  f"print('SEES', os.path.exists(os.path.expanduser('~/gpu-jobs/{name}')), "
                  "os.path.exists(os.path.expanduser('~/work/input.txt')))")
    mine, _ = run_job(hub, cluster, "dave", nb, "peek.ipynb")
    seen = outputs(dave.contents(f"gpu-jobs/{mine}/peek.ipynb").json()["content"])
    assert "SEES False False" in seen, seen
    assert alice.contents(f"gpu-jobs/{mine}").status_code == 404

    # Kubernetes objects only: claims bound by the controller-manager to PVs; no pod spec uses hostPath
    for ns in ("jhub", TEAM):
        claim = cluster.core.read_namespaced_persistent_volume_claim("gpuhub-home", ns)
        assert claim.status.phase == "Bound" and "ReadWriteMany" in claim.status.access_modes
        pv = cluster.core.read_persistent_volume(claim.spec.volume_name)
        assert pv.spec.claim_ref.uid == claim.metadata.uid and pv.status.phase == "Bound"
        assert (claim.metadata.annotations or {}).get("pv.kubernetes.io/bind-completed") == "yes"  # the binder's mark
        for pod in cluster.core.list_namespaced_pod(ns).items:
            assert not any(v.host_path for v in pod.spec.volumes or []), pod.metadata.name
    server_pod = next(p for p in cluster.core.list_namespaced_pod("jhub").items
                      if (p.metadata.annotations or {}).get("hub.jupyter.org/username") == "alice")
    (mount,) = [m for m in server_pod.spec.containers[0].volume_mounts if m.name == "home"]
    assert (mount.mount_path, mount.sub_path) == ("/home/jovyan", "alice")
    for user in ("alice", "dave"):
        requests.delete(f"{hub.url}/hub/api/users/{user}/server", headers=hub.auth(hub.admin_token), timeout=60)


def test_a_read_write_once_claim_is_not_mounted_on_a_second_node(hub, cluster, namespace, tmp_path):
    """The dev agent keeps access modes as a real cluster would: a ReadWriteOnce claim in use on one node
    gives a pod on another node a FailedAttachVolume event and no start."""
    share = tmp_path / "rwo"
    share.mkdir()
    pv_name = f"rwo-{namespace}"
    cluster.core.create_persistent_volume({
        "metadata": {"name": pv_name}, "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(share)},
            "claimRef": {"namespace": namespace, "name": "data"}}})
    try:
        cluster.core.create_namespaced_persistent_volume_claim(namespace, {
            "metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                                                   "volumeName": pv_name,
                                                   "resources": {"requests": {"storage": "1Gi"}}}})
        cluster.wait_until(lambda: cluster.core.read_namespaced_persistent_volume_claim("data", namespace).status.phase
                           == "Bound", 30, "the claim to be bound")
        nodes = sorted(n.metadata.name for n in cluster.core.list_node(
            label_selector="kubernetes.azure.com/agentpool=system").items)[:2]
        for i, node in enumerate(nodes):
            cluster.core.create_namespaced_pod(namespace, {
                "metadata": {"name": f"p{i}", "labels": {"gpuhub.io/dev-agent": "run"}},
                "spec": {"nodeName": node, "restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"],
                                         "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
                         "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}})
            if i == 0:
                cluster.wait_until(lambda: (cluster.core.read_namespaced_pod("p0", namespace).status.pod_ip or "")
                                   .startswith("127.11."), 60, "the first pod to be started by the agent")

        def refused():
            events = cluster.core.list_namespaced_event(namespace, field_selector="involvedObject.name=p1").items
            return [e.message for e in events if e.reason == "FailedAttachVolume"]

        (message, *_) = cluster.wait_until(refused, 30, "a FailedAttachVolume event for the second pod")
        assert "Multi-Attach error" in message and "ReadWriteOnce" in message
        second = cluster.core.read_namespaced_pod("p1", namespace).status
        assert second.phase == "Pending" and not second.pod_ip
    finally:
        for pod in ("p0", "p1"):
            try:
                cluster.core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
            except Exception:  # noqa: BLE001 - cleanup
                pass
        cluster.wait_until(lambda: not cluster.core.list_namespaced_pod(namespace).items, 60, "the pods to go")
        for call in (lambda: cluster.core.delete_namespaced_persistent_volume_claim("data", namespace),
                     lambda: cluster.core.delete_persistent_volume(pv_name)):
            try:
                call()
            except Exception:  # noqa: BLE001 - cleanup
                pass


#: What a kernel in a server or a job's notebook reports of the example's dataset (data-science's).
PEEK_DATASET = ("import os, pathlib\nroot = os.environ.get('GPUHUB_DATASETS')\nprint('ROOT', root)\n"
                "if root:\n    data = pathlib.Path(root) / 'imagenet-mini'\n"
                "    print('SEES', (data / 'README.txt').read_text().strip())\n"
                "    try:\n        (data / 'mine.txt').write_text('x')\n        print('WROTE')\n"
                "    except OSError as e:\n        print('REFUSED', e.strerror)")


def test_a_teams_dataset_is_the_same_read_only_folder_in_its_servers_and_jobs_and_no_one_elses(hub, cluster):
    readme = "SEES dataset imagenet-mini: the dev cluster's stand-in for gpuhubdatasets/imagenet-mini"
    alice = Server(hub, "alice").start()
    seen = LabKernel(f"{hub.url}/user/alice", alice.token, "peek.ipynb").execute(PEEK_DATASET).stdout
    assert readme in seen and "REFUSED Read-only file system" in seen, seen
    name, _ = run_job(hub, cluster, "alice", notebook(PEEK_DATASET), "peek-job.ipynb")
    in_job = outputs(alice.contents(f"gpu-jobs/{name}/peek-job.ipynb").json()["content"])
    assert readme in in_job and "REFUSED Read-only file system" in in_job, in_job
    folder = cluster_datasets(cluster.kubeconfig) / "imagenet-mini"
    assert sorted(p.name for p in folder.iterdir()) == ["README.txt"]  # neither wrote
    job_pod = next(p for p in cluster.core.list_namespaced_pod(TEAM).items if p.metadata.name.startswith(name))
    server_pod = next(p for p in cluster.core.list_namespaced_pod("jhub").items
                      if (p.metadata.annotations or {}).get("hub.jupyter.org/username") == "alice")
    mounts = [[(m.name, m.mount_path, m.read_only) for m in p.spec.containers[0].volume_mounts
               if m.name.startswith("dataset-")] for p in (server_pod, job_pod)]
    assert mounts[0] == mounts[1] == [("dataset-imagenet-mini", "/datasets/imagenet-mini", True)]

    # ml-research's servers get none of it: no volume, no folder
    mallory = Server(hub, "mallory").start()
    other = LabKernel(f"{hub.url}/user/mallory", mallory.token, "peek.ipynb").execute(PEEK_DATASET).stdout
    assert "ROOT None" in other and "SEES" not in other, other
    for user in ("alice", "mallory"):
        requests.delete(f"{hub.url}/hub/api/users/{user}/server", headers=hub.auth(hub.admin_token), timeout=60)


def test_a_teams_servers_and_jobs_run_under_its_workload_identity_and_no_one_elses(hub, cluster):
    """The example's ml-research has an Azure workload identity, data-science none: mallory's server (hub
    namespace) and job (her team's) run under the team's ServiceAccount, annotated with its client id, and carry
    the label the AKS webhook looks for; alice's carry neither. No webhook on the dev cluster, so this is what
    the hub and gpu-jobs create, as the API server stored it."""
    from jupyterhub_gpu.builders.identity import WI_CLIENT_ID, WI_USE

    account, client_id = "gpuhub-ml-research-identity", "11111111-2222-3333-4444-555555555555"
    def stopped(user: str) -> bool:  # an earlier test's DELETE may still be stopping it
        return not requests.get(f"{hub.url}/hub/api/users/{user}", headers=hub.auth(hub.admin_token),
                                timeout=30).json().get("servers")

    try:
        for user in ("alice", "mallory"):
            cluster.wait_until(lambda: stopped(user), 120, f"{user}'s earlier server stopped")
            Server(hub, user).start()
        jobs = {user: run_job(hub, cluster, user, notebook("print('hello')"), "hello.ipynb")[0]
                for user in ("alice", "mallory")}

        def server_of(user: str):
            return next(p for p in cluster.core.list_namespaced_pod("jhub").items
                        if (p.metadata.annotations or {}).get("hub.jupyter.org/username") == user)

        def job_pod_of(user: str, namespace: str):
            return next(p for p in cluster.core.list_namespaced_pod(namespace).items
                        if p.metadata.name.startswith(jobs[user]))

        for pod in (server_of("mallory"), job_pod_of("mallory", "team-mlr")):
            assert pod.spec.service_account_name == account, pod.metadata.name
            assert (pod.metadata.labels or {}).get(WI_USE) == "true", pod.metadata.name
        for pod in (server_of("alice"), job_pod_of("alice", TEAM)):
            assert pod.spec.service_account_name != account, pod.metadata.name
            assert WI_USE not in (pod.metadata.labels or {}), pod.metadata.name
        for ns in ("jhub", "team-mlr"):
            sa = cluster.core.read_namespaced_service_account(account, ns)
            assert (sa.metadata.annotations or {}).get(WI_CLIENT_ID) == client_id
        assert not [sa.metadata.name for sa in cluster.core.list_namespaced_service_account(TEAM).items
                    if WI_CLIENT_ID in (sa.metadata.annotations or {})]  # data-science has no identity
    finally:
        for user in ("alice", "mallory"):
            requests.delete(f"{hub.url}/hub/api/users/{user}/server", headers=hub.auth(hub.admin_token), timeout=60)
        cluster.clean("team-mlr", timeout=90)
