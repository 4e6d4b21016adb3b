"""The product as a platform team installs it: the zero-to-jupyterhub chart (4.4.0, as published) rendered by
the real `helm` with deploy/values.yaml, and the chart's own hub configuration (its jupyterhub_config.py and
z2jh.py, from the rendered ConfigMap, reading the rendered Secret) loaded by each supported JupyterHub.

Each breakage a new user met on day one has a test here: no picker (`singleuser.profileList: []`), every pod
manifest failing (dict-form volumes), in-hub services calling the hub through its Service, and the servers'
culler URL pointing at gpu-jobs. The pods the chart's config makes are then checked by the real apiserver."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.builders import pods as podspec
from jupyterhub_gpu.contract import ENV_CULLER_URL, ENV_HUB_API_URL, ENV_JOBS_URL
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu_dev import z2jh

#: Where the JupyterHub 5.5 interpreter of the test matrix is (`make matrix-venv`: the hub image's pins).
MATRIX_ENV = "GPUHUB_JH55_PYTHON"
PROFILES = ["cpu", "t4-shared", "a100-mig-1g10gb"]


@pytest.fixture(scope="module")
def chart() -> Path:
    try:
        return z2jh.chart_dir()
    except z2jh.ChartMissing as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def rendered(chart) -> list[dict]:
    return z2jh.template([z2jh.VALUES], chart=chart)


@pytest.fixture(scope="module")
def hub_pod(rendered, tmp_path_factory) -> z2jh.HubPod:
    return z2jh.hub_config_tree(rendered, tmp_path_factory.mktemp("hub-pod"),
                                secrets={"gpu-jobs-api-token": {"token": "test-token"}})


def interpreters() -> list:
    jh55 = os.environ.get(MATRIX_ENV) or str(Path(__file__).resolve().parents[2] / ".venv-jh55" / "bin" / "python")
    return [pytest.param(sys.executable, id="jupyterhub-6"), pytest.param(jh55, id="jupyterhub-5.5")]


def inspect(python: str, hub_pod: z2jh.HubPod, user: str, groups: list[str]) -> dict:
    """The chart's hub config, loaded by `python`, asked for this user's picker and pods
    (devcluster/jupyterhub_gpu_dev/z2jh_inspect.py). The profiles ConfigMap the values mount at /etc/gpuhub is the
    example file here. The checkout and the dev distribution's folder are on its path, installed or not."""
    if not Path(python).exists():
        pytest.skip(f"no JupyterHub 5.5 interpreter at {python}: `make matrix-venv` builds it (or set ${MATRIX_ENV})")
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, **hub_pod.env, "GPUHUB_PROFILES": str(EXAMPLE_PROFILES),
           "PYTHONPATH": os.pathsep.join([str(repo), str(repo / "devcluster")])}
    out = subprocess.run([python, "-m", "jupyterhub_gpu_dev.z2jh_inspect", str(hub_pod.root), user, ",".join(groups),
                          *PROFILES], capture_output=True, text=True, env=env, cwd=hub_pod.root, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_the_values_pass_the_charts_schema_and_a_typo_does_not(chart, tmp_path):
    assert z2jh.find(z2jh.template([z2jh.VALUES], chart=chart), "Deployment", "hub")
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump({"hub": {"extraEnvv": {"A": "b"}}}))
    with pytest.raises(subprocess.CalledProcessError) as e:
        z2jh.template([z2jh.VALUES, typo], chart=chart)
    assert "extraEnvv" in e.value.stderr  # helm names the key the schema refuses


@pytest.fixture(scope="module", params=interpreters())
def seen(request, hub_pod) -> dict:
    return inspect(request.param, hub_pod, "alice", ["data-science"])


def test_the_chart_config_runs_gpuspawner_with_the_files_profiles(seen):
    assert seen["spawner_class"] == "jupyterhub_gpu.hub.spawner.GPUSpawner"
    assert seen["errors"] == {}  # before: "No such profile: cpu. Options include:" and dict/str manifest errors
    assert seen["profile_list"] == PROFILES  # alice's group's profiles, not the chart's empty list
    assert seen["form_has_picker"]


def test_every_pod_mounts_the_charts_home_and_the_profiles_shm(seen):
    for slug, pod in seen["pods"].items():
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["home"]["persistentVolumeClaim"] == {"claimName": "gpuhub-home"}, slug
        assert podspec.SHM_VOLUME in volumes, slug
        (container,) = pod["spec"]["containers"]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["home"]["mountPath"] == "/home/jovyan" and mounts["home"]["subPath"] == "alice", slug
        assert mounts[podspec.SHM_VOLUME]["mountPath"] == "/dev/shm", slug
        assert container["securityContext"]["allowPrivilegeEscalation"] is False  # the chart's setting still holds
    gpu = seen["pods"]["t4-shared"]
    tolerated = {(t["key"], t.get("value")) for t in gpu["spec"]["tolerations"]}
    # the pool's own taint, plus the chart's user-pod tolerations (scheduling.userPods.tolerations) kept
    assert tolerated == {("sku", "gpu"), ("hub.jupyter.org/dedicated", "user"), ("hub.jupyter.org_dedicated", "user")}
    assert gpu["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_services_in_the_hub_pod_call_the_hub_where_it_listens(seen):
    """z2jh points `hub_connect_url` at the hub Service, whose NetworkPolicy does not admit the hub pod itself."""
    assert seen["hub_connect_url"] == "http://hub:8081"
    for name in ("gpu-culler", "gpu-usage", "gpu-usage-collector"):
        assert seen["services"][name]["environment"][ENV_HUB_API_URL] == "http://127.0.0.1:8081/hub/api", name
    assert "command" not in seen["services"]["gpu-jobs"] or not seen["services"]["gpu-jobs"]["command"]


def test_servers_find_gpu_jobs_and_the_culler_at_their_own_services(seen):
    env = seen["servers_environment"]
    assert env[ENV_JOBS_URL] == "http://gpu-jobs.jhub.svc:10101/services/gpu-jobs/"
    assert env[ENV_CULLER_URL] == "http://hub:10102/services/gpu-culler/"  # not gpu-jobs' Service (404 there)


def test_both_jupyterhub_versions_were_asked(seen, request):
    want = "5.5." if request.node.callspec.id.endswith("5.5") else "6."
    assert seen["jupyterhub"].startswith(want)


def test_the_apiserver_admits_the_pods_the_chart_config_makes(hub_pod, cluster, namespace):
    """Server-side dry run in a namespace that enforces Pod Security `baseline` (z2jh's user pods are not
    `restricted`): the manifests are valid Kubernetes, not only dicts that KubeSpawner accepted."""
    seen = inspect(sys.executable, hub_pod, "alice", ["data-science"])
    kube = cluster.kube()
    try:
        kube.resource("v1", "Namespace").patch(
            name=namespace, body={"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}},
            content_type="application/merge-patch+json")
        pods = kube.resource("v1", "Pod")
        for slug, pod in seen["pods"].items():  # as KubeSpawner sends it: JSON numbers for quantities
            pod["metadata"]["namespace"] = namespace
            created = pods.create(body=pod, namespace=namespace, dry_run="All").to_dict()
            assert {v["name"] for v in created["spec"]["volumes"]} >= {"home", podspec.SHM_VOLUME}, slug
        assert not pods.get(namespace=namespace).items  # a dry run creates nothing
    finally:
        kube.close()
