"""`gpuhub doctor`'s pure checks: a healthy snapshot built from the same pure builders the dev cluster
uses (nodes from jupyterhub_gpu_dev.nodes, Kueue objects from render_kueue), then one thing broken at a time."""
from __future__ import annotations

import copy

import pytest
import yaml

from jupyterhub_gpu.builders.kueue import render_kueue
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.tools import doctor
from jupyterhub_gpu.tools.doctor import FAIL, OK, SIMULATED, Snapshot, access_requests, run_checks
from jupyterhub_gpu_dev.nodes import build_nodes

HUB_NS = "jhub"


@pytest.fixture(scope="module")
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def real_nodes(cfg):
    """Nodes as a real cluster has them: no simulated label (so the device plugin is checked)."""
    nodes = build_nodes(cfg, 2)
    for n in nodes:
        n["metadata"]["labels"].pop("gpuhub.io/simulated")
    return nodes


def healthy(cfg, simulated=False) -> Snapshot:
    nodes = build_nodes(cfg, 2) if simulated else real_nodes(cfg)
    kueue = {}
    for obj in render_kueue(cfg):
        if obj["kind"] in doctor.KUEUE_KINDS:
            obj = copy.deepcopy(obj)
            if obj["kind"].endswith("Queue"):
                obj["status"] = {"conditions": [{"type": "Active", "status": "True", "reason": "Ready"}]}
            kueue.setdefault(obj["kind"], []).append(obj)
    crds = {f"{p}.kueue.x-k8s.io": {"spec": {"versions": [{"name": "v1beta2", "served": True}]}}
            for p in doctor.KUEUE_CRDS}
    ds = [{"metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator"}}]
    pods = [{"metadata": {"name": f"nvidia-device-plugin-{i}"}, "spec": {"nodeName": n["metadata"]["name"]},
             "status": {"phase": "Running", "containerStatuses": [{"ready": True}]}}
            for i, n in enumerate(nodes) if "nvidia.com/gpu.present" in n["metadata"]["labels"]]
    # the device plugin's MPS control daemon, on the nodes GFD labels MPS-capable (the example's MPS pool)
    pods += [{"metadata": {"name": f"nvidia-device-plugin-mps-control-daemon-{i}"},
              "spec": {"nodeName": n["metadata"]["name"]},
              "status": {"phase": "Running", "containerStatuses": [{"ready": True}]}}
             for i, n in enumerate(nodes) if n["metadata"]["labels"].get("nvidia.com/mps.capable") == "true"]
    access = {req: True for req in access_requests(cfg, HUB_NS)}
    return Snapshot(nodes=nodes, daemonsets=ds, device_plugin_pods=pods, crds=crds, kueue=kueue, access=access)


def failed(checks):
    return [c for c in checks if c.status == FAIL]


def row(checks, section, name):
    return next(c for c in checks if c.section == section and c.name == name)


def test_healthy_real_cluster_all_ok(cfg):
    checks = run_checks(cfg, healthy(cfg), "p.yaml", HUB_NS)
    assert failed(checks) == [] and doctor.exit_code(checks) == 0
    assert all(c.status == OK for c in checks)
    names = {(c.section, c.name) for c in checks}
    assert ("pool gpumig", "MIG state") in names and ("pool gput4", "device plugin") in names
    assert ("kueue", "LocalQueue team-ds/data-science") in names and ("rbac", "nodes cluster-wide") in names


def test_simulated_nodes_say_so_and_do_not_fail(cfg):
    snap = healthy(cfg, simulated=True)
    snap.daemonsets, snap.device_plugin_pods = [], []
    checks = run_checks(cfg, snap, "p.yaml", HUB_NS)
    sim = [c for c in checks if c.status == SIMULATED]
    assert {c.section for c in sim} == {f"pool {p}" for p, pool in cfg.pools.items() if pool.is_gpu}
    assert {(c.section, c.name) for c in sim} == {(f"pool {p}", "device plugin") for p, pool in cfg.pools.items()
                                                  if pool.is_gpu} | {("pool gput4mps", "MPS daemon")}
    assert all("simulated" in c.detail for c in sim)
    assert doctor.exit_code(checks) == 0
    assert "~ (simulated" in doctor.format_table(checks)


def test_no_device_plugin_on_real_nodes(cfg):
    snap = healthy(cfg)
    snap.daemonsets, snap.device_plugin_pods = [], []
    c = row(run_checks(cfg, snap), "pool gput4", "device plugin")
    assert c.status == FAIL and "no DaemonSet" in c.detail and "GPU operator" in c.fix


