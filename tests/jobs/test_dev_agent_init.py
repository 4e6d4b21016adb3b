"""DEV agent (SIMULATOR): init containers as a kubelet runs them (Kubernetes semantics): one at a time, in order,
each to completion, before the pod's container starts; their states in status.initContainerStatuses; a failure
fails a restartPolicy Never pod with that init container's terminated state (its message included) and its
container never runs; otherwise the init container runs again after a back-off (CrashLoopBackOff, restartCount,
lastState). Real pods on the dev cluster's simulated nodes, run by the agent as local processes."""
from __future__ import annotations

import pytest

from jupyterhub_gpu.contract import HOME_DIR
from jupyterhub_gpu_dev.testing import dev_agent, wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture
def agent(cluster, tmp_path):
    with dev_agent(cluster, tmp_path / "agent") as a:
        yield a


def sh(name: str, script: str) -> dict:
    return {"name": name, "image": "busybox", "command": ["sh", "-c", script],
            "env": [{"name": "W", "value": "/work/order"}],
            "volumeMounts": [{"name": "work", "mountPath": "/work"}]}


def pod(namespace: str, name: str, inits: list[dict], main: dict, restart: str = "OnFailure",
        home: bool = False) -> dict:
    volumes = [{"name": "work", "emptyDir": {}}] + ([{"name": "home", "emptyDir": {}}] if home else [])
    if home:
        main = {**main, "volumeMounts": main["volumeMounts"] + [{"name": "home", "mountPath": HOME_DIR}]}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"gpuhub.io/dev-agent": "run"}},
            "spec": {"nodeSelector": {"kubernetes.azure.com/agentpool": "system"}, "restartPolicy": restart,
                     "terminationGracePeriodSeconds": 1, "volumes": volumes, "initContainers": inits,
                     "containers": [main]}}


def read(cluster, namespace: str, name: str) -> dict:
    return cluster.core.api_client.sanitize_for_serialization(cluster.core.read_namespaced_pod(name, namespace))


def work_file(agent, namespace: str, name: str):
    return agent.state_dir / "pods" / f"{namespace}_{name}" / "volumes" / "work" / "order"


def test_init_containers_run_in_order_to_completion_before_the_container(cluster, namespace, agent):
    inits = [sh("first", 'sleep 1; echo first >> "$W"'),
             sh("second", 'grep -qx first "$W" && echo second >> "$W" && echo "$HOME" > "$GPUHUB_TERMINATION_LOG"')]
    cluster.create(pod(namespace, "ordered", inits, sh("main", 'echo main >> "$W"; sleep 60'), home=True))
    seen = wait_until(lambda: (p := read(cluster, namespace, "ordered"))["status"].get("initContainerStatuses")
                      and p, 30, "the first init container's status")
    assert seen["status"]["phase"] == "Pending"
    assert {c["type"]: c["status"] for c in seen["status"]["conditions"]}["Initialized"] == "False"
    assert "main" not in (work_file(agent, namespace, "ordered").read_text()
                          if work_file(agent, namespace, "ordered").exists() else "")
    running = wait_until(lambda: (p := read(cluster, namespace, "ordered"))["status"].get("phase") == "Running"
                         and p["status"]["containerStatuses"][0].get("ready") and p, 60, "the pod to run")
    assert work_file(agent, namespace, "ordered").read_text() == "first\nsecond\nmain\n"
    done = running["status"]["initContainerStatuses"]
    assert [s["name"] for s in done] == ["first", "second"]
    assert all(s["state"]["terminated"]["exitCode"] == 0 and s["state"]["terminated"]["reason"] == "Completed"
               for s in done)
    init_home = done[1]["state"]["terminated"]["message"]  # no home volume of its own: not the container's home
    assert init_home and "/volumes/home" not in init_home
    assert {c["type"]: c["status"] for c in running["status"]["conditions"]}["Initialized"] == "True"


