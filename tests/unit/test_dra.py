"""GPUs through Dynamic Resource Allocation, the pure parts: what validation refuses (with the reason), the
claim templates (exactly / firstAvailable, per namespace), the DeviceClasses and Kueue's mappings to the device
plugin's quota names, the server pod (through KubeSpawner's real code) and the Job / JobSet pods with their claim,
and the product selector's words against real NVML product names.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.builders import dra
from jupyterhub_gpu.builders.jobs import build_job
from jupyterhub_gpu.builders.jobsets import build_jobset
from jupyterhub_gpu.builders.kueue import render_kueue
from jupyterhub_gpu.hub.render_pod import render_pod
from jupyterhub_gpu.model import dra as dra_model
from jupyterhub_gpu.model.gpus import GPU_MODELS
from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles

DRA_EXAMPLE = Path(__file__).resolve().parents[2] / "jupyterhub_gpu" / "examples" / "profiles-dra.yaml"
NB = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def data() -> dict:
    return yaml.safe_load(DRA_EXAMPLE.read_text())


def cfg_of(d: dict):
    return parse_profiles(d, "test.yaml")


def problems(d: dict) -> list[str]:
    with pytest.raises(ProfilesError) as e:
        cfg_of(d)
    return [str(p) for p in e.value.problems]


def profile_entry(d: dict, slug: str) -> dict:
    return next(p for p in d["profiles"] if p["slug"] == slug)


# ---------------------------------------------------------------- validation
def test_the_example_with_both_kinds_of_pool_is_valid():
    cfg = cfg_of(data())
    assert [n for n, p in cfg.pools.items() if p.is_dra] == ["dra-a100", "dra-a100mig"]
    assert not cfg.pools["gput4"].is_dra


@pytest.mark.parametrize("sharing", [{"strategy": "time-slicing", "replicas": 4}, {"strategy": "mps", "replicas": 4}])
def test_a_shared_gpu_pool_cannot_be_dra(sharing):
    d = data()
    d["pools"]["gput4"]["allocation"] = "dra"
    d["pools"]["gput4"]["sharing"] = sharing
    found = problems(d)
    assert any("pools.gput4.sharing" in p and "cannot share one GPU between pods" in p for p in found), found


def test_dra_needs_a_gpu_and_a_device_class_needs_dra():
    d = data()
    d["pools"]["system"]["allocation"] = "dra"
    d["pools"]["gput4"]["device_class"] = "my-gpus.example.com"
    found = problems(d)
    assert any("pools.system.allocation" in p and "has none" in p for p in found), found
    assert any("pools.gput4.device_class" in p and "allocation: dra" in p for p in found), found


def test_mig_single_strategy_is_refused_on_a_dra_pool():
    d = data()
    d["pools"]["dra-a100mig"]["sharing"]["mig_strategy"] = "single"
    assert any("mig_strategy" in p and "DRA" in p for p in problems(d))


def test_alternatives_on_a_queued_profile_are_refused_with_kueues_reason():
    d = data()
    del profile_entry(d, "a100-any")["queue_servers"]
    found = problems(d)
    assert any("alternatives" in p and "firstAvailable" in p and "queue_servers: false" in p for p in found), found


@pytest.mark.parametrize("choice, says", [
    ({"pool": "gput4"}, "is not a `dra` pool"),
    ({"pool": "nowhere"}, "is not a `dra` pool"),
    ({"pool": "dra-a100mig", "kind": "mig", "profile": "1g.10gb"}, "not offered by pool"),
    ({"pool": "dra-a100mig", "kind": "full"}, "MIG-partitioned"),
    ({"pool": "dra-a100", "kind": "mig", "profile": "3g.40gb"}, "has no MIG slices"),
    ({"pool": "dra-a100", "count": 3}, "never fits"),
])
def test_a_bad_alternative_says_what_is_wrong(choice, says):
    d = data()
    profile_entry(d, "a100-any")["gpu"]["alternatives"] = [choice]
    assert any("alternatives[0]" in p and says in p for p in problems(d))


def test_an_alternative_on_a_pool_that_queues_its_servers_is_refused():
    d = data()
    d["pools"]["dra-a100mig"]["queue_servers"] = True
    assert any("alternatives[0].pool" in p and "outside the team's quota" in p for p in problems(d))


def test_a_mig_class_is_not_a_whole_gpu_class():
    d = data()
    d["pools"]["dra-a100"]["device_class"] = "mig.nvidia.com"
    assert any("pools.dra-a100.device_class" in p and "holds MIG slices" in p for p in problems(d))


def test_alternatives_on_a_device_plugin_profile_are_refused():
    d = data()
    e = profile_entry(d, "t4-shared")
    e["gpu"]["alternatives"], e["queue_servers"] = [{"pool": "dra-a100"}], False
    assert any("t4-shared" in p and "not `allocation: dra`" in p for p in problems(d))


def test_at_most_seven_alternatives_as_dras_eight_subrequests():
    d = data()
    profile_entry(d, "a100-any")["gpu"]["alternatives"] = [{"pool": "dra-a100"}] * 8
    assert any("alternatives" in p and "7" in p for p in problems(d))


# ---------------------------------------------------------------- objects
def test_claim_templates_for_the_hub_and_every_team_namespace():
    cfg = cfg_of(data())
    objs = dra.claim_templates(cfg, "jhub")
    where = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs}
    assert where == {("jhub", "gpuhub-a100-dra"), ("jhub", "gpuhub-a100-3g"), ("jhub", "gpuhub-a100-any"),
                     ("team-ds", "gpuhub-a100-dra"), ("team-ds", "gpuhub-a100-3g"), ("team-ds", "gpuhub-a100-any.job")}
    full = next(o for o in objs if o["metadata"]["name"] == "gpuhub-a100-dra")
    (req,) = full["spec"]["spec"]["devices"]["requests"]
    assert req["exactly"]["deviceClassName"] == "gpu.nvidia.com" and req["exactly"]["count"] == 1
    mig = next(o for o in objs if o["metadata"]["name"] == "gpuhub-a100-3g")
    assert mig["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpuhub-mig-3g.40gb"


def test_a_servers_prioritized_list_and_its_jobs_exact_request():
    cfg = cfg_of(data())
    objs = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in dra.claim_templates(cfg, "jhub")}
    (req,) = objs["jhub", "gpuhub-a100-any"]["spec"]["spec"]["devices"]["requests"]
    subs = req["firstAvailable"]
    assert [s["deviceClassName"] for s in subs] == ["gpu.nvidia.com", "gpuhub-mig-3g.40gb"]
    assert all(DNS_LABEL.match(s["name"]) for s in subs)
    (job_req,) = objs["team-ds", "gpuhub-a100-any.job"]["spec"]["spec"]["devices"]["requests"]
    assert "firstAvailable" not in job_req and job_req["exactly"]["deviceClassName"] == "gpu.nvidia.com"


def test_device_classes_and_kueue_mappings_use_the_device_plugins_quota_names():
    cfg = cfg_of(data())
    (cls,) = dra.device_classes(cfg)
    assert cls["metadata"]["name"] == "gpuhub-mig-3g.40gb"
    assert "profile == '3g.40gb'" in cls["spec"]["selectors"][0]["cel"]["expression"]
    frag = dra.kueue_configuration_fragment(cfg)
    assert frag["resources"]["deviceClassMappings"] == [
        {"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]},
        {"name": "nvidia.com/mig-3g.40gb", "deviceClassNames": ["gpuhub-mig-3g.40gb"]}]
    assert frag["waitForPodsReady"]["timeout"] == dra.PODS_READY_TIMEOUT
    queues = [o for o in render_kueue(cfg) if o["kind"] == "ClusterQueue"]
    covered = set(queues[0]["spec"]["resourceGroups"][0]["coveredResources"])
    assert {"nvidia.com/gpu", "nvidia.com/mig-3g.40gb"} <= covered  # the names Kueue maps the devices to


def test_a_file_without_dra_pools_renders_no_dra_objects():
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

    cfg = load_profiles(EXAMPLE_PROFILES)
    assert dra.claim_templates(cfg, "jhub") == dra.device_classes(cfg) == []
    assert "resources" not in dra.kueue_configuration_fragment(cfg)
    assert not any(o["apiVersion"].startswith("resource.k8s.io") for o in render_kueue(cfg))


# ---------------------------------------------------------------- pods
def test_the_server_pod_has_its_claim_and_no_extended_resource(tmp_path):
    pod = render_pod(DRA_EXAMPLE, "a100-dra", "alice", ["data-science"])
    spec = pod["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "gpuhub-a100-dra"}]
    for c in spec["containers"] + spec.get("initContainers", []):  # the GPU check sees the same device
        assert c["resources"]["claims"] == [{"name": "gpu"}]
        assert not any(k.startswith("nvidia.com/") for k in c["resources"].get("limits", {}))
    assert spec["nodeSelector"] == {"kubernetes.azure.com/agentpool": "draa100"}


def test_a_device_plugin_pod_in_the_same_file_is_unchanged():
    spec = render_pod(DRA_EXAMPLE, "t4-shared", "alice", ["data-science"])["spec"]
    assert "resourceClaims" not in spec
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_a_server_with_alternatives_may_land_on_each_choices_pool_and_no_other():
    spec = render_pod(DRA_EXAMPLE, "a100-any", "alice", ["data-science"])["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [t["matchExpressions"][0]["values"] for t in terms] == [["draa100"], ["draa100mig"]]
    assert not spec.get("nodeSelector")
    assert spec["tolerations"] == [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]


def test_job_and_every_rank_of_a_jobset_get_a_claim_from_the_teams_template():
    cfg = cfg_of(data())
    job, _ = build_job(cfg, cfg.profile("a100-dra"), "alice", ["data-science"], "a.ipynb", NB)
    spec = job["spec"]["template"]["spec"]
    assert job["metadata"]["namespace"] == "team-ds"
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "gpuhub-a100-dra"}]
    assert spec["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]
    assert not any(k.startswith("nvidia.com/") for k in spec["containers"][0]["resources"]["limits"])
    jobset, _ = build_jobset(cfg, cfg.profile("a100-dra"), "alice", ["data-science"], "a.ipynb", NB, nodes=2)
    (rj,) = jobset["spec"]["replicatedJobs"]
    assert rj["template"]["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == \
        "gpuhub-a100-dra"  # a template: each rank's pod gets a claim of its own
    any_job, _ = build_job(cfg, cfg.profile("a100-any"), "alice", ["data-science"], "a.ipynb", NB)
    assert any_job["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == \
        "gpuhub-a100-any.job"


# ---------------------------------------------------------------- the product selector
def cel_words_match(expression: str, product_name: str) -> bool:
    """Evaluate the selector's `name.matches('...')` terms (RE2 and Python agree on these patterns)."""
    name = product_name.lower()
    return all(re.search(p, name) for p in re.findall(r"name\.matches\('([^']*)'\)", expression))


