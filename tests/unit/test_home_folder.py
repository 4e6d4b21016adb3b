"""A new user's first server and first job create their home folder on the share as the user (issue 50 item 15):
a kubelet makes a missing subPath folder owned by root, and a server running as uid 1000 then crash-loops on
`~/.local`. The pod's `gpuhub-home-folder` init container makes it first, with the pod's own image and security
context, seeing the share only for its `mkdir -p`. Through GPUSpawner's real manifest and the Job builder."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.builders.jobs import build_job
from jupyterhub_gpu.builders.storage import SHARE_MOUNT, HomeStorage, home_folder_container, spawner_settings
from jupyterhub_gpu.contract import GPU_CHECK_CONTAINER, HOME_FOLDER_CONTAINER
from jupyterhub_gpu.hub.progress import container_failure
from jupyterhub_gpu.hub.render_pod import pod_manifest
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from tests.unit.test_server_security_context import restricted_violations

NOTEBOOK = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
CFG = load_profiles(EXAMPLE_PROFILES)


def home_step(pod: dict) -> dict:
    (step,) = [c for c in pod["spec"].get("initContainers") or [] if c["name"] == HOME_FOLDER_CONTAINER]
    return step


async def test_a_servers_pod_makes_its_home_folder_as_the_server_after_the_gpu_check():
    pod = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ["data-science"], **spawner_settings())
    server = pod["spec"]["containers"][0]
    (home,) = [m for m in server["volumeMounts"] if m["mountPath"] == "/home/jovyan"]
    step = home_step(pod)
    assert step["command"] == ["mkdir", "-p", "--", home["subPath"]] and home["subPath"] == "alice"
    assert step["workingDir"] == SHARE_MOUNT
    assert step["volumeMounts"] == [{"name": home["name"], "mountPath": SHARE_MOUNT}]  # the share, no subPath
    assert step["image"] == server["image"] and step["securityContext"] == server["securityContext"]
    assert "env" not in step  # no token, nothing of the user's
    assert "nvidia.com/gpu" not in step["resources"]["limits"]  # the GPU stays the server's (and the check's)
    names = [c["name"] for c in pod["spec"]["initContainers"]]
    assert names == [GPU_CHECK_CONTAINER, HOME_FOLDER_CONTAINER]
    assert restricted_violations(pod) == []


async def test_a_cpu_server_makes_its_home_too_and_an_admin_may_turn_it_off():
    cpu = await pod_manifest(EXAMPLE_PROFILES, "cpu", "bob", ["data-science"], **spawner_settings())
    assert home_step(cpu)["command"] == ["mkdir", "-p", "--", "bob"]
    off = await pod_manifest(EXAMPLE_PROFILES, "cpu", "bob", ["data-science"], create_home_folders=False,
                             **spawner_settings())
    assert not off["spec"].get("initContainers")
    bare = await pod_manifest(EXAMPLE_PROFILES, "cpu", "bob", ["data-science"])  # no home share: nothing to make
    assert not bare["spec"].get("initContainers")


def test_only_writable_claim_subpaths_are_made():
    container = {"image": "img", "volumeMounts": [
        {"name": "home", "mountPath": "/home/jovyan", "subPath": "alice"},
        {"name": "data", "mountPath": "/datasets/x", "subPath": "x", "readOnly": True},
        {"name": "cfg", "mountPath": "/etc/x", "subPath": "x"},
        {"name": "home", "mountPath": "/home/jovyan/shared", "subPath": "alice/shared"}]}
    volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "gpuhub-home"}},
               {"name": "data", "persistentVolumeClaim": {"claimName": "ds"}}, {"name": "cfg", "configMap": {}}]
    step = home_folder_container(container, volumes)
    assert step["command"] == ["mkdir", "-p", "--", "alice", "alice/shared"]
    assert home_folder_container({"volumeMounts": [container["volumeMounts"][1]]}, volumes) is None


def test_a_jobs_pod_makes_the_users_home_hardened_like_the_runner():
    job, _ = build_job(CFG, CFG.profile("t4-shared"), "carol", ["data-science"], "train.ipynb", NOTEBOOK)
    spec = job["spec"]["template"]["spec"]
    runner = spec["containers"][0]
    (home,) = [m for m in runner["volumeMounts"] if m["mountPath"] == HomeStorage().mount_path]
    step = home_step(job["spec"]["template"])
    assert step["command"] == ["mkdir", "-p", "--", home["subPath"]] and home["subPath"] == "carol"
    assert step["securityContext"] == runner["securityContext"] and step["image"] == runner["image"]
    assert restricted_violations(job["spec"]["template"]) == []


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=80))
def test_any_user_names_job_makes_exactly_its_own_relative_home(user):
    job, _ = build_job(CFG, CFG.profile("t4-shared"), user, ["data-science"], "n.ipynb", NOTEBOOK)
    spec = job["spec"]["template"]["spec"]
    (home,) = [m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == HomeStorage().mount_path]
    folder = home_step(job["spec"]["template"])["command"][3:]
    assert folder == [home["subPath"]]
    assert not folder[0].startswith(("/", "-")) and ".." not in folder[0].split("/")


def test_a_failed_home_step_says_what_the_admin_must_fix():
    pod = {"spec": {"nodeName": "aks-system-0"}, "status": {"initContainerStatuses": [
        {"name": HOME_FOLDER_CONTAINER, "state": {"terminated": {
            "exitCode": 1, "message": "mkdir: cannot create directory 'dave': Permission denied"}}}]}}
    said = container_failure(pod)
    assert "gpuhub-home-folder step failed" in said and "Permission denied" in said
    assert "top folder must be writable by the users" in said
