"""`gpuhub doctor` on a file with dra pools (the DRA example): a healthy real cluster (nodes from
jupyterhub_gpu_dev.nodes, the driver's ResourceSlices and DeviceClasses and Kueue's Configuration as plain dicts,
gpuhub's objects from the same builders `render kueue` uses), then one thing broken at a time; and Kueue's
waitForPodsReady as v0.19.2 resolves it, for any file."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from doctor.test_doctor_checks import failed, row

from jupyterhub_gpu.builders import dra
from jupyterhub_gpu.builders.kueue import render_kueue
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.model.validation import parse_profiles
from jupyterhub_gpu.tools import doctor
from jupyterhub_gpu.tools import doctor_kueue_config as kc
from jupyterhub_gpu.tools.doctor import FAIL, OK, SIMULATED, Snapshot, access_requests, run_checks
from jupyterhub_gpu.tools.doctor_dra import devices_by_node
from jupyterhub_gpu_dev.nodes import build_nodes

HUB_NS = "jhub"
DRA_EXAMPLE = Path(__file__).resolve().parents[2] / "jupyterhub_gpu" / "examples" / "profiles-dra.yaml"
A100 = "NVIDIA A100 80GB PCIe"


@pytest.fixture(scope="module")
def cfg():
    return parse_profiles(yaml.safe_load(DRA_EXAMPLE.read_text()), "profiles-dra.yaml")


def device(name: str, kind: str, product: str = A100, profile: str | None = None) -> dict:
    attrs = {"type": {"string": kind}, "uuid": {"string": f"GPU-{name}"}, "productName": {"string": product}}
    if profile:
        attrs["profile"] = {"string": profile}
    return {"name": name, "attributes": attrs}


def resource_slice(node: str, devices: list[dict], generation: int = 1, driver: str = "gpu.nvidia.com") -> dict:
    return {"metadata": {"name": f"{node}-{driver}-{generation}"},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": generation,
                                                                 "resourceSliceCount": 1}, "devices": devices}}


def slices_for(cfg, nodes) -> list[dict]:
    """What the NVIDIA DRA driver publishes on each node of a dra pool: its GPUs, or its MIG devices."""
    out = []
    for n in nodes:
        pool = next((p for p in cfg.pools.values() if p.is_dra and all(
            n["metadata"]["labels"].get(k) == v for k, v in p.node_selector.items())), None)
        if pool is None:
            continue
        name, devices = n["metadata"]["name"], []
        for g in range(pool.gpu.count_per_node):
            if pool.mig_layout:
                devices += [device(f"gpu-{g}-mig-{s}-{i}", "mig", profile=s)
                            for s, k in pool.mig_layout.items() for i in range(k)]
            else:
                devices.append(device(f"gpu-{g}", "gpu"))
        out.append(resource_slice(name, devices))
    return out


def kueue_config_map(config: dict, name: str = kc.CONFIG_MAP) -> dict:
    return {"metadata": {"name": name, "namespace": kc.NAMESPACE},
            "data": {kc.CONFIG_KEY: yaml.safe_dump(config)}}


def merged_config(cfg) -> dict:
    """The chart's v1beta2 Configuration with `gpuhub render kueue-config` merged in."""
    return {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
            "integrations": {"frameworks": ["batch/job", "pod"]}, **dra.kueue_configuration_fragment(cfg)}


def healthy(cfg, simulated: bool = False) -> Snapshot:
    nodes = build_nodes(cfg, 2)
    if not simulated:
        for n in nodes:
            n["metadata"]["labels"].pop("gpuhub.io/simulated")
    kueue = {}
    for obj in render_kueue(cfg, HUB_NS):
        if obj["kind"] in doctor.KUEUE_KINDS:
            obj = copy.deepcopy(obj)
            if obj["kind"].endswith("Queue"):
                obj["status"] = {"conditions": [{"type": "Active", "status": "True", "reason": "Ready"}]}
            kueue.setdefault(obj["kind"], []).append(obj)
    crds = {f"{p}.kueue.x-k8s.io": {"spec": {"versions": [{"name": "v1beta2", "served": True}]}}
            for p in doctor.KUEUE_CRDS}
    ds = [{"metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator"}}]
    plugin_nodes = [n for n in nodes if n["metadata"]["labels"].get("kubernetes.azure.com/agentpool") == "gput4"]
    pods = [{"metadata": {"name": f"nvidia-device-plugin-{i}"}, "spec": {"nodeName": n["metadata"]["name"]},
             "status": {"phase": "Running", "containerStatuses": [{"ready": True}]}}
            for i, n in enumerate(plugin_nodes)]
    classes = {c["metadata"]["name"]: c for c in dra.driver_device_classes() + dra.device_classes(cfg)}
    templates = {(t["metadata"]["namespace"], t["metadata"]["name"]): t for t in dra.claim_templates(cfg, HUB_NS)}
    return Snapshot(nodes=nodes, daemonsets=ds, device_plugin_pods=pods, crds=crds, kueue=kueue,
                    access={req: True for req in access_requests(cfg, HUB_NS)},
                    dra_classes=classes, dra_slices=[] if simulated else slices_for(cfg, nodes),
                    dra_templates=templates, kueue_config_maps=[kueue_config_map(merged_config(cfg))],
                    kueue_deployments=[])