@pytest.mark.parametrize("model, name, expected", [
    ("A100-80GB", "NVIDIA A100 80GB PCIe", True),
    ("A100-80GB", "NVIDIA A100-SXM4-80GB", False),  # another form factor: another pool's GPU
    ("H100-NVL-94GB", "NVIDIA H100 NVL", True),
    ("L4", "NVIDIA L4", True),
    ("L4", "NVIDIA L40S", False),
    ("T4", "Tesla T4", True),
    ("A100-40GB", "NVIDIA A100-SXM4-40GB", True),
])
def test_the_product_selector_picks_its_model_only(model, name, expected):
    expr = dra_model.product_selector(GPU_MODELS[model].product)
    assert expr.startswith("cel.bind(name, device.attributes['gpu.nvidia.com'].productName.lowerAscii(), ")
    assert cel_words_match(expr, name) is expected


@given(st.sampled_from(sorted(GPU_MODELS)), st.sampled_from(sorted(GPU_MODELS)))
def test_no_models_selector_matches_another_models_product_name(a, b):
    name_b = GPU_MODELS[b].product.replace("-", " ")
    assert cel_words_match(dra_model.product_selector(GPU_MODELS[a].product), name_b) is (
        GPU_MODELS[a].product == GPU_MODELS[b].product)
