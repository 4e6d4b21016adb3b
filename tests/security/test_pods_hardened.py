"""Job pods are locked down (Pod Security `restricted` and more), team namespaces enforce it, job pods get
no ingress and no route to the cloud metadata endpoints, and `gpu-jobs` has its own, minimal account.

Pure tests read the rendered manifests; the cluster tests (tests/security/test_pods_hardened_cluster.py)
show the real API server refusing a pod that breaks `restricted` and admitting the product's own.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.builders import deploy
from jupyterhub_gpu.builders.hardening import JOB_GID, JOB_UID, MAX_EPHEMERAL_STORAGE, harden
from jupyterhub_gpu.builders.jobs import JobSettings, build_job
from jupyterhub_gpu.builders.kueue import render_kueue
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

ROOT = Path(__file__).resolve().parents[2]
NB = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}


@pytest.fixture(scope="module")
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def job_pod(cfg, slug="t4-shared", settings=JobSettings()):
    objs = build_job(cfg, cfg.by_slug[slug], "alice", ["data-science", "ml-research"], "work/a.ipynb", NB,
                     settings=settings)
    (job,) = [o for o in objs if o["kind"] == "Job"]
    return job["spec"]["template"]["spec"]


@pytest.mark.parametrize("slug", ["t4-shared", "a100-mig-1g10gb", "h100-full", "a100-spot"])
def test_job_pod_is_restricted_non_root_without_token(cfg, slug):
    spec = job_pod(cfg, slug)
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": JOB_UID, "runAsGroup": JOB_GID,
                                       "fsGroup": JOB_GID, "seccompProfile": {"type": "RuntimeDefault"}}
    assert (JOB_UID, JOB_GID) == (1000, 100)  # z2jh's jovyan / users, as the user's own server
    for c in spec["containers"] + spec.get("initContainers", []):
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
        assert sc.get("privileged") is not True and sc.get("runAsUser", JOB_UID) != 0
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    # restricted allows only these volume types (no hostPath in any pod spec)
    allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
               "secret"}
    for vol in spec["volumes"]:
        assert set(vol) - {"name"} <= allowed, vol


def test_job_pod_has_a_bounded_scratch_disk(cfg):
    (c,) = job_pod(cfg)["containers"]
    assert c["resources"]["requests"]["ephemeral-storage"] == c["resources"]["limits"]["ephemeral-storage"] == "20Gi"
    (c,) = job_pod(cfg, settings=JobSettings(ephemeral_storage="5Gi"))["containers"]
    assert c["resources"]["limits"]["ephemeral-storage"] == "5Gi"


def test_ephemeral_storage_is_a_service_setting_with_bounds():
    from jupyterhub_gpu.services.jobs.options import GPUJobs

    assert GPUJobs.ephemeral_storage.help and GPUJobs.class_traits()["ephemeral_storage"].metadata.get("config")
    app = GPUJobs()
    app.initialize(["--ephemeral-storage=8Gi"])
    assert app.job_settings().ephemeral_storage == "8Gi"
    for bad in ("lots", "0", "-1Gi", "101Gi"):
        app = GPUJobs()
        app.initialize([f"--ephemeral-storage={bad}"])
        with pytest.raises(SystemExit, match="ephemeral-storage"):
            app.job_settings()


def test_harden_keeps_what_the_spec_has():
    spec = {"containers": [{"name": "x", "resources": {"limits": {"cpu": "1"}},
                            "securityContext": {"readOnlyRootFilesystem": True}}],
            "securityContext": {"supplementalGroups": [5]}}
    out = harden(spec, "1Gi")
    (c,) = out["containers"]
    assert c["resources"] == {"limits": {"cpu": "1", "ephemeral-storage": "1Gi"},
                              "requests": {"ephemeral-storage": "1Gi"}}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True and c["securityContext"]["runAsNonRoot"] is True
    assert out["securityContext"]["supplementalGroups"] == [5] and out["securityContext"]["runAsUser"] == JOB_UID
    with pytest.raises(ValueError, match=MAX_EPHEMERAL_STORAGE):
        harden(spec, "1Ti")


def test_runner_image_runs_as_the_job_uid():
    text = (ROOT / "images" / "runner" / "Dockerfile").read_text()
    assert re.search(rf"^ARG RUN_UID={JOB_UID}$", text, re.M) and re.search(r"^USER \$\{RUN_UID\}$", text, re.M)


def test_team_namespaces_enforce_restricted(cfg):
    namespaces = {o["metadata"]["name"]: o for o in render_kueue(cfg) if o["kind"] == "Namespace"}
    assert set(namespaces) == {t.namespace for t in cfg.teams.values()}
    for ns in namespaces.values():
        labels = ns["metadata"]["labels"]
        for mode in ("enforce", "warn", "audit"):
            assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"


def test_kueue_quota_covers_the_scratch_disk_so_gpus_decide(cfg):
    """Kueue refuses a workload that asks for a resource its ClusterQueue does not cover: every flavor
    covers ephemeral-storage with the most a Job may ask for per GPU slot."""
    from kubernetes.utils.quantity import parse_quantity

    for cq in (o for o in render_kueue(cfg) if o["kind"] == "ClusterQueue"):
        (group,) = cq["spec"]["resourceGroups"]
        assert "ephemeral-storage" in group["coveredResources"]
        for flavor in group["flavors"]:
            res = {r["name"]: r for r in flavor["resources"]}
            slots = max(int(r["nominalQuota"]) for n, r in res.items() if n.startswith("nvidia.com/"))
            assert parse_quantity(res["ephemeral-storage"]["nominalQuota"]) \
                == slots * parse_quantity(MAX_EPHEMERAL_STORAGE)


# ---------------------------------------------------------------------------------------------- network
def test_every_team_namespace_blocks_job_pod_ingress_and_metadata_egress(cfg):
    from jupyterhub_gpu.builders.network import METADATA_CIDRS, render_network_policies
    from jupyterhub_gpu.contract import JOB_LABEL

    assert set(METADATA_CIDRS) == {"169.254.169.254/32", "168.63.129.16/32"}
    pols = [p for p in render_network_policies(cfg, "jhub") if p["metadata"]["name"] == "gpuhub-job-pods"]
    assert {p["metadata"]["namespace"] for p in pols} == {t.namespace for t in cfg.teams.values()}
    labels = build_job(cfg, cfg.by_slug["t4-shared"], "alice", ["data-science"], "a.ipynb", NB)[0][
        "spec"]["template"]["metadata"]["labels"]
    for pol in pols:
        spec = pol["spec"]
        assert spec["podSelector"] == {"matchExpressions": [{"key": JOB_LABEL, "operator": "Exists"}]}
        assert JOB_LABEL in labels  # the product's job pods are the ones selected
        assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
        blocks = [b["ipBlock"] for rule in spec["egress"] for b in rule["to"] if "ipBlock" in b]
        v4 = [b for b in blocks if ":" not in b["cidr"]]
        assert v4 == [{"cidr": "0.0.0.0/0", "except": list(METADATA_CIDRS)}]
        # no other rule opens a way to the metadata addresses
        assert all("ipBlock" in b or "podSelector" in b for rule in spec["egress"] for b in rule["to"])
    # the generated file is what deploy/ ships (tests/unit/test_deploy.py checks it is current)
    shipped = [d for d in yaml.safe_load_all((ROOT / "deploy" / "networkpolicy.yaml").read_text()) if d]
    assert [p for p in shipped if p["metadata"]["name"] == "gpuhub-job-pods"] == pols


# ---------------------------------------------------------------------------------------------- gpu-jobs' account
#: kubernetes client method name → (API group, resource) for the kinds gpu-jobs touches.
KINDS = {"job": ("batch", "jobs"), "config_map": ("", "configmaps"), "pod": ("", "pods"), "pod_log": ("", "pods/log"),
         "persistent_volume_claim": ("", "persistentvolumeclaims"), "event": ("", "events"),
         "persistent_volume": ("", "persistentvolumes"), "secret": ("", "secrets"),
         "network_policy": ("networking.k8s.io", "networkpolicies")}
CALL = re.compile(r"\.(create|delete|read|list|patch|replace|get)_(namespaced_|cluster_)?([a-z_]+?)\s*[(,]"
                  r"([^)]{0,160})")
KUEUE_PLURALS = ("workloads", "localqueues", "clusterqueues", "resourceflavors", "workloadpriorityclasses")
#: custom resources gpu-jobs touches: Kueue's, and JobSets (multi-node jobs)
CUSTOM_PLURALS = {**dict.fromkeys(KUEUE_PLURALS, "kueue.x-k8s.io"), "jobsets": "jobset.x-k8s.io"}


def calls_in_code() -> set[tuple[str, str, str, str]]:
    """(group, resource, scope, verb) of every Kubernetes API call in services/jobs/; a list made by the
    watch-fed cache (cache.py, through an Informer) also watches."""
    found = set()
    for path in sorted((ROOT / "jupyterhub_gpu" / "services" / "jobs").glob("*.py")):
        text = path.read_text()
        for verb, scope, kind, args in CALL.findall(text):
            if kind.endswith("custom_object"):
                plural = next((p for p in CUSTOM_PLURALS if f'"{p}"' in args), None)
                assert plural, f"{path.name}: a custom-object call whose resource this test cannot read: {args!r}"
                group, resource = CUSTOM_PLURALS[plural], plural
            elif kind in KINDS:
                group, resource = KINDS[kind]
            else:
                continue  # not a Kubernetes call (create_task, get_argument, ...)
            where = "cluster" if scope == "cluster_" else "team"
            verb = {"read": "get"}.get(verb, verb)
            found.add((group, resource, where, verb))
            if path.name == "cache.py" and verb == "list":
                found.add((group, resource, where, "watch"))
    return found


def test_gpu_jobs_account_has_exactly_the_verbs_its_code_uses(cfg):
    from jupyterhub_gpu.builders.deploy import jobs_permissions
    from jupyterhub_gpu.builders.names import JOBS_ACCOUNT

    granted = {(p.group, p.resource, "cluster" if p.namespace is None else "team", v)
               for p in jobs_permissions(cfg) for v in p.verbs}
    assert all(p.account == JOBS_ACCOUNT for p in jobs_permissions(cfg))
    used = calls_in_code()
    assert used - granted == set(), "gpu-jobs calls the API without the right (add it to deploy.jobs_permissions)"
    assert granted - used == set(), \
        "gpu-jobs is granted rights it never uses (remove them from deploy.jobs_permissions)"


def test_gpu_jobs_runs_under_its_own_hardened_account():
    from jupyterhub_gpu.builders.workloads import render_gpu_jobs

    objs = {o["kind"]: o for o in render_gpu_jobs("jhub")}
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert objs["ServiceAccount"]["metadata"]["name"] == pod["serviceAccountName"] == "gpu-jobs"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == JOB_UID
    (c,) = pod["containers"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]} and c["securityContext"]["readOnlyRootFilesystem"]
    assert not pod.get("tolerations")  # never on a GPU pool
    rbac = deploy.render_rbac(load_profiles(EXAMPLE_PROFILES))
    jobs_bindings = [b for b in rbac if b["kind"].endswith("Binding") and b["subjects"][0]["name"] == "gpu-jobs"]
    # nothing in the hub's namespace: its Leases have one of their own (issue 50 item 9)
    assert {b["metadata"].get("namespace") for b in jobs_bindings} == {None, "team-ds", "team-mlr",
                                                                      "jhub-gpuhub-leases"}
    (hub_role,) = [r for r in rbac if r["kind"] == "Role" and r["metadata"]["namespace"] == "jhub-gpuhub-leases"
                   and r["metadata"]["name"] in {b["roleRef"]["name"] for b in jobs_bindings}]
    assert hub_role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],  # its locks only
                                  "verbs": ["create", "delete", "get", "update"]}]


def test_gpu_operator_reaches_tainted_gpu_pools(cfg):
    """NFD's worker labels the NVIDIA PCI device the operator keys on: it must tolerate every GPU taint too."""
    from jupyterhub_gpu.builders.names import DEVICE_PLUGIN_CONFIG
    from jupyterhub_gpu.builders.workloads import render_gpu_operator_values

    values = render_gpu_operator_values(cfg)
    want = [t.toleration() for t in cfg.gpu_taints()]
    assert {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot",
            "effect": "NoSchedule"} in want
    assert values["daemonsets"]["tolerations"] == want
    assert values["node-feature-discovery"]["worker"]["tolerations"] == want
    assert values["devicePlugin"]["config"] == {"name": DEVICE_PLUGIN_CONFIG, "default": "default"}
    assert {"name": "WITH_REBOOT", "value": "true"} in values["migManager"]["env"]


