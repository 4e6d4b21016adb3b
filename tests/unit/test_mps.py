"""MPS GPU sharing (`sharing: {strategy: mps, replicas: N}`): what validation refuses and why, the device plugin
config it renders (checked against the plugin's own rules for `sharing.mps`), names, labels, wording, Kueue
flavours, right-sizing and doctor's MPS daemon row."""
from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.builders.deploy import device_plugin_entry, render_device_plugin_config
from jupyterhub_gpu.builders.kueue import render_kueue
from jupyterhub_gpu.hub.capacity_text import slot_noun
from jupyterhub_gpu.hub.picker import gpu_line
from jupyterhub_gpu.model.gpu_amount import gpu_amount
from jupyterhub_gpu.model.gpus import GPU_MODELS
from jupyterhub_gpu.model.kueue_words import slot_noun as quota_noun
from jupyterhub_gpu.model.node_facts import MPS_CAPABLE_LABEL, gpu_labels
from jupyterhub_gpu.model.profiles import MPSSharing
from jupyterhub_gpu.model.sharing_rules import mps_max_replicas
from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles
from jupyterhub_gpu.services.usage.rightsize import capacity
from jupyterhub_gpu.tools.doctor import FAIL, OK, SIMULATED, Snapshot, check_mps, run_checks
from jupyterhub_gpu_dev.nodes import SIMULATED_LABEL, build_nodes

SKU = [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]


def base() -> dict[str, Any]:
    """A T4 MPS pool, an A100 MPS pool with MIG off, an A100 MIG pool; a profile on each; a team quota."""
    return {
        "pools": {
            "t4mps": {"node_selector": {"kubernetes.azure.com/agentpool": "t4mps"}, "taints": SKU,
                      "instance_type": "Standard_NC4as_T4_v3", "gpu": {"model": "T4"},
                      "sharing": {"strategy": "mps", "replicas": 4}},
            "a100mps": {"node_selector": {"kubernetes.azure.com/agentpool": "a100mps",
                                          "nvidia.com/mig.config": "all-disabled"}, "taints": SKU,
                        "gpu": {"model": "A100-80GB", "count_per_node": 2},
                        "sharing": {"strategy": "mps", "replicas": 8, "rename_by_default": True}},
            "gpumig": {"node_selector": {"kubernetes.azure.com/agentpool": "gpumig"}, "taints": SKU,
                       "gpu": {"model": "A100-80GB"},
                       "sharing": {"strategy": "mig", "layout": "all-1g.10gb"}},
        },
        "profiles": [
            {"slug": "t4-mps", "display_name": "T4 quarter (MPS)", "pool": "t4mps", "gpu": {"kind": "mps"},
             "cpu": "900m", "memory": "5Gi"},
            {"slug": "a100-mps", "display_name": "A100 eighth (MPS)", "pool": "a100mps", "gpu": {"kind": "mps"}},
            {"slug": "mig", "display_name": "MIG", "pool": "gpumig", "gpu": {"kind": "mig", "profile": "1g.10gb"}},
        ],
        "teams": {"ds": {"namespace": "team-ds", "quota": {"t4mps": 4, "a100mps": 16}, "default": True}},
    }


def problems(data: dict[str, Any]) -> list[str]:
    try:
        parse_profiles(data)
    except ProfilesError as e:
        return [str(p) for p in e.problems]
    return []


def edit(**changes: Any) -> dict[str, Any]:
    """`base()` with dotted paths set (`pools.t4mps.sharing.replicas=1`); a value of None deletes the key."""
    data = copy.deepcopy(base())
    for dotted, value in changes.items():
        *head, last = dotted.split("__")
        at = data
        for k in head:
            at = at[int(k)] if isinstance(at, list) else at[k]
        if value is None:
            at.pop(last)
        elif isinstance(at, list):
            at[int(last)] = value
        else:
            at[last] = value
    return data


def test_base_is_valid():
    assert problems(base()) == []


