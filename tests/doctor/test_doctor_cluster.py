"""`gpuhub doctor FILE` against the real dev cluster: healthy, then broken one way at a time (each test
restores what it broke in the shared cluster, in a finally; "no Kueue" uses its own scratch cluster)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.builders.deploy import render_rbac
from jupyterhub_gpu.builders.kueue import render_kueue
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu_dev import cluster as dc

pytestmark = pytest.mark.cluster

GPU_POOLS = ("gput4", "gpumig", "gpuh100", "spota100", "gput4mps")


def doctor(kubeconfig: Path, profiles: Path | str = EXAMPLE_PROFILES, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    return subprocess.run([sys.executable, "-m", "jupyterhub_gpu.tools.cli", "doctor", str(profiles), *args],
                          capture_output=True, text=True, env=env, timeout=120)


def rows(out: str, symbol: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(symbol + " ")]


@pytest.fixture
def hub_rbac(cluster):
    """deploy/rbac.yaml's objects (rendered for the example) plus the hub namespace; removed after."""
    kube = cluster.kube()
    objs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "jhub"}}]
    objs += render_rbac(load_profiles(EXAMPLE_PROFILES))
    for obj in objs:
        kube.apply(obj)
    yield
    for obj in reversed(objs[1:]):
        kube.delete(obj)
    kube.close()


def test_healthy_dev_cluster(cluster, hub_rbac):
    r = doctor(cluster.kubeconfig)
    assert r.returncode == 0, r.stdout + r.stderr
    assert rows(r.stdout, "✗") == []
    simulated = rows(r.stdout, "~")
    # a device plugin row per GPU pool, and the MPS pool's MPS daemon row: no daemon without a real GPU
    assert all("simulated" in s for s in simulated)
    assert len([s for s in simulated if "device plugin" in s]) == len(GPU_POOLS)
    assert [s.split()[2] for s in simulated if "MPS daemon" in s] == ["gput4mps"]
    # the example's ml-research team has a workload identity; no Azure webhook on simulated nodes, said so
    assert len([s for s in simulated if "workload identity" in s.lower() and "webhook" in s]) == 1
    ok = "\n".join(rows(r.stdout, "✓"))
    for pool in GPU_POOLS:
        assert f"pool {pool}" in ok
    assert "MIG state" in ok and "LocalQueue team-ds/data-science" in ok and "rbac" in ok
    # the example's dataset: no Blob CSI driver without Azure, said so; its claims bound to the dev stand-in folder
    assert len([s for s in simulated if "CSI driver blob.csi.azure.com" in s]) == 1
    assert len([s for s in rows(r.stdout, "✓") if "gpuhub-dataset-imagenet-mini" in s and "local folder" in s]) == 2
    assert r.stdout.splitlines()[-1].endswith(f"0 ✗, {len(GPU_POOLS) + 3} ~ (simulated, see the row)")


def test_hub_service_account_without_roles(cluster):
    # servers still run in jhub (whose home-share claim the dev cluster has): only the account is wrong
    r = doctor(cluster.kubeconfig, EXAMPLE_PROFILES, "--hub-service-account", "nowhere/hub", "--hub-namespace", "jhub")
    assert r.returncode == 1 and "some checks failed" in r.stderr
    failed = rows(r.stdout, "✗")
    assert failed and all(" rbac " in f for f in failed)
    assert any("nodes cluster-wide" in f and "may not get, list, watch" in f for f in failed)
    assert "fix: kubectl apply -f deploy/rbac.yaml" in r.stdout


def test_missing_taint(cluster):
    node = "aks-gput4-00000001-vmss000001"
    before = cluster.core.read_node(node).spec.taints
    original = [{"key": t.key, "value": t.value, "effect": t.effect} for t in before]
    cluster.core.patch_node(node, {"spec": {"taints": None}})
    try:
        r = doctor(cluster.kubeconfig, EXAMPLE_PROFILES, "--no-rbac")
        assert r.returncode == 1
        failed = rows(r.stdout, "✗")
        assert len(failed) == 1 and "pool gput4" in failed[0] and "taints" in failed[0]
        assert f"{node} lacks sku=gpu:NoSchedule" in failed[0]
        assert "fix: kubectl taint nodes -l kubernetes.azure.com/agentpool=gput4 sku=gpu:NoSchedule" in r.stdout
    finally:
        cluster.core.patch_node(node, {"spec": {"taints": original}})
    assert doctor(cluster.kubeconfig, EXAMPLE_PROFILES, "--no-rbac").returncode == 0


def test_wrong_mig_layout_label_on_a_node(cluster):
    node = "aks-gpumig-00000001-vmss000000"
    cluster.core.patch_node(node, {"metadata": {"labels": {"nvidia.com/mig.config": "all-3g.40gb",
                                                           "nvidia.com/mig.config.state": "failed"}}})
    try:
        r = doctor(cluster.kubeconfig, EXAMPLE_PROFILES, "--no-rbac")
        assert r.returncode == 1
        failed = rows(r.stdout, "✗")
        assert [f.split()[3] for f in failed] == ["MIG", "MIG"]  # layout and state, nothing else
        assert "want nvidia.com/mig.config=all-1g.10gb" in failed[0] and f"{node}: all-3g.40gb" in failed[0]
        assert f"{node}: failed" in failed[1]
    finally:
        cluster.core.patch_node(node, {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.10gb",
                                                               "nvidia.com/mig.config.state": "success"}}})