def test_device_plugin_missing_on_one_node(cfg):
    snap = healthy(cfg)
    snap.device_plugin_pods = [p for p in snap.device_plugin_pods
                               if p["spec"]["nodeName"] != "aks-gpuh100-00000001-vmss000001"]
    c = row(run_checks(cfg, snap), "pool gpuh100", "device plugin")
    assert c.status == FAIL and "aks-gpuh100-00000001-vmss000001" in c.detail


def test_missing_taint(cfg):
    snap = healthy(cfg)
    node = next(n for n in snap.nodes if n["metadata"]["name"] == "aks-gput4-00000001-vmss000000")
    node["spec"]["taints"] = []
    checks = run_checks(cfg, snap)
    c = row(checks, "pool gput4", "taints")
    assert c.status == FAIL and "lacks sku=gpu:NoSchedule" in c.detail and "CPU pod" in c.detail
    assert "kubectl taint nodes -l kubernetes.azure.com/agentpool=gput4 sku=gpu:NoSchedule" in c.fix
    assert doctor.exit_code(checks) == 1


def test_extra_taint_the_profiles_do_not_tolerate(cfg):
    snap = healthy(cfg)
    snap.nodes[-1]["spec"].setdefault("taints", []).append({"key": "team", "value": "x", "effect": "NoSchedule"})
    pool = snap.nodes[-1]["metadata"]["labels"]["kubernetes.azure.com/agentpool"]
    c = row(run_checks(cfg, snap), f"pool {pool}", "taints")
    assert c.status == FAIL and "team=x:NoSchedule" in c.detail and "Pending" in c.detail