# ---------------------------------------------------------------- healthy
def test_a_healthy_dra_cluster_passes_with_the_dra_rows(cfg):
    checks = run_checks(cfg, healthy(cfg), "profiles-dra.yaml", HUB_NS)
    assert failed(checks) == [] and doctor.exit_code(checks) == 0
    names = {(c.section, c.name) for c in checks}
    assert {("pool dra-a100", "DRA devices"), ("pool dra-a100mig", "DRA devices"), ("pool dra-a100", "allocatable"),
            ("dra", "DeviceClass gpu.nvidia.com"), ("dra", "DeviceClass gpuhub-mig-3g.40gb"),
            ("dra", "ResourceClaimTemplate jhub/gpuhub-a100-any"),
            ("dra", "ResourceClaimTemplate team-ds/gpuhub-a100-any.job"),
            ("kueue", "DRA mappings"), ("kueue", "DRA integration"), ("kueue", "waitForPodsReady")} <= names
    # a dra pool has no device plugin: no such row (the device-plugin pool keeps its own)
    assert ("pool dra-a100", "device plugin") not in names and ("pool gput4", "device plugin") in names
    assert "2 x NVIDIA-A100-80GB-PCIe on each of 2 nodes" in row(checks, "pool dra-a100", "DRA devices").detail
    assert "2 x MIG 3g.40gb" in row(checks, "pool dra-a100mig", "DRA devices").detail
    assert "gpuhub-mig-3g.40gb → nvidia.com/mig-3g.40gb" in row(checks, "kueue", "DRA mappings").detail
    assert "timeout 1h, blockAdmission false" in row(checks, "kueue", "waitForPodsReady").detail
    assert "choices in order" in row(checks, "dra", "ResourceClaimTemplate jhub/gpuhub-a100-any").detail


def test_the_example_without_dra_pools_gets_no_dra_rows(cfg):
    plain = load_profiles(EXAMPLE_PROFILES)
    snap = healthy(plain)
    snap.dra_slices, snap.kueue_config_maps = None, None
    checks = run_checks(plain, snap, "p.yaml", HUB_NS)
    assert not [c for c in checks if c.section == "dra" or "DRA" in c.name or c.name == "waitForPodsReady"]


def test_simulated_dra_nodes_without_slices_say_so(cfg):
    checks = run_checks(cfg, healthy(cfg, simulated=True), "p.yaml", HUB_NS)
    c = row(checks, "pool dra-a100", "DRA devices")
    assert c.status == SIMULATED and "NVIDIA DRA driver" in c.detail
    assert not [f for f in failed(checks) if "DRA" in f.name]


# ---------------------------------------------------------------- the driver's devices
def test_a_node_without_slices_is_named_with_what_it_lacks(cfg):
    snap = healthy(cfg)
    gone = "aks-dra-a100-00000001-vmss000001"
    snap.dra_slices = [s for s in snap.dra_slices if s["spec"]["nodeName"] != gone]
    c = row(run_checks(cfg, snap), "pool dra-a100", "DRA devices")
    assert c.status == FAIL and f"{gone}: no devices of driver gpu.nvidia.com" in c.detail
    assert "dra-driver-nvidia-gpu" in c.fix and "gpuResourcesEnabledOverride=true" in c.fix


def test_a_node_with_a_gpu_short_and_another_model(cfg):
    snap = healthy(cfg)
    node = "aks-dra-a100-00000001-vmss000000"
    s = next(s for s in snap.dra_slices if s["spec"]["nodeName"] == node)
    s["spec"]["devices"] = [device("gpu-0", "gpu", product="NVIDIA A100-SXM4-80GB")]
    c = row(run_checks(cfg, snap), "pool dra-a100", "DRA devices")
    assert c.status == FAIL and f"{node}: 1 GPU (want 2)" in c.detail
    assert "productName NVIDIA A100-SXM4-80GB, not the pool's NVIDIA-A100-80GB-PCIe" in c.detail
    assert "fix pools.dra-a100.gpu" in c.fix and "dra-driver-nvidia-gpu" not in c.fix  # the driver runs