# ---------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(("changes", "path", "needles"), [
    ({"pools__t4mps__sharing__replicas": 1}, "pools.t4mps.sharing.replicas",
     ["1: MPS needs at least 2 replicas", "device plugin refuses fewer", "strategy: none"]),
    ({"pools__t4mps__sharing__replicas": 0}, "pools.t4mps.sharing.replicas", ["0: MPS needs at least 2"]),
    ({"pools__t4mps__sharing__replicas": -4}, "pools.t4mps.sharing.replicas", ["-4: MPS needs at least 2"]),
    ({"pools__t4mps__sharing__replicas": 49}, "pools.t4mps.sharing.replicas",
     ["49", "at most 48 clients per GPU", "valid: 2..48"]),
    ({"pools__t4mps__gpu": {"model": "V100"}, "pools__t4mps__sharing__replicas": 17},
     "pools.t4mps.sharing.replicas", ["17", "at most 16 clients per V100", "valid: 2..16"]),
    ({"pools__t4mps__sharing": {"strategy": "mps"}}, "pools.t4mps.sharing.replicas", ["is required"]),
    ({"pools__t4mps__sharing": {"strategy": "mps", "replicas": 4, "fail_requests_greater_than_one": False}},
     "pools.t4mps.sharing.fail_requests_greater_than_one", ["unknown key", "valid keys: strategy, replicas"]),
    # MPS does not work on MIG-enabled GPUs
    ({"pools__a100mps__node_selector": {"kubernetes.azure.com/agentpool": "a100mps",
                                        "nvidia.com/mig.config": "all-1g.10gb"}},
     "pools.a100mps.node_selector", ["nvidia.com/mig.config=all-1g.10gb", "MPS does not work on MIG-enabled GPUs",
                                     "nvidia.com/mig.config=all-disabled", "strategy: mig"]),
    ({"pools__a100mps__node_selector": {"kubernetes.azure.com/agentpool": "a100mps",
                                        "nvidia.com/mig.strategy": "mixed"}},
     "pools.a100mps.node_selector", ["nvidia.com/mig.strategy=mixed", "MIG-enabled"]),
    ({"pools__a100mps__node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe-MIG-1g.10gb"}},
     "pools.a100mps.node_selector", ["-MIG-1g.10gb", "MIG-enabled"]),
    ({"pools__a100mps__node_selector": {"kubernetes.azure.com/agentpool": "gpumig"}},
     "pools.a100mps.node_selector", ["selects the same nodes as MIG pool 'gpumig'", "MIG-enabled"]),
    ({"pools__a100mps__node_selector": {"kubernetes.azure.com/agentpool": "gpumig", "x": "y"}},
     "pools.a100mps.node_selector", ["selects the same nodes as MIG pool 'gpumig'"]),
    ({"pools__t4mps__node_selector": {"kubernetes.azure.com/agentpool": "t4mps",
                                      "nvidia.com/gpu.sharing-strategy": "time-slicing"}},
     "pools.t4mps.node_selector", ["nvidia.com/gpu.sharing-strategy=time-slicing", "say "
                                   "nvidia.com/gpu.sharing-strategy=mps"]),
    ({"pools__t4mps__node_selector": {"kubernetes.azure.com/agentpool": "t4mps", MPS_CAPABLE_LABEL: "false"}},
     "pools.t4mps.node_selector", [f"{MPS_CAPABLE_LABEL}=false"]),
    # one replica per container
    # its /dev/shm is the device plugin's
    ({"profiles__0__shm": "1Gi"}, "profiles[0].shm", ["1 GiB: an MPS pod gets the device plugin's /dev/shm",
                                                       "remove shm"]),
    ({"profiles__0__gpu": {"kind": "mps", "count": 2}}, "profiles[0].gpu.count",
     ["2: the device plugin fails an MPS request for more than one replica", "valid: 1"]),
    # the profile's kind follows the pool's strategy
    ({"profiles__0__gpu": {"kind": "time-sliced"}}, "profiles[0].gpu.kind",
     ["'time-sliced' does not match pool 't4mps'", "sharing 'mps'", "valid: mps"]),
    ({"profiles__2__gpu": {"kind": "mps"}}, "profiles[2].gpu.kind", ["'mps' does not match pool 'gpumig'",
                                                                      "valid: mig"]),
    ({"profiles__0__gpu": {"kind": "mps", "profile": "1g.10gb"}}, "profiles[0].gpu.profile",
     ["only MIG profiles name a slice"]),
    ({"pools__t4mps__gpu": None}, "pools.t4mps.sharing", ["'mps' needs a GPU"]),
])
def test_refused_with_path_and_fix(changes, path, needles):
    found = problems(edit(**changes))
    at = [p for p in found if p.startswith(f"{path}: ")]
    assert at, found
    assert all(n in at[0] for n in needles), at[0]


def test_a_broken_mps_pool_does_not_mislead_its_profiles():
    found = problems(edit(pools__t4mps__sharing__replicas=49))
    assert found == [p for p in found if p.startswith("pools.t4mps.")], found