def test_transient_taints_are_ignored(cfg):
    snap = healthy(cfg)
    snap.nodes[0]["spec"].setdefault("taints", []).append(
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
    assert failed(run_checks(cfg, snap)) == []


def test_wrong_mig_layout(cfg):
    snap = healthy(cfg)
    for n in snap.nodes:
        labels = n["metadata"]["labels"]
        if labels["kubernetes.azure.com/agentpool"] == "gpumig":
            labels["nvidia.com/mig.config"] = "all-3g.40gb"
            labels.pop("nvidia.com/mig-1g.10gb.count")
            labels["nvidia.com/mig-3g.40gb.count"] = "2"
            alloc = n["status"]["allocatable"]
            alloc.pop("nvidia.com/mig-1g.10gb")
            alloc["nvidia.com/mig-3g.40gb"] = "2"
    checks = run_checks(cfg, snap)
    layout = row(checks, "pool gpumig", "MIG layout")
    assert layout.status == FAIL and "want nvidia.com/mig.config=all-1g.10gb" in layout.detail
    assert "all-3g.40gb" in layout.detail and "mig.config=all-1g.10gb --overwrite" in layout.fix
    alloc = row(checks, "pool gpumig", "allocatable")
    assert alloc.status == FAIL and "nvidia.com/mig-1g.10gb=0 (want 7)" in alloc.detail
    assert "nvidia.com/mig-3g.40gb=2 (not expected)" in alloc.detail
    assert row(checks, "pool gpumig", "labels").status == FAIL


@pytest.mark.parametrize("state", ["pending", "failed", None])
def test_mig_state_not_success(cfg, state):
    snap = healthy(cfg)
    n = next(n for n in snap.nodes if n["metadata"]["labels"]["kubernetes.azure.com/agentpool"] == "gpumig")
    if state:
        n["metadata"]["labels"]["nvidia.com/mig.config.state"] = state
    else:
        del n["metadata"]["labels"]["nvidia.com/mig.config.state"]
    c = row(run_checks(cfg, snap), "pool gpumig", "MIG state")
    assert c.status == FAIL and (state or "<missing>") in c.detail


def test_time_slicing_replicas_wrong(cfg):
    snap = healthy(cfg)
    for n in snap.nodes:
        if n["metadata"]["labels"]["kubernetes.azure.com/agentpool"] == "gput4":
            n["status"]["allocatable"]["nvidia.com/gpu"] = "1"
            n["metadata"]["labels"]["nvidia.com/gpu.replicas"] = "1"
    checks = run_checks(cfg, snap)
    assert "nvidia.com/gpu=1 (want 4)" in row(checks, "pool gput4", "allocatable").detail
    assert "nvidia.com/gpu.replicas=1 (want 4)" in row(checks, "pool gput4", "labels").detail


def test_pool_without_nodes_scales_from_zero_or_not(cfg):
    snap = healthy(cfg)
    snap.nodes = [n for n in snap.nodes if n["metadata"]["labels"]["kubernetes.azure.com/agentpool"] != "gpuh100"]
    checks = run_checks(cfg, snap)
    c = row(checks, "pool gpuh100", "nodes")
    assert c.status == OK and "scales from zero" in c.detail
    assert not [x for x in checks if x.section == "pool gpuh100" and x.name != "nodes"]
    data = yaml.safe_load(open(EXAMPLE_PROFILES))
    data["pools"]["gpuh100"].pop("max_nodes")
    from jupyterhub_gpu.model.validation import parse_profiles_text
    no_max = parse_profiles_text(yaml.safe_dump(data, sort_keys=False))
    c = row(run_checks(no_max, snap), "pool gpuh100", "nodes")
    assert c.status == FAIL and "max_nodes" in c.detail
    snap.nodes = [n for n in snap.nodes if n["metadata"]["labels"]["kubernetes.azure.com/agentpool"] != "system"]
    c = row(run_checks(cfg, snap), "pool system", "nodes")
    assert c.status == FAIL and "min_nodes is 1" in c.detail


def test_no_kueue(cfg):
    snap = healthy(cfg)
    snap.crds, snap.kueue = {}, None
    checks = run_checks(cfg, snap, "p.yaml")
    kueue = [c for c in checks if c.section == "kueue"]
    assert len(kueue) == 1 and kueue[0].status == FAIL and "Kueue is not installed" in kueue[0].detail
    assert "kueue" in kueue[0].fix and "gpuhub render kueue p.yaml" in kueue[0].fix


def test_kueue_without_v1beta2(cfg):
    snap = healthy(cfg)
    for crd in snap.crds.values():
        crd["spec"]["versions"] = [{"name": "v1beta1", "served": True}]
    c = row(run_checks(cfg, snap), "kueue", "CRDs")
    assert c.status == FAIL and "v1beta2 not served" in c.detail


def test_missing_local_queue(cfg):
    snap = healthy(cfg)
    snap.kueue["LocalQueue"] = [q for q in snap.kueue["LocalQueue"] if q["metadata"]["name"] != "ml-research"]
    checks = run_checks(cfg, snap, "p.yaml")
    c = row(checks, "kueue", "LocalQueue team-mlr/ml-research")
    assert c.status == FAIL and c.detail == "missing" and c.fix.startswith("gpuhub render kueue p.yaml")
    assert doctor.exit_code(checks) == 1


def test_kueue_applied_before_the_server_priority_classes(cfg):
    """Server pods name `gpuhub-server-<priority>`: a Kueue set up by an older `render kueue` lacks them."""
    snap = healthy(cfg)
    snap.kueue["WorkloadPriorityClass"] = [c for c in snap.kueue["WorkloadPriorityClass"]
                                           if not c["metadata"]["name"].startswith("gpuhub-server-")]
    checks = run_checks(cfg, snap, "p.yaml")
    assert {c.name for c in failed(checks)} == {f"WorkloadPriorityClass gpuhub-server-{p}" for p in cfg.priorities}
    assert all(c.detail == "missing" and c.fix.startswith("gpuhub render kueue p.yaml") for c in failed(checks))


def test_kueue_applied_before_a_profile_became_preemptible(cfg):
    """A preemptible profile's servers name `gpuhub-preemptible-<priority>`: doctor asks for `render kueue` again."""
    data = cfg.model_dump(exclude_unset=True)
    next(p for p in data["profiles"] if p["slug"] == "t4-shared")["preemptible"] = True
    preemptible = type(cfg).model_validate(data)
    snap = healthy(preemptible)
    assert not failed(run_checks(preemptible, snap, "p.yaml"))
    snap.kueue["WorkloadPriorityClass"] = [c for c in snap.kueue["WorkloadPriorityClass"]
                                           if not c["metadata"]["name"].startswith("gpuhub-preemptible-")]
    checks = run_checks(preemptible, snap, "p.yaml")
    assert {c.name for c in failed(checks)} == {f"WorkloadPriorityClass gpuhub-preemptible-{p}"
                                                for p in cfg.priorities}
    assert all(c.detail == "missing" and c.fix.startswith("gpuhub render kueue p.yaml") for c in failed(checks))


def test_cluster_queue_quota_differs(cfg):
    snap = healthy(cfg)
    cq = next(q for q in snap.kueue["ClusterQueue"] if q["metadata"]["name"] == "team-data-science")
    res = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    gpu = next(r for r in res if r["name"] == "nvidia.com/gpu")
    gpu["nominalQuota"] = 99
    c = row(run_checks(cfg, snap), "kueue", "ClusterQueue team-data-science")
    assert c.status == FAIL and "resourceGroups" in c.detail


def test_quantities_compare_by_value_and_defaults_are_ignored(cfg):
    snap = healthy(cfg)
    for cq in snap.kueue["ClusterQueue"]:
        cq["spec"]["flavorFungibility"] = {"whenCanBorrow": "MayStopSearch"}  # a default Kueue adds
        for f in cq["spec"]["resourceGroups"][0]["flavors"]:
            for r in f["resources"]:
                if isinstance(r["nominalQuota"], int):
                    r["nominalQuota"] = str(r["nominalQuota"])
    assert failed(run_checks(cfg, snap)) == []


def test_inactive_queue(cfg):
    snap = healthy(cfg)
    snap.kueue["ClusterQueue"][0]["status"] = {"conditions": [
        {"type": "Active", "status": "False", "reason": "FlavorNotFound", "message": "Can't admit new workloads"}]}
    c = row(run_checks(cfg, snap), "kueue", "ClusterQueue team-data-science")
    assert c.status == FAIL and "FlavorNotFound" in c.detail


def test_rbac_denied_verbs_are_named(cfg):
    snap = healthy(cfg)
    snap.identity = "service account jhub/hub"
    snap.access[("watch", "", "nodes", None)] = False
    snap.access[("create", "batch", "jobs", "team-ds")] = False
    checks = run_checks(cfg, snap, hub_namespace=HUB_NS)
    nodes = row(checks, "rbac", "nodes cluster-wide")
    assert nodes.status == FAIL and "may not watch" in nodes.detail and "deploy/rbac.yaml" in nodes.fix
    assert "may not create" in row(checks, "rbac", "batch/jobs namespace team-ds").detail
    assert not [c for c in run_checks(cfg, snap) if c.section == "rbac"]  # no hub namespace: not checked


def test_unreadable_parts_fail_with_a_reason(cfg):
    snap = Snapshot(errors={"nodes": "HTTP 403: forbidden", "crds": "HTTP 403: no"})
    checks = run_checks(cfg, snap)
    assert [c.status for c in checks] == [FAIL, FAIL]
    assert "403" in checks[0].detail and "403" in checks[1].detail


def test_table_has_symbols_fixes_and_summary(cfg):
    snap = healthy(cfg)
    snap.nodes[2]["spec"]["taints"] = []
    table = doctor.format_table(run_checks(cfg, snap))
    lines = table.splitlines()
    assert any(line.startswith("✗ pool gput4") for line in lines)
    assert any(line.lstrip().startswith("fix: kubectl taint") for line in lines)
    assert lines[-1].endswith("1 ✗") and lines[0].startswith("✓ ")


def _doctor(*args, env=None):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "jupyterhub_gpu.tools.cli", "doctor", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=120)


def test_cli_missing_kubeconfig_or_bad_file_is_exit_2(tmp_path):
    r = _doctor(EXAMPLE_PROFILES, "--kubeconfig", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "does not exist" in r.stderr and r.stdout == ""
    r = _doctor(EXAMPLE_PROFILES, env={"KUBECONFIG": str(tmp_path / "nope.yaml")})
    assert r.returncode == 2 and "does not exist" in r.stderr and r.stdout == ""
    bad = tmp_path / "profiles.yaml"
    bad.write_text("pools: {}\n")
    r = _doctor(str(bad), "--kubeconfig", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "profiles" in r.stderr and r.stdout == ""
    r = _doctor(EXAMPLE_PROFILES, "--hub-service-account", "hub")
    assert r.returncode == 2 and "NAMESPACE/NAME" in r.stderr


def test_cli_unreachable_cluster_is_an_error_on_stderr(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kc = tmp_path / "kubeconfig"
    kc.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": f"https://127.0.0.1:{port}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    r = _doctor(EXAMPLE_PROFILES, "--kubeconfig", str(kc))
    assert r.returncode == 1 and "cannot reach the cluster" in r.stderr and r.stdout == ""