def test_a_mig_node_missing_its_slices(cfg):
    snap = healthy(cfg)
    node = "aks-dra-a100mig-00000001-vmss000000"
    s = next(s for s in snap.dra_slices if s["spec"]["nodeName"] == node)
    s["spec"]["devices"] = [device("gpu-0", "gpu")]  # MIG not enabled: the whole GPU
    c = row(run_checks(cfg, snap), "pool dra-a100mig", "DRA devices")
    assert c.status == FAIL and f"{node}: 0 MIG 3g.40gb (want 2)" in c.detail and "MIG rows" in c.fix


def test_partitionable_devices_fail_and_the_picker_does_not_count_them(cfg):
    """Dynamic MIG (KEP-4815): the driver publishes a GPU and every slice it could be cut into, each consuming the
    GPU's shared counters. gpuhub counts a static layout only: doctor fails the pool, and capacity counts none
    of them rather than a GPU and its slices as separate devices."""
    from jupyterhub_gpu.cluster.dra_devices import slice_devices

    snap = healthy(cfg)
    node = "aks-dra-a100mig-00000001-vmss000000"
    s = next(s for s in snap.dra_slices if s["spec"]["nodeName"] == node)
    s["spec"]["sharedCounters"] = [{"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}]
    consumes = [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "40Gi"}}}]
    s["spec"]["devices"] = [dict(device("gpu-0", "gpu"), consumesCounters=consumes)] + [
        dict(device(f"gpu-0-mig-3g.40gb-{i}", "mig", profile="3g.40gb"), consumesCounters=consumes) for i in (0, 4)]
    c = row(run_checks(cfg, snap), "pool dra-a100mig", "DRA devices")
    assert c.status == FAIL and f"{node}: 3 partitionable devices (dynamic MIG" in c.detail, c
    assert "without dynamic MIG" in c.fix and "MIG rows" not in c.fix
    assert slice_devices(s) == (node, ())


def test_only_the_newest_generation_of_a_pool_counts():
    old = resource_slice("n1", [device("gpu-0", "gpu")], generation=1)
    new = resource_slice("n1", [device("gpu-0", "gpu"), device("gpu-1", "gpu")], generation=2)
    other = resource_slice("n1", [device("x", "gpu")], driver="example.com")
    assert [d["name"] for d in devices_by_node([old, new, other])["n1"]] == ["gpu-0", "gpu-1"]


def test_a_device_plugin_on_a_dra_node_fails_the_allocatable_row(cfg):
    snap = healthy(cfg)
    node = next(n for n in snap.nodes if n["metadata"]["name"] == "aks-dra-a100-00000001-vmss000000")
    node["status"]["allocatable"]["nvidia.com/gpu"] = "2"
    c = row(run_checks(cfg, snap), "pool dra-a100", "allocatable")
    assert c.status == FAIL and "same GPU" in c.detail and "nvidia.com/gpu.deploy.device-plugin=false" in c.fix


def test_the_dra_driver_on_a_device_plugin_pool_fails(cfg):
    snap = healthy(cfg)
    snap.dra_slices.append(resource_slice("aks-gput4-00000001-vmss000000", [device("gpu-0", "gpu", "Tesla T4")]))
    c = row(run_checks(cfg, snap), "pool gput4", "DRA devices")
    assert c.status == FAIL and "aks-gput4-00000001-vmss000000" in c.detail and "kubeletPlugin.nodeSelector" in c.fix


# ---------------------------------------------------------------- DeviceClasses and claim templates
def test_missing_device_classes_fail_with_their_own_fix(cfg):
    snap = healthy(cfg)
    snap.dra_classes = {}
    checks = run_checks(cfg, snap, "p.yaml")
    driver = row(checks, "dra", "DeviceClass gpu.nvidia.com")
    mine = row(checks, "dra", "DeviceClass gpuhub-mig-3g.40gb")
    assert driver.status == mine.status == FAIL and "Pending" in driver.detail
    assert "the claims of pool dra-a100 name it" in driver.detail  # the MIG pool's claims name gpuhub's class
    assert "dra-driver-nvidia-gpu" in driver.fix and mine.fix.startswith("gpuhub render kueue p.yaml")


def test_a_changed_mig_class_selector_fails(cfg):
    snap = healthy(cfg)
    snap.dra_classes["gpuhub-mig-3g.40gb"]["spec"]["selectors"] = [{"cel": {"expression": "true"}}]
    c = row(run_checks(cfg, snap), "dra", "DeviceClass gpuhub-mig-3g.40gb")
    assert c.status == FAIL and "the file renders" in c.detail


