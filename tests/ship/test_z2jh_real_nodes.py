"""The product as a platform team installs it (`gpuhub dev --z2jh`): the z2jh 4.4.0 chart with deploy/values.yaml on
real kubelet nodes, every pod a container of an image `make images` built. Through proxy-public only, as a user:
log in, get a GPU server (a container on the GPU node, Pod Security `restricted`, uid 1000, the home claim mounted
by the kubelet, the GPU check run for real against the device plugin's devices), `%gpu_submit` from a kernel of it
(the runner image on the GPU node, the output notebook in the server's home), and a cancel that reaches the runner
as SIGTERM. Then `helm upgrade` with a changed profiles file reaches the running hub.
"""
from __future__ import annotations

import ipaddress
import json
import time
from pathlib import Path

import pytest
import requests
from ship.lab_kernel import LabKernel

USER = "data-science-user"
PROFILE = "t4-shared"


def wait(check, timeout: float, what: str, interval: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def container_ids(pod: dict) -> list[str]:
    statuses = (pod["status"].get("initContainerStatuses") or []) + (pod["status"].get("containerStatuses") or [])
    return [c.get("containerID", "") for c in statuses]


def kube_client(installed):
    """A CoreV1Api on the dev cluster's admin kubeconfig, as `kubectl` uses it."""
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(str(installed.cluster.kubeconfig)))


def notebook(*sources: str) -> dict:
    cells = [{"cell_type": "code", "metadata": {"tags": ["parameters"]} if i == 0 else {}, "source": src,
              "outputs": [], "execution_count": None} for i, src in enumerate(sources)]
    return {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}


@pytest.fixture(scope="module")
def gpu_server(z2jh_install):
    """The user's GPU server, started through proxy-public; (installed, token, server URL)."""
    _, token = z2jh_install.login(USER)
    server = z2jh_install.start_server(USER, token, PROFILE)
    return z2jh_install, token, f"{z2jh_install.url}{server['url'].rstrip('/')}"