# ---------------------------------------------------------------------------------------------- cluster tier
# The real API server of the dev cluster enforces Pod Security in the team namespaces `gpuhub render kueue`
# made; the real gpu-jobs service, running with nothing but its own ServiceAccount's token and the rights
# `render_rbac` gives it, runs a job to Succeeded there.

def _team_pod(name: str, spec: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-ds"}, "spec": spec}


PLAIN = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["true"],
                                                   "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]}


@pytest.mark.cluster
@pytest.mark.parametrize("what,spec", [
    ("no securityContext", PLAIN),
    ("root", {**harden(PLAIN, "1Gi"), "securityContext": {"runAsUser": 0,
                                                          "seccompProfile": {"type": "RuntimeDefault"}}}),
    ("privilege escalation", {**harden(PLAIN, "1Gi"), "containers": [
        {**harden(PLAIN, "1Gi")["containers"][0], "securityContext": {"allowPrivilegeEscalation": True,
                                                                     "capabilities": {"drop": ["ALL"]}}}]}),
    ("hostPath volume", {**harden(PLAIN, "1Gi"), "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}),
])
def test_api_server_refuses_a_pod_breaking_restricted_in_a_team_namespace(cluster, what, spec):
    from jupyterhub_gpu_dev.kube import KubeError

    labels = cluster.core.read_namespace("team-ds").metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    with pytest.raises(KubeError) as refused:
        cluster.create(_team_pod(f"bad-{re.sub('[^a-z]+', '-', what)}", spec))
    assert refused.value.status == 403 and 'violates PodSecurity "restricted' in str(refused.value), what
    assert not cluster.core.list_namespaced_pod("team-ds", label_selector="!gpuhub.io/job").items


@pytest.mark.cluster
def test_api_server_admits_the_hardened_pod(cluster):
    """The same pod as above with `harden()` passes (server-side dry run: nothing is created)."""
    from kubernetes.client import ApiClient

    body = _team_pod("hardened", harden(PLAIN, "1Gi"))
    created = cluster.core.create_namespaced_pod("team-ds", body, dry_run="All")
    assert created.spec.security_context.run_as_user == JOB_UID
    assert ApiClient().sanitize_for_serialization(created.spec).get("automountServiceAccountToken") is False


@pytest.fixture(scope="module")
def jobs_sa_kubeconfig(cluster, tmp_path_factory) -> Path:
    """A kubeconfig holding only a token of the ServiceAccount jhub/gpu-jobs, with the rights `render_rbac`
    gives that account (and nothing else)."""
    from jupyterhub_gpu_dev.kube import KubeError

    cfg = load_profiles(cluster.profiles)
    kube = cluster.kube()
    try:
        for obj in ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "jhub"}},
                    {"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": "gpu-jobs", "namespace": "jhub"}}):
            try:
                kube.create(obj)
            except KubeError as e:
                if e.status != 409:
                    raise
        rbac = deploy.render_rbac(cfg, "jhub")
        bound = {(b["roleRef"]["kind"], b["metadata"].get("namespace"), b["roleRef"]["name"]) for b in rbac
                 if b["kind"].endswith("Binding") and b["subjects"][0]["name"] == "gpu-jobs"}
        for obj in rbac:
            key = (obj["kind"].removesuffix("Binding"), obj["metadata"].get("namespace"),
                   obj["roleRef"]["name"] if "roleRef" in obj else obj["metadata"]["name"])
            if key in bound or obj["kind"] == "Namespace":  # its Leases' namespace, which rbac.yaml makes
                kube.apply(obj)
    finally:
        kube.close()
    token = cluster.core.create_namespaced_service_account_token(
        "gpu-jobs", "jhub", {"spec": {"expirationSeconds": 7200}}).status.token
    kc = yaml.safe_load(cluster.kubeconfig.read_text())
    kc["users"] = [{"name": "gpu-jobs", "user": {"token": token}}]
    for ctx in kc["contexts"]:
        ctx["context"]["user"] = "gpu-jobs"
    path = tmp_path_factory.mktemp("gpu-jobs-sa") / "kubeconfig"
    path.write_text(yaml.safe_dump(kc))
    return path


