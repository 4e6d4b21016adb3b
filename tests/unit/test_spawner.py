"""GPUSpawner manifests through KubeSpawner's real code path: load_user_options → get_pod_manifest."""
from __future__ import annotations

import textwrap

import pytest
from tornado import web

from jupyterhub_gpu.builders import pods as podspec
from jupyterhub_gpu.hub.render_pod import make_spawner, pod_manifest
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES

SKU = {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
SPOT = {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}
ALL_GROUPS = ["data-science", "ml-research"]


def container(pod):
    (c,) = pod["spec"]["containers"]
    return c


def env_of(pod):
    return {e["name"]: e.get("value") for e in container(pod)["env"]}


@pytest.mark.parametrize(
    "slug, resource, pool, tolerations",
    [
        ("t4-shared", "nvidia.com/gpu", "gput4", [SKU]),
        ("a100-mig-1g10gb", "nvidia.com/mig-1g.10gb", "gpumig", [SKU]),
        ("h100-full", "nvidia.com/gpu", "gpuh100", [SKU]),
        ("a100-spot", "nvidia.com/gpu", "spota100", [SKU, SPOT]),
    ],
)
async def test_gpu_profile_pod(slug, resource, pool, tolerations):
    pod = await pod_manifest(EXAMPLE_PROFILES, slug, "alice", ALL_GROUPS)
    c, spec = container(pod), pod["spec"]
    assert c["resources"]["limits"][resource] == "1"
    assert c["resources"]["requests"][resource] == "1"
    assert spec["nodeSelector"] == {"kubernetes.azure.com/agentpool": pool}
    assert spec["tolerations"] == tolerations
    assert pod["metadata"]["labels"][podspec.PROFILE_LABEL] == slug
    assert pod["metadata"]["labels"][podspec.POOL_LABEL] == pool
    assert pod["metadata"]["annotations"][podspec.GPU_RESOURCE_ANNOTATION] == resource
    env = env_of(pod)
    assert env["GPUHUB_PROFILE"] == slug and env["GPUHUB_GPU_RESOURCE"] == resource


async def test_mig_pod_details_and_shm_counted_into_memory():
    pod = await pod_manifest(EXAMPLE_PROFILES, "a100-mig-1g10gb", "alice", ["data-science"])
    c, spec = container(pod), pod["spec"]
    assert pod["metadata"]["labels"][podspec.GPU_KIND_LABEL] == "mig"
    assert env_of(pod)["GPUHUB_MIG_PROFILE"] == "1g.10gb"
    # memory 24Gi + shm 2Gi, requests == limits (Guaranteed QoS for an expensive GPU)
    assert c["resources"]["limits"]["memory"] == c["resources"]["requests"]["memory"] == 26 * 2**30
    assert c["resources"]["limits"]["cpu"] == c["resources"]["requests"]["cpu"] == 3.0
    shm = next(v for v in spec["volumes"] if v["name"] == podspec.SHM_VOLUME)
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": str(2 * 2**30)}
    assert {"name": podspec.SHM_VOLUME, "mountPath": "/dev/shm"} in c["volumeMounts"]
    assert spec["priorityClassName"] == "gpuhub-normal"


async def test_cpu_profile_never_tolerates_a_gpu_taint_even_from_admin_defaults():
    admin_tolerations = [
        {"key": "sku", "operator": "Exists", "effect": "NoSchedule"},  # would open every GPU pool
        {"operator": "Exists"},  # wildcard
        {"key": "hub.jupyter.org/dedicated", "operator": "Equal", "value": "user", "effect": "NoSchedule"},
    ]
    pod = await pod_manifest(EXAMPLE_PROFILES, "cpu", "bob", [], tolerations=admin_tolerations)
    spec, c = pod["spec"], container(pod)
    assert spec["tolerations"] == [admin_tolerations[2]]
    assert spec["nodeSelector"] == {"kubernetes.azure.com/agentpool": "system"}
    assert not [r for r in c["resources"]["limits"] if r.startswith("nvidia.com/")]
    assert pod["metadata"]["labels"][podspec.GPU_KIND_LABEL] == "none"


async def test_gpu_profile_does_not_keep_a_toleration_for_another_pool():
    pod = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "bob", [], tolerations=[SPOT])
    assert pod["spec"]["tolerations"] == [SKU]