def test_hub_proxy_and_gpu_jobs_are_containers_on_the_system_node_under_restricted(z2jh_install):
    kube = z2jh_install.kube()
    try:
        ns = kube.read("v1", "Namespace", "jhub")
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        system = z2jh_install.nodes["system"]["name"]
        for selector, count in (("component=hub", 1), ("component=proxy", 1), ("app.kubernetes.io/name=gpu-jobs", 2)):
            pods = kube.list("v1", "Pod", "jhub", label_selector=selector)
            assert len(pods) == count, (selector, [p["metadata"]["name"] for p in pods])  # gpu-jobs: two replicas
            for pod in pods:
                assert pod["spec"]["nodeName"] == system, (selector, pod["spec"]["nodeName"])
                assert all(cid.startswith("containerd://") for cid in container_ids(pod)), container_ids(pod)
        for jobs in kube.list("v1", "Pod", "jhub", label_selector="app.kubernetes.io/name=gpu-jobs"):
            assert jobs["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
        node = kube.read("v1", "Node", system)
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2.")
        assert not node["spec"].get("taints")
    finally:
        kube.close()


def test_login_shows_the_users_profiles_through_proxy_public(z2jh_install):
    session, _ = z2jh_install.login(USER)
    page = session.get(f"{z2jh_install.url}/hub/spawn", timeout=60)
    assert page.status_code == 200
    assert PROFILE in page.text and "Shared T4" in page.text
    assert requests.post(f"{z2jh_install.url}/hub/login?next=", data={"username": USER, "password": "wrong"},
                         timeout=30, allow_redirects=False).status_code != 302


def test_the_admins_console_answers_admins_through_proxy_public_and_refuses_users(z2jh_install):
    """The gpu-admin service in the hub pod, through the hub Service's extra port and the hub's NetworkPolicy:
    the admin (an admin_users entry) gets the page after the hub's OAuth; a user gets 403."""
    admin, _ = z2jh_install.login("admin")

    def page():
        r = admin.get(f"{z2jh_install.url}/services/gpu-admin/", timeout=60)
        return r if r.status_code == 200 and "GPU hub admin console" in r.text else None

    r = wait(page, 120, "the admins' console through proxy-public")
    assert "t4-shared" in r.text and "Content-Security-Policy" in r.headers
    user, _ = z2jh_install.login(USER)
    assert user.get(f"{z2jh_install.url}/services/gpu-admin/", timeout=60).status_code == 403


def test_gpu_server_is_a_restricted_container_on_the_gpu_node_with_its_home(gpu_server):
    installed, token, url = gpu_server
    kube = installed.kube()
    try:
        pod = kube.read("v1", "Pod", f"jupyter-{USER}", "jhub")
    finally:
        kube.close()
    assert pod["spec"]["nodeName"] == installed.nodes["gpu"]["name"]
    assert all(cid.startswith("containerd://") for cid in container_ids(pod))
    check, home = pod["status"]["initContainerStatuses"]
    assert check["name"] == "gpuhub-gpu-check" and check["state"]["terminated"]["exitCode"] == 0
    assert home["name"] == "gpuhub-home-folder" and home["state"]["terminated"]["exitCode"] == 0
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    kernel = LabKernel(url, token, "probe.ipynb")
    ran = kernel.execute("import os, subprocess, pathlib\n"
                         "pathlib.Path('written-in-the-server.txt').write_text('hello')\n"
                         "print(os.getuid(), os.getgid(), os.environ.get('NVIDIA_VISIBLE_DEVICES'))\n"
                         "print(subprocess.run(['nvidia-smi', '-L'], capture_output=True, text=True).stdout)")
    assert ran.status == "ok", ran.error
    uid_line, smi = ran.stdout.split("\n", 1)
    assert uid_line.split()[:2] == ["1000", "100"] and uid_line.split()[2].isdigit()
    assert "Tesla T4" in smi or "T4" in smi, smi
    written = installed.homes / USER / "written-in-the-server.txt"  # the kubelet mounted the home claim
    assert written.read_text() == "hello" and written.stat().st_uid == 1000


def test_kubectl_exec_and_logs_reach_the_real_nodes_kubelets(gpu_server):
    """`kubectl exec` and `kubectl logs` go through the API server to the pod's kubelet: it must dial the node by
    its InternalIP (nothing resolves a node's name) and be admitted by the kubelet's webhook authorisation."""
    from kubernetes.stream import stream

    installed, _, _ = gpu_server
    core = kube_client(installed)
    out = stream(core.connect_get_namespaced_pod_exec, f"jupyter-{USER}", "jhub", container="notebook",
                 command=["sh", "-c", "id -u; test -w /home/jovyan && echo home-writable"], stdout=True, stderr=True,
                 stdin=False, tty=False, _request_timeout=60)
    assert out.split() == ["1000", "home-writable"], out
    log = core.read_namespaced_pod_log(f"jupyter-{USER}", "jhub", container="notebook", tail_lines=200)
    assert "jupyterhub" in log.lower() or "jupyter" in log.lower(), log[-2000:]


def test_gpu_submit_runs_the_runner_image_on_the_gpu_node_and_cancel_sends_sigterm(gpu_server):
    installed, token, url = gpu_server
    h = {"Authorization": f"token {token}"}
    # over 64 KiB of log before the steps: read from the wrong end (limitBytes alone), %gpu_logs showed the filler
    short = notebook("steps = 2", "print(('filler ' * 20 + '\\n') * 1000, flush=True)\nfor i in range(steps):\n"
                                  "    print('step', i, flush=True)\nprint('finished', flush=True)")
    assert requests.put(f"{url}/api/contents/short.ipynb", headers=h, timeout=60,
                        json={"type": "notebook", "format": "json", "content": short}).status_code in (200, 201)
    kernel = LabKernel(url, token, "short.ipynb")
    ran = kernel.execute("%gpu_submit --profile t4-shared --param steps=3", 180)
    assert ran.status == "ok", ran.error
    kube = installed.kube()
    try:
        def job_named(prefix: str):
            jobs = [j for j in kube.list("batch/v1", "Job", "team-ds") if j["metadata"]["name"].startswith(prefix)]
            return jobs[0] if jobs else None

        job = wait(lambda: job_named(f"gpu-{USER}-short-"), 60, "the short job")
        name = job["metadata"]["name"]

        def finished_output():  # papermill saves the output after each cell: until the last one ran
            r = requests.get(f"{url}/api/contents/gpu-jobs/{name}/short.ipynb", headers=h, timeout=30)
            if r.status_code != 200:
                return None
            texts = "".join("".join(o.get("text", "")) for c in r.json()["content"]["cells"]
                            for o in c.get("outputs", []))
            return texts if "finished" in texts else None

        texts = wait(finished_output, 240, "the short job's finished output notebook in the server's home")
        assert "step 2" in texts  # the parameter reached the notebook
        (pod,) = kube.list("v1", "Pod", "team-ds", label_selector=f"job-name={name}")
        # the API server reaches the GPU node's kubelet (by its InternalIP) for the log, as on AKS
        core = kube_client(installed)

        def runner_done():
            log = core.read_namespaced_pod_log(pod["metadata"]["name"], "team-ds")
            return log if "done; output notebook" in log else None

        assert "step 2" in wait(runner_done, 120, "the runner's last line in the job pod's log, through the API")
        logs = kernel.execute(f"%gpu_logs {name}", 120)  # gpu-jobs reads the same log's END through the API
        assert logs.status == "ok" and "step 2" in logs.stdout and "done; output notebook" in logs.stdout, \
            (logs.error, logs.stdout[-2000:])
        assert len(logs.stdout.encode()) <= 64 * 1024 + 100  # the last 64 KiB (issue 50 item 2), not all of it
        assert pod["spec"]["nodeName"] == installed.nodes["gpu"]["name"]
        assert "runner" in pod["status"]["containerStatuses"][0]["image"]
        assert all(cid.startswith("containerd://") for cid in container_ids(pod))

        long = notebook("steps = 600", "import os, time, pathlib\nckpt = pathlib.Path(os.environ['CHECKPOINT_DIR'])\n"
                                       "for i in range(steps):\n    (ckpt / 'step').write_text(str(i))\n"
                                       "    print('step', i, flush=True)\n    time.sleep(1)")
        assert requests.put(f"{url}/api/contents/long.ipynb", headers=h, timeout=60,
                            json={"type": "notebook", "format": "json", "content": long}).status_code in (200, 201)
        kernel = LabKernel(url, token, "long.ipynb")
        assert kernel.execute("%gpu_submit --profile t4-shared", 180).status == "ok"
        long_name = wait(lambda: job_named(f"gpu-{USER}-long-"), 60, "the long job")["metadata"]["name"]
        step = installed.homes / USER / "gpu-jobs" / long_name / "checkpoint" / "step"
        wait(lambda: step.is_file() and int(step.read_text() or 0) >= 2, 240, "the long job's checkpoints")
        cancelled = kernel.execute(f"%gpu_cancel {long_name}", 120)
        assert cancelled.status == "ok", cancelled.error
        partial = installed.homes / USER / "gpu-jobs" / long_name / "long.ipynb"

        def stopped():
            try:
                nb = json.loads(partial.read_text())
            except (OSError, ValueError):
                return None
            return nb if nb.get("metadata", {}).get("gpuhub", {}).get("stopped") else None

        nb = wait(stopped, 120, "the runner's partial output, marked as stopped by SIGTERM")
        assert "asked to stop" in nb["metadata"]["gpuhub"]["stopped"]
        assert int(step.read_text()) < 599
        wait(lambda: not kube.list("v1", "Pod", "team-ds", label_selector=f"job-name={long_name}"), 120,
             "the cancelled job's pod to go")
    finally:
        kube.close()


def test_helm_upgrade_with_a_changed_profiles_file_reaches_the_running_hub(z2jh_install, tmp_path):
    from jupyterhub_gpu_dev import z2jh_dev

    changed = tmp_path / "profiles.yaml"
    changed.write_text(z2jh_install.profiles.read_text().replace("Shared T4 (time-sliced)", "Shared T4 for class"))
    url, _ = z2jh_dev.install(z2jh_install.cluster.kubeconfig, changed, z2jh_install.users,
                              z2jh_install.cluster.root / "z2jh", z2jh_install.nodes["system"]["ip"])
    assert url == z2jh_install.url
    session, _ = z2jh_install.login("admin")  # in every group; no server of its own (the spawn page, not a redirect)
    wait(lambda: "Shared T4 for class" in session.get(f"{url}/hub/spawn", timeout=60).text, 180,
         "the spawn page to show the changed profiles file")


def test_a_kwok_pools_server_runs_under_the_dev_agent_and_answers_through_proxy_public(z2jh_install):
    """The file's other GPU pools stay KWOK pools: the dev agent (SIMULATOR) runs their pods as local processes
    in its own namespace, on pod IPs the real nodes route to, and they reach the hub's Service by name."""
    _, token = z2jh_install.login("admin")
    server = z2jh_install.start_server("admin", token, "a100-mig-1g10gb")
    kube = z2jh_install.kube()
    try:
        pod = kube.read("v1", "Pod", "jupyter-admin", "jhub")
    finally:
        kube.close()
    assert pod["spec"]["nodeName"].startswith("aks-gpumig-")  # a KWOK node, not a real one
    agent = z2jh_install.nodes["agent"]
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(agent["pod_cidr"])
    r = requests.get(f"{z2jh_install.url}{server['url']}api/status", headers={"Authorization": f"token {token}"},
                     timeout=60)
    answered = f"{r.status_code} {r.headers.get('Content-Type')} from {r.url} after {[h.url for h in r.history]}"
    assert r.status_code == 200 and r.headers.get("Content-Type", "").startswith("application/json"), \
        f"{answered}:\n{r.text[:1500]}"
    assert "last_activity" in r.json(), answered


def test_a_new_users_first_cpu_server_starts_on_a_home_nobody_prepared(z2jh_install):
    """A user the hub has never seen, created through the API as an admin (or an SSO login) does: no folder of
    theirs on the share. The kubelet alone would make it root's and the server would crash-loop on ~/.local; the
    pod's home-folder step makes it theirs. The example's 2-CPU profile starts on this machine's real node."""
    user = "first-login-user"
    _, token = z2jh_install.login("admin")
    h = {"Authorization": f"token {token}"}
    assert not (z2jh_install.homes / user).exists()
    assert requests.post(f"{z2jh_install.url}/hub/api/users/{user}", headers=h, timeout=60).status_code == 201
    r = requests.post(f"{z2jh_install.url}/hub/api/groups/data-science/users", headers=h, json={"users": [user]},
                      timeout=60)
    assert r.status_code == 200, r.text
    z2jh_install.start_server(user, token, "cpu")
    home = z2jh_install.homes / user
    assert home.is_dir() and (home.stat().st_uid, home.stat().st_gid) == (1000, 100)
    assert (home / ".local").is_dir() or any(home.iterdir())  # the server wrote its own files there
    kube = z2jh_install.kube()
    try:
        pod = kube.read("v1", "Pod", f"jupyter-{user}", "jhub")
    finally:
        kube.close()
    assert pod["spec"]["nodeName"] == z2jh_install.nodes["system"]["name"]
    assert all(c.get("restartCount", 0) == 0 for c in pod["status"]["containerStatuses"])
    requests.delete(f"{z2jh_install.url}/hub/api/users/{user}/server", headers=h, timeout=60)


def test_cluster_status_calls_the_running_install_healthy_not_leftovers(z2jh_install):
    """While `gpuhub dev --z2jh` runs, its nodes' containerd shims are a live cluster's, not a crashed run's."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, GPUHUB_CLUSTER_DIR=str(z2jh_install.cluster.root))
    out = subprocess.run([str(Path(sys.executable).parent / "gpuhub"), "cluster", "status"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "left over" not in out.stdout and f"KUBECONFIG={z2jh_install.cluster.kubeconfig}" in out.stdout, out.stdout


def test_ctrl_c_stops_every_container_mount_and_the_nodes_network(z2jh_install):
    """Last: like `gpuhub dev`, one Ctrl-C stops everything the command started, containers included."""
    import signal
    import subprocess

    from jupyterhub_gpu_dev import realnodes

    nodes = realnodes.recorded(z2jh_install.cluster.layout)
    assert nodes, "the real nodes were not recorded"
    z2jh_install.proc.send_signal(signal.SIGINT)
    assert z2jh_install.proc.wait(120) == 0, z2jh_install.log.read_text()[-3000:]
    assert not realnodes.shim_processes([Path(n["root"]) for n in nodes]), "containerd shims outlived the stop"
    for n in nodes:
        assert not [d for d in realnodes.cgroup_dirs(n["cgroup_root"]) if d.exists()], "cgroups left"
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(z2jh_install.cluster.root.resolve()) + "/nodes" not in mounts
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n["netns"] in namespaces for n in nodes)
    assert subprocess.run(["ip", "link", "show", realnodes.NODE_BRIDGE], capture_output=True).returncode != 0
    assert "stopped" in z2jh_install.log.read_text()
