"""The home share (pure): a Job mounts exactly the folder KubeSpawner mounts for the user's server, and the
PV/claim pairs bind each claim to one volume on the same share."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from kubespawner import KubeSpawner

from jupyterhub_gpu.builders.storage import (
    HomeStorage,
    StorageError,
    home_subpath,
    job_home,
    share_objects,
    spawner_settings,
)

NAMES = ["alice", "Alice.Smith@example.com", "bob?admin", "x" * 80, "ünïcode user", "../etc", "a/b", "%2e%2e"]


class _Spawner(SimpleNamespace):
    """What KubeSpawner's own template expansion reads (a real KubeSpawner needs a cluster to construct)."""

    _expand_all = KubeSpawner._expand_all
    _expand_user_properties = KubeSpawner._expand_user_properties

    def _namespace_default(self):
        return "jhub"


def server_subpath(user: str, storage: HomeStorage, slug_scheme: str = KubeSpawner.slug_scheme.default_value) -> str:
    """The subPath KubeSpawner itself puts in the server pod's volume_mounts (the independent oracle)."""
    spawner = _Spawner(name="", user=SimpleNamespace(name=user, id=7), pod_name="p", pvc_name="c", namespace="jhub",
                       slug_scheme=slug_scheme)
    (mount,) = spawner._expand_all(spawner_settings(storage)["volume_mounts"])
    return mount["subPath"]


@pytest.mark.parametrize("scheme", ["safe", "escape"])
@pytest.mark.parametrize("template", ["{username}", "homes/{username}", "{escaped_username}", "{safe_username}"])
@pytest.mark.parametrize("user", NAMES)
def test_a_jobs_home_folder_is_the_one_kubespawner_mounts_for_the_users_server(user, template, scheme):
    storage = HomeStorage(claim="share", subpath=template, slug_scheme=scheme)
    volume, mount = job_home(storage, user)
    assert volume == {"name": "home", "persistentVolumeClaim": {"claimName": "share"}}
    assert mount["subPath"] == server_subpath(user, storage, scheme)
    assert ".." not in mount["subPath"].split("/") and not mount["subPath"].startswith("/")


@pytest.mark.parametrize("template,needle", [("{user}", "unknown field"), ("/abs/{username}", "plain relative"),
                                             ("../{username}", "plain relative"), ("{unescaped_username}", "plain")])
def test_unsafe_subpath_templates_are_refused(template, needle):
    with pytest.raises(StorageError, match=needle):
        home_subpath(template, "../etc" if "unescaped" in template else "alice")


def test_spawner_settings_are_what_z2jh_static_storage_sets():
    assert spawner_settings(HomeStorage(claim="home-nfs", subpath="{username}", mount_path="/home/jovyan")) == {
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "home-nfs"}}],
        "volume_mounts": [{"name": "home", "mountPath": "/home/jovyan", "subPath": "{username}"}],
        "storage_pvc_ensure": False}


def test_share_objects_bind_one_claim_per_namespace_to_its_own_volume_on_one_share():
    source = {"csi": {"driver": "file.csi.azure.com", "volumeHandle": "rg#acct#homes#{namespace}",
                      "volumeAttributes": {"shareName": "homes", "protocol": "nfs"}}}
    objs = share_objects(["jhub", "team-ds", "team-mlr"], source)
    pvs = [o for o in objs if o["kind"] == "PersistentVolume"]
    claims = [o for o in objs if o["kind"] == "PersistentVolumeClaim"]
    assert len(pvs) == len(claims) == 3 and len({p["metadata"]["name"] for p in pvs}) == 3
    for pv, claim in zip(pvs, claims):
        assert claim["metadata"]["name"] == "gpuhub-home" and claim["spec"]["volumeName"] == pv["metadata"]["name"]
        assert pv["spec"]["claimRef"]["namespace"] == claim["metadata"]["namespace"]
        assert pv["spec"]["claimRef"]["name"] == "gpuhub-home"
        assert pv["spec"]["accessModes"] == claim["spec"]["accessModes"] == ["ReadWriteMany"]
        assert pv["spec"]["storageClassName"] == claim["spec"]["storageClassName"] == ""
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
        assert claim["metadata"]["labels"]["gpuhub.io/home-share"] == "true"
        # the CSI driver needs a handle per PV: each namespace its own, same share
        assert pv["spec"]["csi"]["volumeHandle"] == f"rg#acct#homes#{claim['metadata']['namespace']}"
        assert pv["spec"]["csi"]["volumeAttributes"]["shareName"] == "homes"