def test_mig_capable_gpu_with_mig_off_is_fine_and_time_slicing_keeps_its_rules():
    assert problems(edit(pools__a100mps__node_selector={"kubernetes.azure.com/agentpool": "a100mps"})) == []
    data = base()
    data["pools"]["ts"] = {"node_selector": {"p": "ts"}, "taints": SKU, "gpu": {"model": "T4"},
                           "sharing": {"strategy": "time-slicing", "replicas": 4}}
    data["profiles"].append({"slug": "ts2", "display_name": "TS", "pool": "ts",
                             "gpu": {"kind": "time-sliced", "count": 2}})
    assert problems(data) == []  # time-slicing without fail_requests_greater_than_one still allows 2


# ---------------------------------------------------------------------------------------------- what it renders
def cfg():
    return parse_profiles(base())


def test_resource_names_and_slots():
    c = cfg()
    assert c.pools["t4mps"].resource_name() == "nvidia.com/gpu"
    assert c.pools["t4mps"].slots_per_node() == {"nvidia.com/gpu": 4}
    assert c.pools["a100mps"].resource_name() == "nvidia.com/gpu.shared"
    assert c.pools["a100mps"].slots_per_node() == {"nvidia.com/gpu.shared": 16}
    assert c.resource_name(c.profile("a100-mps")) == "nvidia.com/gpu.shared"


def test_device_plugin_entry():
    c = cfg()
    assert device_plugin_entry(c.pools["t4mps"]) == {"version": "v1", "flags": {"migStrategy": "none"}, "sharing": {
        "mps": {"renameByDefault": False, "failRequestsGreaterThanOne": True,
                "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    data = render_device_plugin_config(c)["data"]
    assert yaml.safe_load(data["a100mps"])["sharing"]["mps"]["renameByDefault"] is True
    assert "mps" not in yaml.safe_load(data["gpumig"]).get("sharing", {})


def test_node_labels():
    c = cfg()
    t4 = gpu_labels(c.pools["t4mps"])
    assert t4["nvidia.com/gpu.sharing-strategy"] == "mps" and t4["nvidia.com/gpu.replicas"] == "4"
    assert t4["nvidia.com/gpu.product"] == "Tesla-T4-SHARED" and t4[MPS_CAPABLE_LABEL] == "true"
    a100 = gpu_labels(c.pools["a100mps"])
    assert a100["nvidia.com/gpu.product"] == "NVIDIA-A100-80GB-PCIe" and a100["nvidia.com/mig.strategy"] == "none"
    assert MPS_CAPABLE_LABEL not in gpu_labels(c.pools["gpumig"])  # other pools' labels as before


def test_wording():
    c = cfg()
    t4, a100 = c.profile("t4-mps"), c.profile("a100-mps")
    assert gpu_amount(c, t4) == "¼ T4 (MPS)" and gpu_amount(c, a100) == "⅛ A100-80GB (MPS)"
    assert gpu_line(c, t4) == "T4 · MPS, up to 4 users per GPU · 4 GB GPU memory of its own, compute shared"
    assert slot_noun(t4, c.pools["t4mps"]) == "T4 MPS shares"
    assert slot_noun(t4, c.pools["t4mps"], plural=False) == "T4 MPS share"
    assert quota_noun(c.pools["t4mps"]) == "T4 MPS slots"


def test_kueue_flavours_and_quota():
    objs = render_kueue(cfg())
    flavors = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "ResourceFlavor"}
    assert flavors["t4mps"]["nodeLabels"] == {"kubernetes.azure.com/agentpool": "t4mps"}
    assert flavors["t4mps"]["tolerations"] == [{"key": "sku", "operator": "Equal", "value": "gpu",
                                                "effect": "NoSchedule"}]
    (cq,) = [o for o in objs if o["kind"] == "ClusterQueue"]
    group = cq["spec"]["resourceGroups"][0]
    assert {"nvidia.com/gpu", "nvidia.com/gpu.shared"} <= set(group["coveredResources"])
    by = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]}
    assert by["t4mps"]["nvidia.com/gpu"] == 4 and by["t4mps"]["nvidia.com/gpu.shared"] == 0
    assert by["a100mps"]["nvidia.com/gpu.shared"] == 16


def test_rightsize_never_promises_an_mps_share():
    c = cfg()
    assert capacity(c, c.profile("a100-mps")) is None
    assert capacity(c, c.profile("mig")) is not None


