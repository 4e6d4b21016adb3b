"""Node sizes: a pool of unknown size is unknown, not small (a valid file is never refused for it); known VM
sizes count as AKS allocates them (not their nominal size) in validation, the picker and the Kueue quota; the
spawn check and `gpuhub doctor` read the real nodes' allocatable."""
from __future__ import annotations

from decimal import Decimal

import pytest
import yaml

from jupyterhub_gpu.builders.kueue import render_kueue
from jupyterhub_gpu.cluster.prices import hourly_cost
from jupyterhub_gpu.hub import progress
from jupyterhub_gpu.hub.capacity import ClusterState
from jupyterhub_gpu.model.fit import fit_warnings
from jupyterhub_gpu.model.validation import parse_profiles_text
from jupyterhub_gpu.model.vm_sizes import GIB, allocatable, allocatable_of, reserved_cpu_millis
from jupyterhub_gpu.tools import doctor
from jupyterhub_gpu_dev.nodes import build_nodes

UNKNOWN = """
pools:
  big:                                   # no instance_type, no node: size unknown
    node_selector: {kubernetes.azure.com/agentpool: big}
    taints: [{key: sku, value: gpu, effect: NoSchedule}]
    gpu: {model: A100-80GB, count_per_node: 8}
    max_nodes: 2
  cpu:
    node_selector: {kubernetes.azure.com/agentpool: cpu}
    instance_type: Standard_E64s_v5      # a real size this package does not list
    cost_per_node_hour: 4.0
profiles:
  - {slug: huge, display_name: Huge, pool: big, gpu: {kind: full, count: 8}, cpu: 90, memory: 900Gi}
  - {slug: half, display_name: Half, pool: big, gpu: {kind: full, count: 4}, cpu: 40, memory: 400Gi}
  - {slug: wide, display_name: Wide, pool: cpu, cpu: 60, memory: 400Gi}
teams:
  ml: {namespace: team-ml, quota: {big: 16}}
"""


@pytest.fixture
def unknown():
    return parse_profiles_text(UNKNOWN)


def test_a_pool_of_unknown_size_is_valid_with_a_warning_not_an_error(unknown):
    assert unknown.pools["big"].shape() is None and unknown.pools["cpu"].shape() is None
    warnings = fit_warnings(unknown)
    assert len(warnings) == 2 and all("node size unknown" in w for w in warnings)
    assert "huge, half" in warnings[0] and "gpuhub doctor" in warnings[0]
    assert "'Standard_E64s_v5' is not one jupyterhub-gpu knows" in warnings[1]