def test_a_failed_init_container_fails_a_never_restarting_pod_with_its_status(cluster, namespace, agent):
    inits = [sh("check", 'echo "GPU check failed on node x: no GPU" > "$GPUHUB_TERMINATION_LOG"; exit 3'),
             sh("after", 'echo after >> "$W"')]
    cluster.create(pod(namespace, "failing", inits, sh("main", 'echo main >> "$W"'), restart="Never"))
    failed = wait_until(lambda: (p := read(cluster, namespace, "failing"))["status"].get("phase") == "Failed" and p,
                        60, "the pod to fail")
    check, after = failed["status"]["initContainerStatuses"]
    assert check["state"]["terminated"]["exitCode"] == 3
    assert check["state"]["terminated"]["message"] == "GPU check failed on node x: no GPU"
    assert after["state"] == {"waiting": {"reason": "PodInitializing"}}  # the next one never ran
    assert failed["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert not work_file(agent, namespace, "failing").exists()  # neither did the container


def test_a_failed_init_container_of_a_restarting_pod_runs_again_after_a_back_off(cluster, namespace, agent):
    flaky = sh("flaky", 'if [ -e "$W" ]; then exit 0; fi; echo tried > "$W"; exit 1')
    cluster.create(pod(namespace, "flaky", [flaky], sh("main", 'echo main >> "$W"; sleep 60')))
    backoff = wait_until(lambda: (p := read(cluster, namespace, "flaky"))["status"].get("initContainerStatuses")
                         and p["status"]["initContainerStatuses"][0].get("restartCount") == 1 and p, 30, "a restart")
    status = backoff["status"]["initContainerStatuses"][0]
    assert status["lastState"]["terminated"]["exitCode"] == 1 and backoff["status"]["phase"] == "Pending"
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert work_file(agent, namespace, "flaky").read_text() == "tried\n"  # the container waits
    wait_until(lambda: read(cluster, namespace, "flaky")["status"].get("phase") == "Running", 40,
               "the pod to run after the back-off")
    wait_until(lambda: work_file(agent, namespace, "flaky").read_text() == "tried\nmain\n", 10, "the container")


def test_a_containers_subpath_folder_is_made_when_it_starts_after_the_init_containers(cluster, namespace, agent,
                                                                                      tmp_path):
    """A kubelet prepares a container's subPath folders as it creates that container, after the init containers:
    the product's home-folder step (builders/storage.py) makes a new user's home first, as the user. The agent made
    them before the init containers ran, so that step always found the folder there (issue 50 item 3)."""
    from jupyterhub_gpu_dev.storage import dev_share_objects

    share = tmp_path / "share"
    share.mkdir()
    objs = dev_share_objects(share, [namespace])
    for obj in objs:
        cluster.create(obj)
    try:
        wait_until(lambda: cluster.core.read_namespaced_persistent_volume_claim("gpuhub-home", namespace)
                   .status.phase == "Bound", 30, "the home claim to bind")
        make = {"name": "make-home", "image": "busybox", "workingDir": "/share",
                "command": ["sh", "-c", "test ! -e newuser && mkdir newuser && echo by-init > newuser/made"],
                "volumeMounts": [{"name": "home", "mountPath": "/share"}]}
        main = {"name": "main", "image": "busybox", "command": ["sh", "-c", 'cat "$HOME/made"; sleep 60'],
                "volumeMounts": [{"name": "home", "mountPath": HOME_DIR, "subPath": "newuser"}]}
        spec = pod(namespace, "first-home", [make], main, restart="Never")
        spec["spec"]["volumes"] = [{"name": "home", "persistentVolumeClaim": {"claimName": "gpuhub-home"}}]
        cluster.create(spec)
        running = wait_until(lambda: (p := read(cluster, namespace, "first-home"))["status"].get("phase")
                             in ("Running", "Failed") and p, 60, "the pod to run or fail")
        (made,) = running["status"]["initContainerStatuses"]
        assert made["state"]["terminated"]["exitCode"] == 0, made  # the folder was not there before it ran
        assert running["status"]["phase"] == "Running" and (share / "newuser" / "made").read_text() == "by-init\n"
    finally:
        cluster.clean(namespace)
        for obj in objs:
            if obj["kind"] == "PersistentVolume":
                cluster.core.delete_persistent_volume(obj["metadata"]["name"])
