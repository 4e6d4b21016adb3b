"""Submissions are all or nothing, whatever fails (cluster tier: real hub, gpu-jobs, control plane, Kueue).

Faults are real API-server refusals, not mocks: a ResourceQuota that refuses the notebook ConfigMap or the
Job, a ValidatingAdmissionPolicy that makes the rollback itself fail, a Job left without its ConfigMap (what
a lost response after a crash leaves). The service never leaves a Job that Kueue could admit (holding GPU
quota) without the ConfigMap its pod needs; its reconcile loop removes whatever a failed rollback left; and
the claim a Job would mount must be the team's labelled home-share claim, else nothing is created.
"""
from __future__ import annotations

import json
import secrets
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import pytest
import requests
from kubernetes.client.rest import ApiException

from jupyterhub_gpu_dev.testing import PARAMETERS_NB, JobsHub, hub_with_agent

pytestmark = pytest.mark.cluster

GROUPS = {"alice": ["data-science"], "rita": ["ml-research"], "admin": ["data-science"]}
NS = "team-ds"
GRACE = 5  # the service's --orphan-grace here (seconds)
JOB_LABEL = "gpuhub.io/job"


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory) -> JobsHub:
    state = tmp_path_factory.mktemp("atomichub")
    token = secrets.token_hex(16)
    extra = ('c.JupyterHub.load_roles = list(c.JupyterHub.load_roles) + [{"name": "atomic-tests-tokens", '
             '"scopes": ["tokens", "admin:users"], "services": ["jobs-tests"]}]\n'
             'for _s in c.JupyterHub.services:\n'
             '    if _s["name"] == "gpu-jobs":\n'
             f'        _s["command"] = list(_s["command"]) + ["--orphan-grace={GRACE}s"]\n')
    with hub_with_agent(cluster, state, cluster.profiles, GROUPS, {"jobs-tests": token}, extra) as (dev, agent):
        hub = JobsHub(dev.settings.url, token, dev, agent, state, {})
        cluster.wait_until(lambda: requests.get(f"{hub.url}/services/gpu-jobs/health", timeout=10).status_code == 200,
                           60, "the gpu-jobs service")
        yield hub


def ours(cluster, ns: str = NS) -> tuple[set, set]:
    jobs = {j.metadata.name for j in cluster.batch.list_namespaced_job(ns, label_selector=JOB_LABEL).items}
    cms = {c.metadata.name for c in cluster.core.list_namespaced_config_map(ns, label_selector=JOB_LABEL).items}
    return jobs, cms


@pytest.fixture
def quota(cluster):
    """Set a ResourceQuota in the team namespace and wait until the quota controller has counted usage
    (admission refuses only then); removed after the test."""
    made = []

    def set_quota(hard: dict) -> None:
        name = f"atomic-{secrets.token_hex(2)}"
        cluster.core.create_namespaced_resource_quota(NS, {"metadata": {"name": name}, "spec": {"hard": hard}})
        made.append(name)
        cluster.wait_until(lambda: (cluster.core.read_namespaced_resource_quota(name, NS).status.used or {}).keys()
                           >= hard.keys(), 30, "the quota controller to count usage")

    yield set_quota
    for name in made:
        cluster.core.delete_namespaced_resource_quota(name, NS)
    cluster.clean(NS, timeout=90)
    for cm in cluster.core.list_namespaced_config_map(NS, label_selector=JOB_LABEL).items:
        cluster.core.delete_namespaced_config_map(cm.metadata.name, NS)


def test_a_refused_configmap_creates_no_job(hub, cluster, quota):
    used = len(cluster.core.list_namespaced_config_map(NS).items)
    quota({"count/configmaps": str(used)})
    before = ours(cluster)
    workloads_before = {w["metadata"]["name"] for w in cluster.workloads(NS)}  # an earlier test's may still go
    r = hub.submit("alice", profile="t4-shared")
    assert r.status_code == 400 and "exceeded quota" in r.json()["message"], r.text
    assert ours(cluster) == before
    assert {w["metadata"]["name"] for w in cluster.workloads(NS)} <= workloads_before  # no new Workload


