"""`gpuhub doctor` on an AKS-managed GPU pool: AKS's services are read from the node's label and Node Problem
Detector's conditions, never looked for as DaemonSet pods (tools/doctor_managed.py)."""
from __future__ import annotations

import pytest
import yaml
from test_doctor_checks import HUB_NS, failed, healthy, row

from jupyterhub_gpu.model.gpu_stack import DCGM_CONDITION, DEVICE_PLUGIN_CONDITION, MANAGED_GPU_LABEL
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import parse_profiles_text
from jupyterhub_gpu.tools import doctor
from jupyterhub_gpu.tools.doctor import FAIL, OK, SIMULATED, run_checks

SEC = "pool managed"


@pytest.fixture(scope="module")
def cfg():
    data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    data["pools"]["managed"] = {"node_selector": {"kubernetes.azure.com/agentpool": "managed"},
                                "taints": [{"key": "sku", "value": "gpu"}], "gpu": {"model": "H100-NVL-94GB"},
                                "instance_type": "Standard_NC40ads_H100_v5", "gpu_stack": "aks-managed",
                                "min_nodes": 2}
    return parse_profiles_text(yaml.safe_dump(data, sort_keys=False))


def managed_nodes(snap):
    return [n for n in snap.nodes if n["metadata"]["labels"].get("kubernetes.azure.com/agentpool") == "managed"]


def npd(snap, **status):
    """Give the managed nodes Node Problem Detector's two conditions ('True': unhealthy)."""
    for n in managed_nodes(snap):
        for kind in (DEVICE_PLUGIN_CONDITION, DCGM_CONDITION):
            sick = status.get(kind) == "True"
            reason = kind if sick else kind.replace("Unhealthy", "Healthy")  # as AKS's docs name them
            n["status"].setdefault("conditions", []).append(
                {"type": kind, "status": "True" if sick else "False", "reason": reason})
    return snap


def test_a_healthy_managed_pool_is_all_ok_without_any_daemonset_pod_of_its_own(cfg):
    snap = npd(healthy(cfg))
    assert len(managed_nodes(snap)) == 2
    assert not any(p["spec"]["nodeName"].startswith("aks-managed") for p in snap.device_plugin_pods)
    checks = run_checks(cfg, snap, "p.yaml", HUB_NS)
    assert failed(checks) == [] and doctor.exit_code(checks) == 0
    plugin, dcgm = row(checks, SEC, "device plugin"), row(checks, SEC, "DCGM exporter")
    assert plugin.status == dcgm.status == OK
    assert "AKS-managed device plugin on all 2 nodes" in plugin.detail and "port 19400" in dcgm.detail
    assert f"{DEVICE_PLUGIN_CONDITION}=False" in plugin.detail
    assert row(checks, SEC, "allocatable").detail == "nvidia.com/gpu: 1 per node"
    assert row(checks, "pool gput4", "device plugin").status == OK  # the operator's pools as before


def test_nodes_without_npd_conditions_pass_on_the_label_and_say_so(cfg):
    checks = run_checks(cfg, healthy(cfg), "p.yaml", HUB_NS)
    plugin = row(checks, SEC, "device plugin")
    assert plugin.status == OK and "2 of 2 nodes report no UnhealthyNvidiaDevicePlugin condition" in plugin.detail


def test_a_node_without_aks_label_was_not_given_the_managed_stack(cfg):
    snap = npd(healthy(cfg))
    gone = managed_nodes(snap)[1]
    del gone["metadata"]["labels"][MANAGED_GPU_LABEL]
    checks = run_checks(cfg, snap, "p.yaml", HUB_NS)
    for name in ("device plugin", "DCGM exporter"):
        c = row(checks, SEC, name)
        assert c.status == FAIL and gone["metadata"]["name"] in c.detail and "--enable-managed-gpu=true" in c.fix
    assert doctor.exit_code(checks) == 1


def test_an_unhealthy_device_plugin_condition_fails_its_row_only(cfg):
    snap = npd(healthy(cfg), **{DEVICE_PLUGIN_CONDITION: "True"})
    checks = run_checks(cfg, snap, "p.yaml", HUB_NS)
    plugin = row(checks, SEC, "device plugin")
    assert plugin.status == FAIL and "UnhealthyNvidiaDevicePlugin=True" in plugin.detail
    assert "UnhealthyNvidiaDevicePlugin)" in plugin.detail and "journal" in plugin.fix  # its reason, a fix
    assert row(checks, SEC, "DCGM exporter").status == OK


def test_an_unhealthy_dcgm_condition_says_what_goes_missing(cfg):
    snap = npd(healthy(cfg), **{DCGM_CONDITION: "True"})
    c = row(run_checks(cfg, snap, "p.yaml", HUB_NS), SEC, "DCGM exporter")
    assert c.status == FAIL and "culler" in c.fix and "showback" in c.fix


def test_no_gpu_operator_at_all_fails_only_the_operator_pools(cfg):
    snap = npd(healthy(cfg))
    snap.daemonsets, snap.device_plugin_pods = [], []
    checks = run_checks(cfg, snap, "p.yaml", HUB_NS)
    assert row(checks, SEC, "device plugin").status == OK
    assert row(checks, "pool gput4", "device plugin").status == FAIL


def test_simulated_managed_nodes_say_so(cfg):
    snap = healthy(cfg, simulated=True)
    checks = run_checks(cfg, snap, "p.yaml", HUB_NS)
    for name in ("device plugin", "DCGM exporter"):
        c = row(checks, SEC, name)
        assert c.status == SIMULATED and "systemd service" in c.detail
    assert doctor.exit_code(checks) == 0