def test_profiles_file_with_another_mig_layout(cluster, tmp_path):
    """The file says 3g.40gb slices, the cluster is cut into 1g.10gb: labels, allocatable and Kueue differ."""
    data = yaml.safe_load(Path(EXAMPLE_PROFILES).read_text())
    data["pools"]["gpumig"]["sharing"]["layout"] = "all-3g.40gb"
    data["profiles"][2]["gpu"]["profile"] = "3g.40gb"
    f = tmp_path / "profiles.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    r = doctor(cluster.kubeconfig, f, "--no-rbac")
    assert r.returncode == 1
    failed = "\n".join(rows(r.stdout, "✗"))
    assert "MIG layout" in failed and "want nvidia.com/mig.config=all-3g.40gb" in failed
    assert "nvidia.com/mig-3g.40gb=0 (want 2)" in failed and "nvidia.com/mig-1g.10gb=7 (not expected)" in failed
    assert "ClusterQueue team-data-science" in failed
    assert "pool gput4" not in failed


def test_missing_local_queue(cluster):
    cfg = load_profiles(EXAMPLE_PROFILES)
    lq = next(o for o in render_kueue(cfg) if o["kind"] == "LocalQueue" and o["metadata"]["namespace"] == "team-mlr")
    kube = cluster.kube()
    kube.delete(lq)
    try:
        r = doctor(cluster.kubeconfig, EXAMPLE_PROFILES, "--no-rbac")
        assert r.returncode == 1
        failed = rows(r.stdout, "✗")
        assert len(failed) == 1 and "LocalQueue team-mlr/ml-research" in failed[0] and "missing" in failed[0]
        assert f"fix: gpuhub render kueue {EXAMPLE_PROFILES} | kubectl apply --server-side -f -" in r.stdout
    finally:
        kube.apply(lq)
        kube.close()


def test_profiles_file_whose_queues_do_not_exist(cluster, tmp_path):
    data = yaml.safe_load(Path(EXAMPLE_PROFILES).read_text())
    data["teams"]["vision"] = {"namespace": "team-vision", "quota": {"gput4": 2}}
    f = tmp_path / "profiles.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    r = doctor(cluster.kubeconfig, f, "--no-rbac")
    assert r.returncode == 1
    failed = rows(r.stdout, "✗")
    assert len(failed) == 4  # a new team needs its queues (its servers' in the hub namespace too) and its claim
    assert "ClusterQueue team-vision" in failed[0] and "LocalQueue team-vision/vision" in failed[1]
    assert "LocalQueue jhub/vision" in failed[2]
    assert "claim team-vision/gpuhub-home" in failed[3] and "gpuhub render storage" in r.stdout


def test_no_kueue(scratch_root):
    """A cluster of its own whose Kueue CRDs were deleted."""
    c = dc.up(EXAMPLE_PROFILES, {"gput4": 1}, root=scratch_root)
    kube = c.kube()
    crds = kube.list("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    for crd in crds:
        if crd["spec"]["group"] == "kueue.x-k8s.io":
            kube.delete({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                         "metadata": {"name": crd["metadata"]["name"]}})
    kube.close()
    r = doctor(c.kubeconfig, EXAMPLE_PROFILES, "--hub-service-account", "self")
    assert r.returncode == 1
    failed = rows(r.stdout, "✗")
    kueue = [f for f in failed if " kueue " in f]
    assert len(kueue) == 1 and "Kueue is not installed: missing CRDs" in kueue[0]
    assert "install Kueue v0.19" in r.stdout
    # the pools it has are fine; the pools it lacks cannot scale from zero only where the file says so
    assert not [f for f in failed if "pool gput4" in f]
    assert any("pool system" in f and "min_nodes is 1" in f for f in failed)
    assert not [f for f in failed if " rbac " in f]  # the admin's own identity may do everything


def test_home_share_claim_not_labelled(cluster):
    """The dev cluster's home share passes; a team claim without the home-share label is a ✗ with its fix."""
    r = doctor(cluster.kubeconfig, EXAMPLE_PROFILES, "--no-rbac")
    storage = [line for line in r.stdout.splitlines() if " storage " in line]
    assert len(storage) == 4 and all(line.startswith("✓") for line in storage), r.stdout  # jhub, 2 teams, one share
    cluster.core.patch_namespaced_persistent_volume_claim("gpuhub-home", "team-ds",
                                                          {"metadata": {"labels": {"gpuhub.io/home-share": None}}})
    try:
        r = doctor(cluster.kubeconfig, EXAMPLE_PROFILES, "--no-rbac")
        assert r.returncode == 1
        (failed,) = rows(r.stdout, "✗")
        assert "claim team-ds/gpuhub-home" in failed and "not labelled gpuhub.io/home-share=true" in failed
        assert "kubectl -n team-ds label pvc gpuhub-home gpuhub.io/home-share=true" in r.stdout
    finally:
        cluster.core.patch_namespaced_persistent_volume_claim(
            "gpuhub-home", "team-ds", {"metadata": {"labels": {"gpuhub.io/home-share": "true"}}})
