"""The GPU check runs where user files cannot reach it (finding 6 of issue 25): GPU servers' pods get it as an
init container (same image, the GPU env only, no volume: no home, ~/.jupyter or .pth), and the hub takes only
that container's verdict for a failing node; words a server container wrote (user code runs there) are quoted
as that server's failure and change nothing for the node. Through GPUSpawner's real manifest and checks."""
from __future__ import annotations

import pytest

from jupyterhub_gpu.contract import GPU_CHECK_CONTAINER, GPU_CHECK_FAILED, GPU_CHECK_ONLY
from jupyterhub_gpu.hub.render_pod import make_spawner, pod_manifest
from jupyterhub_gpu.hub.spawner import GPUSpawner, SpawnImpossible
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES

CHECK_WORDS = "GPU check failed on node aks-gput4-0: this server was given 1 x nvidia.com/gpu, but ..."


async def test_a_gpu_servers_pod_runs_the_check_first_with_no_volume_and_no_token():
    pod = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ["data-science"])
    server = pod["spec"]["containers"][0]
    (check,) = [c for c in pod["spec"]["initContainers"] if c["name"] == GPU_CHECK_CONTAINER]
    assert check["command"] == ["gpuhub-singleuser", GPU_CHECK_ONLY] and check["image"] == server["image"]
    assert "volumeMounts" not in check and server["volumeMounts"]  # the server mounts /dev/shm (and home)
    names = {e["name"] for e in check["env"]}
    assert {"GPUHUB_GPU_KIND", "GPUHUB_GPU_COUNT", "GPUHUB_GPU_RESOURCE", "GPUHUB_NODE_NAME"} <= names
    assert not any(n.startswith("JUPYTERHUB_") for n in names)  # no token, no hub URLs
    assert check["resources"] == server["resources"] and check["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert check["terminationMessagePolicy"] == "File"
    cpu = await pod_manifest(EXAMPLE_PROFILES, "cpu", "alice", ["data-science"])
    assert not any(c["name"] == GPU_CHECK_CONTAINER for c in cpu["spec"].get("initContainers") or [])
    off = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ["data-science"], gpu_check_init_container=False)
    assert not off["spec"].get("initContainers")  # the admin's choice for images without gpuhub-singleuser


def pod_with(init_status: dict | None = None, server_status: dict | None = None) -> dict:
    status = {"phase": "Pending"}
    if init_status:
        status["initContainerStatuses"] = [{"name": GPU_CHECK_CONTAINER, "ready": False, "restartCount": 1,
                                            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                            "lastState": {"terminated": init_status}}]
    if server_status:
        status["phase"] = "Failed"
        status["containerStatuses"] = [{"name": "notebook", "ready": False, "state": {"terminated": server_status}}]
    return {"metadata": {"name": "jupyter-x", "namespace": "jhub"}, "spec": {"nodeName": "aks-gput4-0"},
            "status": status}


@pytest.fixture
async def spawners():
    GPUSpawner._gpu_faults = None  # a fresh hub process
    made = {u: make_spawner(EXAMPLE_PROFILES, u, ["data-science"]) for u in ("mallory", "bob")}
    for sp in made.values():
        sp.gpu_profile = sp.profiles.profile("t4-shared")
    yield made
    GPUSpawner._gpu_faults = None
    for sp in made.values():
        await sp.api.api_client.close()


async def test_a_server_containers_gpu_check_words_fail_only_that_spawn_and_mark_no_node(spawners):
    """A .pth in mallory's home writes the check's words as the server's termination message: her spawn fails
    with those words quoted, and no node is kept off or shown degraded for anyone, herself included."""
    mallory = spawners["mallory"]
    forged = pod_with(server_status={"exitCode": GPU_CHECK_FAILED, "reason": "Error", "message": CHECK_WORDS})
    with pytest.raises(SpawnImpossible) as e:
        mallory.is_pod_running(forged)
    assert str(e.value).startswith("The server stopped on aks-gput4-0 before it was ready: GPU check failed")
    assert mallory.gpu_faults().failing() == [] and mallory.nodes_to_avoid() == ([], [])
    assert mallory.pool_failing_note("gput4") is None


