"""No profiles file: the real JupyterHub with GPUSpawner on the dev cluster is a plain KubeSpawner hub (the admin's
own profile_list with profile_options, KubeSpawner's form, KubeSpawner's pod), and says so once in its log."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest
from kubernetes.client import ApiException

from jupyterhub_gpu_dev.devhub import free_port, login, loopback_lines, xsrf_token

pytestmark = pytest.mark.cluster

NS = "plain-kubespawner"
PROFILE_LIST = [
    {"display_name": "Small", "slug": "small", "default": True, "kubespawner_override": {"cpu_limit": 1}},
    {"display_name": "Custom", "slug": "custom", "kubespawner_override": {"cpu_limit": 2, "mem_limit": "1G"},
     "profile_options": {"image": {"display_name": "Image", "choices": {
         "a": {"display_name": "A", "kubespawner_override": {"image": "example.org/a:1"}},
         "b": {"display_name": "B", "kubespawner_override": {"image": "example.org/b:1"}}}}}},
]


def hub_config(tmp_path, port: int) -> str:
    return f"""c = get_config()  # noqa
{loopback_lines(tmp_path, port)}
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.spawner_class = "jupyterhub_gpu.hub.spawner.GPUSpawner"
c.KubeSpawner.namespace = {NS!r}
c.KubeSpawner.image = "example.org/admin-default:1"
c.KubeSpawner.start_timeout = 60
c.KubeSpawner.profile_list = {PROFILE_LIST!r}
"""


def test_without_a_profiles_file_the_real_hub_is_a_plain_kubespawner_hub(cluster, tmp_path):
    try:
        cluster.core.create_namespace({"metadata": {"name": NS}})
    except ApiException as e:
        assert e.status == 409
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    (tmp_path / "jupyterhub_config.py").write_text(hub_config(tmp_path, port))
    env = {k: v for k, v in os.environ.items() if k != "GPUHUB_PROFILES"}
    env["KUBECONFIG"] = str(cluster.kubeconfig)
    log = tmp_path / "jupyterhub.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", "jupyterhub_config.py"], cwd=tmp_path,
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{url}/hub/api/", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
        session = login(url, "kate")
        page = session.get(f"{url}/hub/spawn", timeout=30).text
        assert 'id="kubespawner-profiles-list"' in page and "gpuhub-picker" not in page  # KubeSpawner's own form
        assert 'name="profile-option-custom--image"' in page
        r = session.post(f"{url}/hub/spawn", data={"profile": "custom", "profile-option-custom--image": "b",
                                                   "_xsrf": xsrf_token(session, page)}, timeout=60)
        assert r.status_code < 400, r.text[-2000:]
        deadline = time.monotonic() + 60
        while True:
            pods = cluster.core.list_namespaced_pod(NS, label_selector="hub.jupyter.org/username=kate").items
            if pods:
                break
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        (c,) = pods[0].spec.containers
        assert c.image == "example.org/b:1"  # the admin's choice's override, applied by KubeSpawner
        assert c.resources.limits["cpu"] == "2" and c.resources.limits["memory"] == str(2**30)
        assert not any(k.startswith("gpuhub.io/") for k in pods[0].metadata.labels)
        assert c.readiness_probe is None  # nothing of ours without a profiles file
        said = [line for line in log.read_text().splitlines() if "no profiles file" in line]
        assert len(said) == 1 and "running as a plain KubeSpawner" in said[0]
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        for pod in cluster.core.list_namespaced_pod(NS).items:
            cluster.core.delete_namespaced_pod(pod.metadata.name, NS, grace_period_seconds=0)