@pytest.fixture(scope="module")
def hub_with_jobs_sa(cluster, jobs_sa_kubeconfig, tmp_path_factory):
    """A real dev hub whose gpu-jobs service runs with the ServiceAccount's kubeconfig only."""
    import secrets
    import time as _time

    import requests
    from jobs.test_service_cluster import GROUPS, JobsHub

    from jupyterhub_gpu_dev.testing import hub_with_agent

    state = tmp_path_factory.mktemp("hardenedhub")
    token = secrets.token_hex(16)
    extra = (f'c.JupyterHub.load_roles = list(c.JupyterHub.load_roles) + [{{"name": "hardened-tests", '
             f'"scopes": ["tokens", "admin:users"], "services": ["hardened-tests"]}}]\n'
             f'for _s in c.JupyterHub.services:\n'
             f'    if _s["name"] == "gpu-jobs":\n'
             f'        _s["environment"]["KUBECONFIG"] = {str(jobs_sa_kubeconfig)!r}\n')
    with hub_with_agent(cluster, state, cluster.profiles, GROUPS, {"hardened-tests": token}, extra) as (dev, agent):
        hub = JobsHub(dev.settings.url, token, dev, agent, state, {})
        deadline = _time.monotonic() + 90
        while requests.get(f"{hub.url}/services/gpu-jobs/health", timeout=10).status_code != 200:
            assert _time.monotonic() < deadline, "gpu-jobs did not come up:\n" + dev.log_tail(60)
            _time.sleep(0.5)
        yield hub