def test_an_mps_pod_mounts_no_dev_shm_of_its_own():
    from jupyterhub_gpu.builders import pods as podspec
    from jupyterhub_gpu.builders.jobs import build_job
    from jupyterhub_gpu.hub.picker import size_line

    c = cfg()
    mps, mig = c.profile("t4-mps"), c.profile("mig")
    assert not mps.own_shm and mps.memory_limit == 5 * 2**30  # memory alone: the shm is not the pod's
    assert mig.own_shm and mig.memory_limit == int(mig.memory + mig.shm)
    over = podspec.spawner_overrides(c, mps)
    assert over["volumes"] == [] and over["volume_mounts"] == []
    assert over["mem_limit"] == 5 * 2**30
    assert [v["name"] for v in podspec.spawner_overrides(c, mig)["volumes"]] == [podspec.SHM_VOLUME]
    nb = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    job, _ = build_job(c, mps, "ana", ["ds"], "a.ipynb", nb)
    spec = job["spec"]["template"]["spec"]
    assert podspec.SHM_VOLUME not in {v["name"] for v in spec["volumes"]}
    assert "/dev/shm" not in {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert spec["containers"][0]["resources"]["limits"]["memory"] == str(5 * 2**30)
    job, _ = build_job(c, mig, "ana", ["ds"], "a.ipynb", nb)
    assert "/dev/shm" in {m["mountPath"] for m in job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert size_line(mps) == "0.9 CPU · 5 GiB RAM · /dev/shm shared (MPS)"


# ---------------------------------------------------------------------------------------------- property
def plugin_accepts(entry: dict[str, Any], model: str) -> list[str]:
    """What the device plugin would refuse in one config entry (its `sharing.mps` rules at v0.20.0)."""
    why = []
    if entry.get("version") != "v1":
        why.append("version")
    if entry["flags"].get("migStrategy") == "mixed":
        why.append("mixed with MPS")
    mps = entry["sharing"]["mps"]
    if set(entry["sharing"]) != {"mps"} or not mps.get("resources"):
        why.append("no resources")
    for r in mps.get("resources", []):
        if not r.get("name") or not isinstance(r.get("replicas"), int) or isinstance(r["replicas"], bool):
            why.append("resource without name or replicas")
        elif r["replicas"] < 2:
            why.append("replicas < 2")
        elif r["replicas"] > mps_max_replicas(model):
            why.append("more replicas than MPS clients")
        if r.get("devices", "all") != "all":
            why.append("devices")
    if not isinstance(mps.get("renameByDefault"), bool) or mps.get("failRequestsGreaterThanOne") is not True:
        why.append("flags")
    return why


@settings(max_examples=150, deadline=None)
@given(model=st.sampled_from(sorted(GPU_MODELS)), gpus=st.integers(1, 16), replicas=st.integers(-3, 60),
       rename=st.booleans())
def test_any_valid_mps_pool_renders_a_config_the_plugin_accepts(model, gpus, replicas, rename):
    data = {"pools": {"p": {"node_selector": {"pool": "p"}, "taints": SKU,
                            "gpu": {"model": model, "count_per_node": gpus},
                            "sharing": {"strategy": "mps", "replicas": replicas, "rename_by_default": rename}}},
            "profiles": [{"slug": "s", "display_name": "S", "pool": "p", "gpu": {"kind": "mps"}}]}
    found = problems(data)
    if not 2 <= replicas <= mps_max_replicas(model):
        assert [p for p in found if p.startswith("pools.p.sharing.replicas: ")], found
        return
    assert found == []
    pool = parse_profiles(data).pools["p"]
    assert isinstance(pool.sharing, MPSSharing)
    entry = yaml.safe_load(yaml.safe_dump(device_plugin_entry(pool)))
    assert plugin_accepts(entry, model) == []
    resource = "nvidia.com/gpu.shared" if rename else "nvidia.com/gpu"
    assert pool.slots_per_node() == {resource: gpus * replicas}
    assert gpu_labels(pool)["nvidia.com/gpu.replicas"] == str(replicas)


# ---------------------------------------------------------------------------------------------- doctor
def nodes_of(c, simulated=False):
    nodes = build_nodes(c, 2)
    if not simulated:
        for n in nodes:
            n["metadata"]["labels"].pop(SIMULATED_LABEL)
    return [n for n in nodes if n["metadata"]["labels"].get("kubernetes.azure.com/agentpool") == "t4mps"]


def pods_on(nodes, name="nvidia-device-plugin-mps-control-daemon", ready=True):
    return [{"metadata": {"name": f"{name}-{i}"}, "spec": {"nodeName": n["metadata"]["name"]},
             "status": {"phase": "Running", "containerStatuses": [{"ready": ready}]}} for i, n in enumerate(nodes)]


def test_doctor_mps_daemon_ok():
    c = cfg()
    nodes = nodes_of(c)
    snap = Snapshot(nodes=nodes, daemonsets=[], device_plugin_pods=pods_on(nodes) + pods_on(nodes, "nvidia-dp"))
    row = check_mps("t4mps", c.pools["t4mps"], nodes, snap)
    assert row.status == OK and row.name == "MPS daemon" and "on all 2 nodes" in row.detail
    assert check_mps("gpumig", c.pools["gpumig"], nodes, snap) is None


def test_doctor_mps_label_missing_says_how_to_fix():
    c = cfg()
    nodes = nodes_of(c)
    nodes[1]["metadata"]["labels"][MPS_CAPABLE_LABEL] = "false"
    del nodes[0]["metadata"]["labels"][MPS_CAPABLE_LABEL]
    row = check_mps("t4mps", c.pools["t4mps"], nodes, Snapshot(nodes=nodes, device_plugin_pods=pods_on(nodes)))
    assert row.status == FAIL and f"want {MPS_CAPABLE_LABEL}=true" in row.detail
    assert "<missing>" in row.detail and ": false" in row.detail
    assert "nvidia.com/device-plugin.config=t4mps" in row.fix and "gpu-feature-discovery" in row.fix
    assert "all-disabled" not in row.fix  # a T4 has no MIG to turn off


def test_doctor_mps_daemon_not_ready():
    c = cfg()
    nodes = nodes_of(c)
    pods = pods_on(nodes[:1]) + pods_on(nodes[1:], ready=False) + pods_on(nodes, "nvidia-dp")
    row = check_mps("t4mps", c.pools["t4mps"], nodes, Snapshot(nodes=nodes, device_plugin_pods=pods))
    assert row.status == FAIL and nodes[1]["metadata"]["name"] in row.detail
    assert nodes[0]["metadata"]["name"] not in row.detail and "mps-control-daemon" in row.fix


def test_doctor_mps_on_simulated_nodes_and_in_the_table():
    c = cfg()
    sim = nodes_of(c, simulated=True)
    assert check_mps("t4mps", c.pools["t4mps"], sim, Snapshot(nodes=sim)).status == SIMULATED
    checks = run_checks(c, Snapshot(nodes=nodes_of(c), daemonsets=[], device_plugin_pods=[]))
    rows = [x for x in checks if x.section == "pool t4mps" and x.name == "MPS daemon"]
    assert len(rows) == 1 and rows[0].status == FAIL


def test_doctor_mps_fix_turns_mig_off_on_mig_capable_gpus():
    c = cfg()
    nodes = [n for n in build_nodes(c, 1) if n["metadata"]["labels"].get("kubernetes.azure.com/agentpool")
             == "a100mps"]
    del nodes[0]["metadata"]["labels"][MPS_CAPABLE_LABEL]
    row = check_mps("a100mps", c.pools["a100mps"], nodes, Snapshot(nodes=nodes))
    assert row.status == FAIL and "nvidia.com/mig.config=all-disabled" in row.fix


# ---------------------------------------------------------------------------------------------- the example
def test_the_example_file_has_an_mps_pool_for_its_teaching_group():
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

    example = load_profiles(EXAMPLE_PROFILES)
    pool = example.pools["gput4mps"]
    assert isinstance(pool.sharing, MPSSharing) and pool.slots_per_node() == {"nvidia.com/gpu": 4}
    mps = example.profile("t4-mps")
    assert mps.gpu.kind == "mps" and gpu_amount(example, mps) == "¼ T4 (MPS)"
    assert [p.slug for p in example.profiles_for(["teaching"])] == ["cpu", "t4-shared", "t4-mps"]
    assert example.team_for(["teaching"])[0] == "data-science"
    assert example.teams["data-science"].quota["gput4mps"] == 4
    entry = yaml.safe_load(render_device_plugin_config(example)["data"]["gput4mps"])
    assert plugin_accepts(entry, "T4") == []


def test_aks_labels_turn_mig_off_for_mps_on_mig_capable_gpus():
    from jupyterhub_gpu.builders.aks_pools import node_labels_for_aks

    c = cfg()
    assert node_labels_for_aks("a100mps", c.pools["a100mps"])["nvidia.com/mig.config"] == "all-disabled"
    data = edit(pools__a100mps__node_selector={"kubernetes.azure.com/agentpool": "a100mps"})
    labels = node_labels_for_aks("a100mps", parse_profiles(data).pools["a100mps"])
    assert labels == {"nvidia.com/device-plugin.config": "a100mps", "nvidia.com/mig.config": "all-disabled"}
    assert "nvidia.com/mig.config" not in node_labels_for_aks("t4mps", c.pools["t4mps"])