def test_claim_templates_missing_or_stale(cfg):
    snap = healthy(cfg)
    del snap.dra_templates[("team-ds", "gpuhub-a100-dra")]
    stale = snap.dra_templates[(HUB_NS, "gpuhub-a100-3g")]
    stale["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    checks = run_checks(cfg, snap, "p.yaml")
    missing = row(checks, "dra", "ResourceClaimTemplate team-ds/gpuhub-a100-dra")
    changed = row(checks, "dra", "ResourceClaimTemplate jhub/gpuhub-a100-3g")
    assert missing.status == FAIL and "jobs of its profile in team-ds cannot be created" in missing.detail
    assert changed.status == FAIL and changed.fix.startswith("kubectl -n jhub delete resourceclaimtemplate "
                                                             "gpuhub-a100-3g; then gpuhub render kueue p.yaml")


def test_unreadable_dra_objects_say_what_to_allow(cfg):
    snap = healthy(cfg)
    snap.dra_slices, snap.errors["dra"] = None, "HTTP 403: forbidden"
    checks = run_checks(cfg, snap)
    assert row(checks, "pool dra-a100", "DRA devices").status == FAIL
    c = row(checks, "dra", "DeviceClasses")
    assert c.status == FAIL and "HTTP 403" in c.detail and "resourceslices" in c.fix


# ---------------------------------------------------------------- Kueue's Configuration
def test_the_render_kueue_object_check_skips_the_dra_kinds_it_does_not_compare(cfg):
    kinds = {o["kind"] for o in render_kueue(cfg, HUB_NS)}
    assert {"DeviceClass", "ResourceClaimTemplate"} <= kinds
    rows = doctor.check_kueue_objects(cfg, healthy(cfg), "p.yaml", HUB_NS)
    assert rows and all(c.status == OK for c in rows)
    assert not [c for c in rows if "DeviceClass" in c.name or "ResourceClaimTemplate" in c.name]


def test_unmapped_and_wrongly_mapped_classes_fail(cfg):
    snap = healthy(cfg)
    config = merged_config(cfg)
    config["resources"]["deviceClassMappings"] = [{"name": "example.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]}]
    snap.kueue_config_maps = [kueue_config_map(config)]
    c = row(run_checks(cfg, snap, "p.yaml"), "kueue", "DRA mappings")
    assert c.status == FAIL
    assert "gpu.nvidia.com counts as example.com/gpu, the ClusterQueues cover nvidia.com/gpu" in c.detail
    assert "gpuhub-mig-3g.40gb is not mapped" in c.detail and "inadmissible" in c.detail
    assert c.fix.startswith("gpuhub render kueue-config p.yaml") and "rollout restart" in c.fix


@pytest.mark.parametrize("broken", [{"featureGates": ["KueueDRAIntegration"]},
                                    {"resources": {"deviceClassMappings": ["gpu.nvidia.com", {"deviceClassNames": 3}]}},
                                    {"resources": ["x"]}])
def test_a_hand_broken_configuration_is_a_failed_row_not_a_crash(cfg, broken):
    snap = healthy(cfg)
    snap.kueue_config_maps = [kueue_config_map({**merged_config(cfg), **broken})]
    c = row(run_checks(cfg, snap, "p.yaml"), "kueue", "DRA mappings")
    assert c.status == (OK if "featureGates" in broken else FAIL)


@pytest.mark.parametrize("where", ["config", "args"])
def test_the_dra_gate_turned_off_fails_wherever_it_is_set(cfg, where):
    snap = healthy(cfg)
    if where == "config":
        config = merged_config(cfg)
        config["featureGates"] = {"KueueDRAIntegration": False}
        snap.kueue_config_maps = [kueue_config_map(config)]
    else:
        snap.kueue_deployments = [{"metadata": {"name": kc.MANAGER}, "spec": {"template": {"spec": {"containers": [
            {"args": ["--config=/controller_manager_config.yaml",
                      "--feature-gates=TopologyAwareScheduling=true,KueueDRAIntegration=false"]}]}}}}]
    c = row(run_checks(cfg, snap), "kueue", "DRA integration")
    assert c.status == FAIL and "inadmissible" in c.detail
    assert ("featureGates in the Configuration" if where == "config" else "--feature-gates of deployment") in c.detail


def test_no_configuration_found_fails_only_for_a_dra_file(cfg):
    snap = healthy(cfg)
    snap.kueue_config_maps = [{"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "x"}}]
    c = row(run_checks(cfg, snap, "p.yaml"), "kueue", "Configuration")
    assert c.status == FAIL and "no ConfigMap kueue-manager-config" in c.detail
    plain = load_profiles(EXAMPLE_PROFILES)
    assert kc.check_kueue_config(plain, snap) == []


def test_another_release_names_its_configmap_otherwise(cfg):
    snap = healthy(cfg)
    snap.kueue_config_maps = [kueue_config_map(merged_config(cfg), name="q-kueue-manager-config")]
    c = row(run_checks(cfg, snap), "kueue", "waitForPodsReady")
    assert c.status == OK and "ConfigMap q-kueue-manager-config" in c.detail


@pytest.mark.parametrize("config, on, timeout, block", [
    (None, True, "30m", False),                                                  # no file: v1beta2 defaults
    ({"apiVersion": "config.kueue.x-k8s.io/v1beta2"}, True, "30m", False),       # the chart's: on by default
    ({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "waitForPodsReady": {"timeout": "1h"}}, True, "1h", False),
    ({"apiVersion": "config.kueue.x-k8s.io/v1beta1"}, False, "", False),         # v1beta1: off unless enabled
    ({"apiVersion": "config.kueue.x-k8s.io/v1beta1", "waitForPodsReady": {"enable": True}}, True, "5m", True),
])
def test_pods_ready_as_kueue_resolves_it(config, on, timeout, block):
    assert kc.pods_ready(config, {}) == (on, timeout, block)


def test_pods_ready_disabled_by_its_gate():
    assert kc.pods_ready({"apiVersion": "config.kueue.x-k8s.io/v1beta2"}, {"DisableWaitForPodsReady": True})[0] is False


def test_the_default_30m_is_reported_as_shorter_than_gpuhubs_hour_for_any_file():
    plain = load_profiles(EXAMPLE_PROFILES)
    snap = Snapshot(kueue_config_maps=[kueue_config_map({"apiVersion": "config.kueue.x-k8s.io/v1beta2",
                                                          "kind": "Configuration"})], kueue_deployments=[])
    (c,) = kc.check_kueue_config(plain, snap, "p.yaml")
    assert c.name == "waitForPodsReady" and c.status == FAIL
    assert "timeout 30m, shorter than the 1h gpuhub renders" in c.detail
    assert "image is still pulling on a fresh node" in c.detail and "Kueue deletes its pod" in c.detail
    assert c.fix.startswith("gpuhub render kueue-config p.yaml")


def test_blocking_admission_and_off_are_said():
    plain = load_profiles(EXAMPLE_PROFILES)
    blocking = {"apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "waitForPodsReady": {"timeout": "2h", "blockAdmission": True}}
    (c,) = kc.check_kueue_config(plain, Snapshot(kueue_config_maps=[kueue_config_map(blocking)]))
    assert c.status == FAIL and "blockAdmission true" in c.detail and "shorter" not in c.detail
    (off,) = kc.check_kueue_config(plain, Snapshot(kueue_config_maps=[kueue_config_map(
        {"apiVersion": "config.kueue.x-k8s.io/v1beta1"})]))
    assert off.status == OK and off.detail.startswith("off (") and "v1beta1" in off.detail


@pytest.mark.parametrize("model, name, expected", [
    ("A100-80GB", "NVIDIA A100 80GB PCIe", True), ("A100-80GB", "NVIDIA A100-SXM4-80GB", False),
    ("L4", "NVIDIA L4", True), ("L4", "NVIDIA L40S", False), ("T4", "Tesla T4", True),
])
def test_product_matches_says_what_the_claims_selector_says(model, name, expected):
    from jupyterhub_gpu.model.dra import product_matches
    from jupyterhub_gpu.model.gpus import GPU_MODELS

    assert product_matches(GPU_MODELS[model].product, name) is expected


def test_nothing_read_means_no_dra_rows_and_an_unreadable_configuration_is_said(cfg):
    """Kueue not installed (the live shell reads its Configuration only then): its CRDs row says so, no other."""
    snap = healthy(cfg)
    snap.kueue_config_maps = None
    assert kc.check_kueue_config(cfg, snap) == []
    snap.errors["kueue_config"] = "HTTP 403: configmaps is forbidden"
    (c,) = kc.check_kueue_config(cfg, snap)
    assert c.status == FAIL and "HTTP 403" in c.detail and "configmaps" in c.fix
    bare = Snapshot(nodes=snap.nodes)
    checks = run_checks(cfg, bare)
    assert not [c for c in checks if c.section == "dra" or c.name == "DRA devices"]
