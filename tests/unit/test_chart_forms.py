"""What the zero-to-jupyterhub chart's hub config writes into KubeSpawner's settings, through GPUSpawner's real
code path (load_user_options → get_pod_manifest): dict-form volumes / mounts / tolerations and an empty
`profile_list` (its default `singleuser.profileList: []`)."""
from __future__ import annotations

import pytest
from traitlets.config import Config

from jupyterhub_gpu.builders import pods as podspec
from jupyterhub_gpu.hub.render_pod import make_spawner, pod_manifest
from jupyterhub_gpu.hub.spawner import APPENDED_KEY_PREFIX, GPUSpawner, appended
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES

HOME = {"name": "home", "persistentVolumeClaim": {"claimName": "gpuhub-home"}}
HOME_MOUNT = {"name": "home", "mountPath": "/home/jovyan", "subPath": "{username}"}
DEDICATED = {"key": "hub.jupyter.org/dedicated", "operator": "Equal", "value": "user", "effect": "NoSchedule"}
SKU = {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


def sorted_items(d: dict) -> list:
    return sorted(d.items())


def chart_config(**kubespawner) -> Config:
    """A config as z2jh's files/hub/jupyterhub_config.py leaves it: settings on `KubeSpawner`, not GPUSpawner."""
    c = Config()
    for name, value in kubespawner.items():
        c.KubeSpawner[name] = value
    return c


async def test_dict_form_volumes_mounts_and_tolerations_as_z2jh_writes_them():
    cfg = chart_config(volumes={"home": HOME}, volume_mounts={"home": HOME_MOUNT},
                       tolerations={"dedicated": DEDICATED})
    pod = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ["data-science"], config=cfg)
    (c,) = pod["spec"]["containers"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}  # KubeSpawner orders a dict's entries by key
    # the example's dataset is data-science's (builders/datasets.py): added like the profile's /dev/shm
    assert sorted(volumes) == sorted(["home", podspec.SHM_VOLUME, "dataset-imagenet-mini"])
    assert volumes["home"]["persistentVolumeClaim"] == {"claimName": "gpuhub-home"}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert {n: m["mountPath"] for n, m in mounts.items()} == {"home": "/home/jovyan", podspec.SHM_VOLUME: "/dev/shm",
                                                              "dataset-imagenet-mini": "/datasets/imagenet-mini"}
    assert mounts["home"]["subPath"] == "alice"  # KubeSpawner still expands the dict's templates
    assert sorted(pod["spec"]["tolerations"], key=sorted_items) == sorted([DEDICATED, SKU], key=sorted_items)


async def test_a_second_start_of_the_same_spawner_adds_nothing_twice():
    cfg = chart_config(volumes={"home": HOME}, volume_mounts={"home": HOME_MOUNT})
    spawner = make_spawner(EXAMPLE_PROFILES, "alice", ["data-science"], config=cfg)
    try:
        for _ in range(2):
            spawner.user_options = {"profile": "t4-shared"}
            await spawner.load_user_options()
        assert sorted(spawner.volumes) == ["gpuhub-0", "gpuhub-1", "home"]  # /dev/shm and the team's dataset
        assert sorted(spawner.volume_mounts) == ["gpuhub-0", "gpuhub-1", "home"]
    finally:
        await spawner.api.api_client.close()


async def test_empty_profile_list_from_the_chart_means_the_file_makes_the_list():
    spawner = make_spawner(EXAMPLE_PROFILES, "bob", [], config=chart_config(profile_list=[]))
    try:
        assert spawner.profile_list is GPUSpawner.allowed_profile_list
        entries = await spawner.profile_list(spawner)
        assert "cpu" in [e["slug"] for e in entries]
        spawner.user_options = {"profile": "cpu"}
        await spawner.load_user_options()  # before the fix: "No such profile: cpu. Options include:"
        assert spawner.gpu_profile.slug == "cpu"
    finally:
        await spawner.api.api_client.close()


async def test_a_real_admin_profile_list_with_a_profiles_file_is_still_refused():
    with pytest.raises(ValueError, match="both GPUSpawner.profiles_file"):
        make_spawner(EXAMPLE_PROFILES, "bob", [],
                     config=chart_config(profile_list=[{"display_name": "Mine", "slug": "mine"}]))


@pytest.mark.parametrize("admin, added, expected", [
    ([HOME], [HOME, SKU], [HOME, SKU]),
    ({"home": HOME}, [HOME, SKU], {"home": HOME, f"{APPENDED_KEY_PREFIX}0": SKU}),
    ({"home": HOME, f"{APPENDED_KEY_PREFIX}0": DEDICATED}, [SKU],
     {"home": HOME, f"{APPENDED_KEY_PREFIX}0": DEDICATED, f"{APPENDED_KEY_PREFIX}1": SKU}),
    ({"home": HOME}, {"data": SKU}, {"home": HOME, "data": SKU}),
    ([HOME], {"data": SKU}, [HOME, SKU]),
    ({}, [], {}),
])
def test_appended_keeps_the_admins_form(admin, added, expected):
    assert appended(admin, added) == expected