async def test_admin_volumes_are_kept_and_shm_added():
    home = {"name": "home", "persistentVolumeClaim": {"claimName": "claim-{username}"}}
    pod = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "carol", [], volumes=[home],
                             volume_mounts=[{"name": "home", "mountPath": "/home/jovyan"}])
    names = [v["name"] for v in pod["spec"]["volumes"]]
    # carol is in no team's group, so in the default team (data-science), whose dataset comes after /dev/shm
    assert names == ["home", podspec.SHM_VOLUME, "dataset-imagenet-mini"]
    assert [m["mountPath"] for m in container(pod)["volumeMounts"]] == ["/home/jovyan", "/dev/shm",
                                                                        "/datasets/imagenet-mini"]


def variant_file(tmp_path, pools, profiles):
    p = tmp_path / "profiles.yaml"
    p.write_text(textwrap.dedent(pools) + textwrap.dedent(profiles))
    return p


async def test_time_sliced_renamed_and_mig_single_strategy(tmp_path):
    f = variant_file(tmp_path, """
        pools:
          t4:
            node_selector: {agentpool: t4}
            taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
            gpu: {model: T4, count_per_node: 2}
            sharing: {strategy: time-slicing, replicas: 4, rename_by_default: true}
          a100:
            node_selector: {agentpool: a100}
            taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
            gpu: {model: A100-40GB, count_per_node: 8}
            sharing: {strategy: mig, mig_strategy: single, layout: all-3g.20gb}
        """, """
        profiles:
          - {slug: t4x2, display_name: T4 x2, pool: t4, gpu: {kind: time-sliced, count: 2}}
          - {slug: mig3g, display_name: 3g slice, pool: a100, gpu: {kind: mig, profile: 3g.20gb}}
        """)
    t4 = await pod_manifest(f, "t4x2", "dan")
    assert container(t4)["resources"]["limits"]["nvidia.com/gpu.shared"] == "2"
    assert t4["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    mig = await pod_manifest(f, "mig3g", "dan")
    assert container(mig)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert env_of(mig)["GPUHUB_MIG_PROFILE"] == "3g.20gb"


@pytest.fixture
async def spawner_for():
    made = []

    def make(user, groups, **traits):
        sp = make_spawner(EXAMPLE_PROFILES, user, groups, **traits)
        made.append(sp)
        return sp

    yield make
    for sp in made:
        await sp.api.api_client.close()


async def test_profile_list_is_filtered_by_groups(spawner_for):
    everyone = ["cpu", "t4-shared"]
    cases = {(): everyone, ("data-science",): everyone + ["a100-mig-1g10gb"],
             ("ml-research",): everyone + ["a100-mig-1g10gb", "h100-full", "a100-spot"]}
    for groups, slugs in cases.items():
        sp = spawner_for("u", list(groups))
        listed = await sp.profile_list(sp)
        assert [p["slug"] for p in listed] == slugs
        assert [p["slug"] for p in listed if p["default"]] == ["cpu"]


async def test_forged_profile_is_refused_before_any_pod(spawner_for):
    sp = spawner_for("eve", ["data-science"])
    sp.user_options = {"profile": "h100-full"}
    with pytest.raises(ValueError, match=r"'h100-full' is not available to eve: it is for members of ml-research"):
        await sp.load_user_options()
    sp.user_options = {"profile": "does-not-exist"}
    with pytest.raises(ValueError, match=r"There is no profile 'does-not-exist'\. Choose one of: cpu, t4-shared"):
        await sp.load_user_options()


async def test_forged_form_post_gets_403(spawner_for):
    sp = spawner_for("eve", [])
    with pytest.raises(web.HTTPError) as e:
        sp.options_from_form({"profile": ["a100-mig-1g10gb"]})
    assert e.value.status_code == 403
    assert "for members of data-science, ml-research" in e.value.log_message
    assert sp.options_from_form({"profile": ["t4-shared"]}) == {"profile": "t4-shared"}


async def test_unknown_option_is_refused(spawner_for):
    sp = spawner_for("eve", [])
    sp.user_options = {"profile": "cpu", "image": "evil/miner"}
    with pytest.raises(ValueError, match=r"Unknown server option\(s\) 'image'"):
        await sp.load_user_options()


async def test_no_profile_chosen_uses_default(spawner_for):
    pod = await pod_manifest(EXAMPLE_PROFILES, None, "frank", [])
    assert pod["metadata"]["labels"][podspec.PROFILE_LABEL] == "cpu"
