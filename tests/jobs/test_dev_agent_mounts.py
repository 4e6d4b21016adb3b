"""DEV agent (SIMULATOR): mounts as a kubelet makes them (claim → bound PV → folder, access modes) and env
paths pointed at the local folders."""
from pathlib import Path

import pytest

from jupyterhub_gpu_dev.agent import rewrite_paths
from jupyterhub_gpu_dev.volumes import MountError, attach_conflict, claim_folder, home_of


def test_env_paths_follow_the_longest_mount():
    mounts = {"/checkpoints": Path("/h/alice/checkpoints/j1"), "/output": Path("/h/alice/gpu-jobs"),
              "/snapshot": Path("/s/pods/x/volumes/snapshot")}
    env = {"CHECKPOINT_DIR": "/checkpoints", "OUTPUT_DIR": "/output/j1", "GPUHUB_SNAPSHOT": "/snapshot/notebook.gz",
           "GPUHUB_JOB": "j1", "OTHER": "/outputs-not-a-mount"}
    assert rewrite_paths(env, mounts) == {"CHECKPOINT_DIR": "/h/alice/checkpoints/j1",
                                          "OUTPUT_DIR": "/h/alice/gpu-jobs/j1",
                                          "GPUHUB_SNAPSHOT": "/s/pods/x/volumes/snapshot/notebook.gz"}


# ---------------------------------------------------------------------- claims → bound PV → folder (volumes.py)


def claim(name="gpuhub-home", ns="team-ds", phase="Bound", volume="pv-1", modes=("ReadWriteMany",), uid="u1"):
    return {"metadata": {"name": name, "namespace": ns, "uid": uid}, "spec": {"volumeName": volume},
            "status": {"phase": phase, "accessModes": list(modes)}}


def pv(name="pv-1", ns="team-ds", claim_name="gpuhub-home", uid="u1", source=None):
    return {"metadata": {"name": name},
            "spec": {"claimRef": {"namespace": ns, "name": claim_name, "uid": uid},
                     **(source or {"hostPath": {"path": "/share"}})}}


def test_a_claim_mounts_its_bound_volumes_folder_with_the_subpath():
    assert claim_folder("team-ds", "gpuhub-home", claim(), pv(), "alice") == Path("/share/alice")
    assert claim_folder("team-ds", "gpuhub-home", claim(), pv(source={"local": {"path": "/disk"}}), "") == Path("/disk")


@pytest.mark.parametrize("c,v,sub,needle", [
    (None, None, "", "not found in namespace team-ds"),
    (claim(phase="Pending"), pv(), "", "Pending, not Bound"),
    (claim(), pv(ns="team-mlr"), "", "not bound to it"),          # another namespace's claim
    (claim(), pv(uid="someone-else"), "", "not bound to it"),
    (claim(), pv(name="pv-2"), "", "not bound to it"),
    (claim(), pv(), "../bob", "does not leave the volume"),
    (claim(), pv(), "/etc", "does not leave the volume"),
    (claim(), pv(source={"nfs": {"server": "x", "path": "/"}}), "", "hostPath and local PersistentVolumes only"),
])
def test_a_claim_that_cannot_be_mounted_says_why(c, v, sub, needle):
    with pytest.raises(MountError, match=needle):
        claim_folder("team-ds", "gpuhub-home", c, v, sub)


def test_access_modes_hold_across_simulated_nodes():
    rwo, rwx, rwop = claim(modes=("ReadWriteOnce",)), claim(), claim(modes=("ReadWriteOncePod",))
    assert "Multi-Attach error" in attach_conflict(rwo, "ns/b", "node-2", {"ns/a": "node-1"})
    assert attach_conflict(rwo, "ns/b", "node-1", {"ns/a": "node-1"}) is None   # same node: fine
    assert attach_conflict(rwx, "ns/b", "node-2", {"ns/a": "node-1"}) is None
    assert "ReadWriteOncePod" in attach_conflict(rwop, "ns/b", "node-1", {"ns/a": "node-1"})
    assert attach_conflict(rwo, "ns/a", "node-2", {"ns/a": "node-1"}) is None   # itself


def test_home_is_where_the_images_home_is_mounted_else_the_pods_own_folder():
    mounts = {"/home/jovyan": Path("/share/alice"), "/snapshot": Path("/s")}
    assert home_of(mounts, "/home/jovyan", Path("/pod/home")) == Path("/share/alice")
    assert home_of({"/home": Path("/share")}, "/home/jovyan", Path("/pod/home")) == Path("/share/jovyan")
    assert home_of({"/data": Path("/d")}, "/home/jovyan", Path("/pod/home")) == Path("/pod/home")