def test_kueue_quota_of_an_unknown_pool_follows_its_largest_profile(unknown):
    (cq,) = [o for o in render_kueue(unknown) if o["kind"] == "ClusterQueue"]
    res = {r["name"]: r["nominalQuota"] for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    assert res["nvidia.com/gpu"] == 16
    from kubernetes.utils.quantity import parse_quantity

    huge = unknown.by_slug["huge"]  # the largest per GPU: 90 CPUs, 901 GiB (memory + shm) for 8 GPUs
    assert parse_quantity(res["cpu"]) == 180
    assert parse_quantity(res["memory"]) == pytest.approx(huge.memory_limit * 2, rel=1e-6)


def test_picker_shows_no_made_up_price_for_an_unknown_size(unknown):
    assert hourly_cost(unknown, unknown.by_slug["wide"]) == 0.0


def test_known_vm_sizes_count_as_aks_allocates_them():
    assert [reserved_cpu_millis(c) for c in (1, 2, 4, 8, 16, 32, 64)] == [60, 100, 140, 180, 260, 420, 740]
    cpu, mem = allocatable_of("Standard_NC4as_T4_v3")
    assert cpu == Decimal("3.86") and round(float(mem / GIB), 2) == 24.8 and mem % 2**20 == 0
    assert allocatable(4, 28, max_pods=250)[1] < mem  # more pods per node, more memory kept back
    assert allocatable_of("Standard_Unknown_v9") is None
    # the case: four time-sliced sessions of 1 CPU / 7 GiB do not fit one NC4as_T4_v3
    data = yaml.safe_load(UNKNOWN)
    data["pools"]["t4"] = {"node_selector": {"kubernetes.azure.com/agentpool": "t4"},
                           "instance_type": "Standard_NC4as_T4_v3",
                           "taints": [{"key": "sku", "value": "gpu"}], "gpu": {"model": "T4"},
                           "sharing": {"strategy": "time-slicing", "replicas": 4}}
    data["profiles"].append({"slug": "t4", "display_name": "T4", "pool": "t4", "gpu": {"kind": "time-sliced"},
                             "cpu": 1, "memory": "6Gi", "shm": "1Gi"})
    cfg = parse_profiles_text(yaml.safe_dump(data))
    (w,) = [w for w in fit_warnings(cfg) if "'t4'" in w]
    assert "4 per node need 4 CPUs / 28 GiB" in w and "only 3 run at once" in w


def test_the_example_file_fits_its_nodes():
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

    assert fit_warnings(load_profiles(EXAMPLE_PROFILES)) == []


def ready(node):
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return node


def test_spawn_check_uses_the_real_allocatable(unknown):
    state = ClusterState(unknown)
    nodes = [ready(n) for n in build_nodes(unknown, {"big": 2})]
    for n in nodes:  # what the real nodes say they offer
        n["status"]["allocatable"].update(cpu="95", memory=str(950 * 2**30))
    state.replace("nodes", nodes)
    assert progress.never_fits(unknown.by_slug["huge"], state) is None
    for n in nodes:
        n["status"]["allocatable"]["cpu"] = "64"
        state.apply_node("MODIFIED", n)
    msg = progress.never_fits(unknown.by_slug["huge"], state)
    assert "needs 90 CPUs" in msg and "offers pods 64 CPUs" in msg and "can never start" in msg
    assert progress.never_fits(unknown.by_slug["half"], state) is None


def test_doctor_compares_the_file_and_the_profiles_with_the_real_allocatable(unknown):
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

    nodes = [ready(n) for n in build_nodes(unknown, {"big": 1})]
    nodes[0]["status"]["allocatable"].update(cpu="95", memory=str(950 * 2**30))
    (row,) = doctor.check_node_size(unknown, "big", unknown.pools["big"], nodes)
    assert row.status == doctor.OK and "95 CPUs / 950 GiB" in row.detail
    nodes[0]["status"]["allocatable"]["cpu"] = "64"
    (row,) = doctor.check_node_size(unknown, "big", unknown.pools["big"], nodes)
    assert row.status == doctor.FAIL and "huge needs 90 CPUs" in row.detail and "never fits" in row.detail
    # a known VM size whose nodes offer less than the table says (e.g. Azure CNI Overlay's 250 pods per node)
    cfg = load_profiles(EXAMPLE_PROFILES)
    t4 = [ready(n) for n in build_nodes(cfg, {"gput4": 1})]
    t4[0]["status"]["allocatable"]["memory"] = str(int(allocatable(4, 28, max_pods=250)[1]))
    (row,) = doctor.check_node_size(cfg, "gput4", cfg.pools["gput4"], t4)
    assert row.status == doctor.FAIL and "the file assumes 3.86 CPUs / 24.8 GiB" in row.detail
    assert "only 3 fit" in row.detail and "pools.gput4.node" in row.fix


def test_a_mixed_mig_pool_that_would_scale_from_zero_is_warned_about():
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

    data = yaml.safe_load(open(EXAMPLE_PROFILES).read())
    assert data["pools"]["gpumig"]["min_nodes"] == 1  # the example follows the advice
    data["pools"]["gpumig"]["min_nodes"] = 0
    (w,) = fit_warnings(parse_profiles_text(yaml.safe_dump(data)))
    assert w.startswith("pools.gpumig: a mixed-strategy MIG pool with min_nodes 0") and "min_nodes: 1" in w
    assert fit_warnings(load_profiles(EXAMPLE_PROFILES)) == []