async def test_the_init_containers_failed_check_is_the_verdict_the_hub_records(spawners):
    mallory, bob = spawners["mallory"], spawners["bob"]
    failed = pod_with(init_status={"exitCode": GPU_CHECK_FAILED, "reason": "Error", "message": CHECK_WORDS})
    with pytest.raises(SpawnImpossible) as e:
        mallory.is_pod_running(failed)
    assert e.value.status_code == 503 and "This T4 node's GPU isn't working" in str(e.value)
    assert mallory.nodes_to_avoid()[0] == ["aks-gput4-0"]  # her next server keeps off it
    assert bob.pool_failing_note("gput4") is None  # one user's report, until a second user's confirms it
    other = pod_with(init_status={"exitCode": 127, "reason": "Error", "message": "gpuhub-singleuser: not found"})
    with pytest.raises(SpawnImpossible) as e:
        bob.is_pod_running(other)  # an init container that could not run the check: not a GPU verdict
    assert f"The server's {GPU_CHECK_CONTAINER} step failed on aks-gput4-0 (exit code 127)" in str(e.value)
    assert bob.nodes_to_avoid() == ([], [])


async def test_the_nodes_own_signal_confirms_one_users_report_for_everyone():
    """One user's report counts for everyone once the node itself says its GPU is gone (the device plugin
    offers none of it: allocatable 0); a healthy node's single report stays that user's."""
    import copy

    from jupyterhub_gpu.hub.capacity import ClusterState
    from jupyterhub_gpu.hub.gpu_faults import GPUFaults, gpu_gone
    from jupyterhub_gpu.model.profiles_file import load_profiles
    from jupyterhub_gpu_dev.nodes import build_nodes

    cfg = load_profiles(EXAMPLE_PROFILES)
    state = ClusterState(cfg)
    nodes = build_nodes(cfg, 2)
    state.replace("nodes", nodes)
    broken, healthy = sorted(n["metadata"]["name"] for n in nodes
                             if n["metadata"]["labels"].get("kubernetes.azure.com/agentpool") == "gput4")
    assert not gpu_gone(state.nodes[broken]) and not gpu_gone(None)
    gone = copy.deepcopy(next(n for n in nodes if n["metadata"]["name"] == broken))
    gone["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    state.apply_node("MODIFIED", gone)
    assert gpu_gone(state.nodes[broken])
    faults = GPUFaults(node_signal=lambda n: gpu_gone(state.nodes.get(n)))
    assert faults.failing() == []  # the node's signal alone is not a failed check
    faults.record(broken, "gput4", user="mallory")
    faults.record(healthy, "gput4", user="mallory")
    assert faults.failing("gput4") == [broken]  # confirmed by the node itself; the healthy one stays hers
    assert faults.failing("gput4", reporter="mallory") == [broken, healthy]
    GPUSpawner._gpu_faults = None
    sp = make_spawner(EXAMPLE_PROFILES, "alice", ["data-science"])
    try:
        assert sp.gpu_faults().node_signal == GPUSpawner._node_gpu_gone  # the hub's node watch answers
        assert GPUSpawner._node_gpu_gone(broken) is False  # no watch yet: no signal
    finally:
        GPUSpawner._gpu_faults = None
        await sp.api.api_client.close()


async def test_a_dra_servers_check_gets_its_claim_and_what_the_claim_may_hold():
    """On a dra pool the check shares the server's claim (the driver puts the devices in every container that
    names it) and reads $GPUHUB_DRA_DEVICES: the server's choices in order; a job's claim takes its own GPUs only."""
    from pathlib import Path

    from jupyterhub_gpu.builders.jobs import build_job
    from jupyterhub_gpu.model.profiles_file import load_profiles

    dra_file = Path(__file__).resolve().parents[2] / "jupyterhub_gpu" / "examples" / "profiles-dra.yaml"
    pod = await pod_manifest(dra_file, "a100-any", "alice", ["data-science"])
    (check,) = [c for c in pod["spec"]["initContainers"] if c["name"] == GPU_CHECK_CONTAINER]
    env = {e["name"]: e.get("value") for e in check["env"]}
    assert env["GPUHUB_DRA_DEVICES"] == "full:1 mig:1:3g.40gb"
    assert check["resources"]["claims"] == [{"name": "gpu"}] and "nvidia.com/gpu" not in check["resources"].get(
        "limits", {})
    cfg = load_profiles(dra_file)
    job, _ = build_job(cfg, cfg.profile("a100-any"), "alice", ["data-science"], "a.ipynb",
                       {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    job_env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert job_env["GPUHUB_DRA_DEVICES"] == "full:1"
    plain = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ["data-science"])
    assert not any(e["name"] == "GPUHUB_DRA_DEVICES" for e in plain["spec"]["containers"][0]["env"])