RUN_NB = {"nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "cells": [{"cell_type": "code", "id": "r", "metadata": {}, "outputs": [], "execution_count": None,
                     "source": "import os\nprint('uid-ok', os.environ['GPUHUB_JOB'])"}]}


@pytest.mark.cluster
def test_product_job_pod_is_admitted_and_succeeds_under_restricted_with_gpu_jobs_own_account(cluster, hub_with_jobs_sa):
    hub = hub_with_jobs_sa
    r = hub.submit("alice", profile="t4-shared", notebook=RUN_NB, notebook_path="hardened.ipynb")
    assert r.status_code == 201, r.text
    name = r.json()["name"]
    try:
        final = cluster.wait_until(lambda: (s := hub.status("alice", name))["state"] in ("Succeeded", "Failed") and s,
                                   240, "the job to finish", interval=1)
        logs = hub.call("alice", "GET", f"/jobs/{name}/logs")
        assert final["state"] == "Succeeded", (final, logs.text, hub.process.log_tail(40))
        assert logs.status_code == 200 and "uid-ok" in logs.text
        assert name in [j["name"] for j in hub.call("alice", "GET", "/jobs").json()["jobs"]]
        (pod,) = cluster.core.list_namespaced_pod("team-ds",
                                                  label_selector=f"batch.kubernetes.io/job-name={name}").items
        spec = cluster.api_client().sanitize_for_serialization(pod.spec)
        assert spec["automountServiceAccountToken"] is False
        assert not any(v["name"].startswith("kube-api-access") for v in spec["volumes"])  # no token was mounted
        assert spec["securityContext"]["runAsUser"] == JOB_UID and spec["securityContext"]["runAsNonRoot"] is True
        (c,) = spec["containers"]
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert c["resources"]["limits"]["ephemeral-storage"] == JobSettings().ephemeral_storage
    finally:
        assert hub.call("alice", "DELETE", f"/jobs/{name}").status_code in (200, 404)
    cluster.wait_until(
        lambda: not cluster.batch.list_namespaced_job("team-ds", label_selector=f"gpuhub.io/job={name}").items,
        60, "the cancelled Job to go")


@pytest.mark.cluster
def test_gpu_jobs_has_nothing_but_its_bindings(cluster, hub_with_jobs_sa):
    """Without its RoleBinding in team-ds the service cannot create a Job there: it acts with its own
    account, not an admin's."""
    from kubernetes import client

    hub = hub_with_jobs_sa
    rbac = client.RbacAuthorizationV1Api(cluster.api_client())
    saved = rbac.read_namespaced_role_binding("gpuhub-jobs", "team-ds")
    rbac.delete_namespaced_role_binding("gpuhub-jobs", "team-ds")
    try:
        before = {j.metadata.name for j in cluster.batch.list_namespaced_job("team-ds").items}
        r = hub.submit("alice", profile="t4-shared", notebook=RUN_NB, notebook_path="denied.ipynb")
        assert r.status_code >= 400 and "system:serviceaccount:jhub:gpu-jobs" in r.text, r.text
        assert {j.metadata.name for j in cluster.batch.list_namespaced_job("team-ds").items} == before
    finally:
        saved.metadata.resource_version = None
        rbac.create_namespaced_role_binding("team-ds", saved)