def test_a_refused_job_leaves_no_configmap(hub, cluster, quota):
    quota({"count/jobs.batch": "0"})
    before = ours(cluster)
    r = hub.submit("alice", profile="t4-shared")
    assert r.status_code == 400 and "exceeded quota" in r.json()["message"], r.text
    assert ours(cluster) == before


def test_a_failed_rollback_is_cleaned_by_the_reconcile_loop(hub, cluster, quota):
    """The Job is refused and so is the rollback's delete of the ConfigMap (an admission policy): the
    orphan ConfigMap stays until the policy goes, then the service's reconcile loop removes it."""
    admission = cluster.api_client()
    from kubernetes import client

    reg = client.AdmissionregistrationV1Api(admission)
    name = f"deny-cm-delete-{secrets.token_hex(2)}"
    reg.create_validating_admission_policy({
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["DELETE"], "resources": ["configmaps"]}]},
                 "validations": [{"expression": f"!has(oldObject.metadata.labels) || !('{JOB_LABEL}' in "
                                                "oldObject.metadata.labels)",
                                  "message": "test fault: deleting gpu-jobs ConfigMaps is refused"}]}})
    reg.create_validating_admission_policy_binding({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}}}})
    try:
        quota({"count/jobs.batch": "0"})
        probe = f"probe-{secrets.token_hex(2)}"  # the policy takes effect once the apiserver has loaded it

        def enforced() -> bool:
            cluster.core.create_namespaced_config_map(NS, {"metadata": {"name": probe, "labels": {JOB_LABEL: "x"}}})
            try:
                cluster.core.delete_namespaced_config_map(probe, NS)
                return False
            except ApiException as e:
                return e.status in (400, 403, 422)

        cluster.wait_until(enforced, 30, "the admission policy to refuse deletes", interval=1)
        r = hub.submit("alice", profile="t4-shared")
        assert r.status_code == 400, r.text
        jobs, cms = ours(cluster)
        assert not jobs and {c for c in cms if c != probe}, "the rollback should have failed here"
        left = {c for c in cms if c != probe}
        time.sleep(GRACE + 2)
        assert ours(cluster)[1] >= left  # still refused: the loop cannot delete it either
    finally:
        reg.delete_validating_admission_policy_binding(name)
        reg.delete_validating_admission_policy(name)
    cluster.wait_until(lambda: not ({c for c in ours(cluster)[1]} & left), 60,
                       "the reconcile loop to remove the orphan ConfigMap")
    admission.close()


def test_a_job_without_its_configmap_is_removed_before_it_can_hold_quota(hub, cluster, quota):
    """What a crash between the two creates could leave in an older order: a queued Job whose pod could
    never start. The reconcile loop deletes it (and Kueue releases its Workload)."""
    name = f"gpu-alice-orphan-{secrets.token_hex(3)}"
    labels = {JOB_LABEL: name, "gpuhub.io/user": "alice", "kueue.x-k8s.io/queue-name": "data-science",
              "gpuhub.io/profile": "t4-shared"}
    cluster.batch.create_namespaced_job(NS, {
        "metadata": {"name": name, "labels": labels, "annotations": {"gpuhub.io/username": "alice"}},
        "spec": {"suspend": True, "template": {"metadata": {"labels": {JOB_LABEL: name}}, "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "runner", "image": "runner", "args": ["gpuhub-runner"],
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                            "volumeMounts": [{"name": "snapshot", "mountPath": "/snapshot"}]}],
            "volumes": [{"name": "snapshot", "configMap": {"name": name}}]}}}})
    assert name in ours(cluster)[0]
    cluster.wait_until(lambda: name not in ours(cluster)[0], GRACE + 60, "the reconcile loop to delete the Job")
    cluster.wait_until(lambda: cluster.workload_of(NS, name) is None, 60, "its Workload to go")


