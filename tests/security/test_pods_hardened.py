"""Job pods are locked down (Pod Security `restricted` and more), team namespaces enforce it, job pods get
no ingress and no route to the cloud metadata endpoints, and `gpu-jobs` has its own, minimal account.

Pure tests read the rendered manifests; the cluster tests (tests/security/test_pods_hardened_cluster.py)
show the real API server refusing a pod that breaks `restricted` and admitting the product's own.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gpu_spawner.builders import deploy
from gpu_spawner.builders.hardening import JOB_GID, JOB_UID, MAX_EPHEMERAL_STORAGE, harden
from gpu_spawner.builders.jobs import JobSettings, build_job
from gpu_spawner.builders.kueue import render_kueue
from gpu_spawner.model.profiles import load_profiles
from gpu_spawner.model.profiles_file import EXAMPLE_PROFILES

ROOT = Path(__file__).resolve().parents[2]
NB = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}


@pytest.fixture(scope="module")
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def job_pod(cfg, slug="t4-shared", settings=JobSettings()):
    objs = build_job(cfg, cfg.by_slug[slug], "alice", ["data-science", "ml-research"], "work/a.ipynb", NB,
                     settings=settings)
    (job,) = [o for o in objs if o["kind"] == "Job"]
    return job["spec"]["template"]["spec"]


@pytest.mark.parametrize("slug", ["t4-shared", "a100-mig-1g10gb", "h100-full", "a100-spot"])
def test_job_pod_is_restricted_non_root_without_token(cfg, slug):
    spec = job_pod(cfg, slug)
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": JOB_UID, "runAsGroup": JOB_GID,
                                       "fsGroup": JOB_GID, "seccompProfile": {"type": "RuntimeDefault"}}
    assert (JOB_UID, JOB_GID) == (1000, 100)  # z2jh's jovyan / users, as the user's own server
    for c in spec["containers"] + spec.get("initContainers", []):
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
        assert sc.get("privileged") is not True and sc.get("runAsUser", JOB_UID) != 0
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    # restricted allows only these volume types (no hostPath in any pod spec)
    allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
               "secret"}
    for vol in spec["volumes"]:
        assert set(vol) - {"name"} <= allowed, vol


def test_job_pod_has_a_bounded_scratch_disk(cfg):
    (c,) = job_pod(cfg)["containers"]
    assert c["resources"]["requests"]["ephemeral-storage"] == c["resources"]["limits"]["ephemeral-storage"] == "20Gi"
    (c,) = job_pod(cfg, settings=JobSettings(ephemeral_storage="5Gi"))["containers"]
    assert c["resources"]["limits"]["ephemeral-storage"] == "5Gi"


def test_ephemeral_storage_is_a_service_setting_with_bounds():
    from gpu_spawner.services.jobs.options import GPUJobs

    assert GPUJobs.ephemeral_storage.help and GPUJobs.class_traits()["ephemeral_storage"].metadata.get("config")
    app = GPUJobs()
    app.initialize(["--ephemeral-storage=8Gi"])
    assert app.job_settings().ephemeral_storage == "8Gi"
    for bad in ("lots", "0", "-1Gi", "101Gi"):
        app = GPUJobs()
        app.initialize([f"--ephemeral-storage={bad}"])
        with pytest.raises(SystemExit, match="ephemeral-storage"):
            app.job_settings()


def test_harden_keeps_what_the_spec_has():
    spec = {"containers": [{"name": "x", "resources": {"limits": {"cpu": "1"}}, "securityContext": {"readOnlyRootFilesystem": True}}],
            "securityContext": {"supplementalGroups": [5]}}
    out = harden(spec, "1Gi")
    (c,) = out["containers"]
    assert c["resources"] == {"limits": {"cpu": "1", "ephemeral-storage": "1Gi"}, "requests": {"ephemeral-storage": "1Gi"}}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True and c["securityContext"]["runAsNonRoot"] is True
    assert out["securityContext"]["supplementalGroups"] == [5] and out["securityContext"]["runAsUser"] == JOB_UID
    with pytest.raises(ValueError, match=MAX_EPHEMERAL_STORAGE):
        harden(spec, "1Ti")


def test_runner_image_runs_as_the_job_uid():
    text = (ROOT / "images" / "runner" / "Dockerfile").read_text()
    assert re.search(rf"^ARG RUN_UID={JOB_UID}$", text, re.M) and re.search(r"^USER \$\{RUN_UID\}$", text, re.M)


def test_team_namespaces_enforce_restricted(cfg):
    namespaces = {o["metadata"]["name"]: o for o in render_kueue(cfg) if o["kind"] == "Namespace"}
    assert set(namespaces) == {t.namespace for t in cfg.teams.values()}
    for ns in namespaces.values():
        labels = ns["metadata"]["labels"]
        for mode in ("enforce", "warn", "audit"):
            assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"


def test_kueue_quota_covers_the_scratch_disk_so_gpus_decide(cfg):
    """Kueue refuses a workload that asks for a resource its ClusterQueue does not cover: every flavor
    covers ephemeral-storage with the most a Job may ask for per GPU slot."""
    from kubernetes.utils.quantity import parse_quantity

    for cq in (o for o in render_kueue(cfg) if o["kind"] == "ClusterQueue"):
        (group,) = cq["spec"]["resourceGroups"]
        assert "ephemeral-storage" in group["coveredResources"]
        for flavor in group["flavors"]:
            res = {r["name"]: r for r in flavor["resources"]}
            slots = max(int(r["nominalQuota"]) for n, r in res.items() if n.startswith("nvidia.com/"))
            assert parse_quantity(res["ephemeral-storage"]["nominalQuota"]) == slots * parse_quantity(MAX_EPHEMERAL_STORAGE)