def test_a_claim_that_is_not_the_home_share_is_never_mounted(hub, cluster):
    """The team's claim must carry the home-share label (made by the admin's `gpuhub render storage`); a
    claim of that name without it, or no claim, is a clear 503 and nothing is created."""
    ns = "team-mlr"
    claim = cluster.core.read_namespaced_persistent_volume_claim("gpuhub-home", ns)
    cluster.core.patch_namespaced_persistent_volume_claim("gpuhub-home", ns,
                                                          {"metadata": {"labels": {"gpuhub.io/home-share": None}}})
    try:
        r = hub.submit("rita", profile="h100-full")
        assert r.status_code == 503 and "not labelled gpuhub.io/home-share=true" in r.json()["message"], r.text
        assert ours(cluster, ns) == (set(), set())
    finally:
        cluster.core.patch_namespaced_persistent_volume_claim(
            "gpuhub-home", ns, {"metadata": {"labels": {"gpuhub.io/home-share": "true"}}})
    assert claim.metadata.labels.get("gpuhub.io/home-share") == "true"


def _post_and_hang_up(hub: JobsHub, user: str, raw: bytes, key: str) -> None:
    """POST /jobs, then close the connection without reading a byte of the answer: a lost response."""
    url = urlparse(hub.url)
    head = (f"POST /services/gpu-jobs/jobs HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: token {hub.token(user)}\r\n"
            f"Content-Type: application/json\r\nIdempotency-Key: {key}\r\nContent-Length: {len(raw)}\r\n\r\n")
    with socket.create_connection((url.hostname, url.port), timeout=30) as s:
        s.sendall(head.encode() + raw)


def test_a_lost_answer_and_its_retries_make_one_job(hub, cluster):
    """The answer to POST /jobs is never read; the same request is sent again, twice at once, under the same
    Idempotency-Key: one Job, each retry 200 with its name; the key with another body is a 422 and creates
    nothing; another user's identical key is that user's own submission."""
    from jupyterhub_gpu.services.jobs.idempotency import submission_id

    key = secrets.token_urlsafe(16)
    body = {"profile": "t4-shared", "notebook_path": "work/train.ipynb", "notebook": PARAMETERS_NB}
    selector = f"gpuhub.io/submission={submission_id('alice', key)}"

    def keyed(ns: str = NS) -> list[str]:
        return [j.metadata.name for j in cluster.batch.list_namespaced_job(ns, label_selector=selector).items]

    def retry(user: str, sent: dict) -> requests.Response:
        return requests.post(f"{hub.url}/services/gpu-jobs/jobs", json=sent, timeout=60,
                             headers={**hub.auth(hub.token(user)), "Idempotency-Key": key})

    try:
        _post_and_hang_up(hub, "alice", json.dumps(body).encode(), key)
        cluster.wait_until(lambda: keyed(), 30, "the first try's Job")
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: retry("alice", body), range(2)))
        assert [r.status_code for r in answers] == [200, 200], [r.text for r in answers]
        assert {r.json()["name"] for r in answers} == set(keyed()) and len(keyed()) == 1
        other = retry("alice", {**body, "parameters": {"epochs": 2}})
        assert other.status_code == 422 and "already used for job" in other.json()["message"], other.text
        jobs, cms = ours(cluster)
        assert len(keyed()) == 1 and keyed()[0] in jobs and keyed()[0] in cms
        rita = retry("rita", {**body, "profile": "h100-full"})  # the same key, rita's own
        assert rita.status_code == 201, rita.text
        assert rita.json()["name"] not in keyed() and rita.json()["namespace"] == "team-mlr"
    finally:
        cluster.clean(NS)
        cluster.clean("team-mlr")
