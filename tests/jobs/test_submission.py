"""Submission checks (pure): every refusal happens before anything is created, with a clear reason."""
from __future__ import annotations

import pytest

from gpu_spawner.builders.jobs import MAX_SNAPSHOT_BYTES, JobRequestError
from gpu_spawner.services.jobs.submission import ServiceSettings, plan_submission

from .conftest import NB

ALICE = ["data-science"]


def body(**kw):
    return {"profile": "a100-mig-1g10gb", "notebook_path": "work/nb.ipynb", "notebook": NB, **kw}


def test_plan_builds_pvc_job_configmap(cfg):
    pvc, job, cm = plan_submission(cfg, "alice", ALICE, body(parameters={"epochs": 3}, priority="high",
                                                             timeout="2h"), 0)
    assert (pvc["kind"], job["kind"], cm["kind"]) == ("PersistentVolumeClaim", "Job", "ConfigMap")
    assert job["spec"]["suspend"] is True and job["spec"]["activeDeadlineSeconds"] == 7200
    assert job["metadata"]["namespace"] == "team-ds"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert "gpuhub.io/dev-agent" not in job["spec"]["template"]["metadata"]["labels"]


def test_dev_mode_labels_pods_for_the_agent_and_prebinds_the_claim(cfg):
    pv, pvc, job, cm = plan_submission(cfg, "alice", ALICE, body(), 0, ServiceSettings(dev=True, dev_homes="/h"))
    assert pv["kind"] == "PersistentVolume" and pv["spec"]["claimRef"]["name"] == pvc["metadata"]["name"]
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert job["spec"]["template"]["metadata"]["labels"]["gpuhub.io/dev-agent"] == "run"


@pytest.mark.parametrize("user,groups,kw,needle", [
    ("alice", ALICE, {"profile": "h100-full"}, "not available to alice"),
    ("alice", ALICE, {"profile": "no-such"}, "no profile 'no-such'"),
    ("alice", ALICE, {"profile": "cpu"}, "has no GPU"),
    ("alice", ALICE, {"gpus": 4}, "gives 1 GPU(s) per job"),
    ("alice", ALICE, {"timeout": "30d"}, "out of bounds"),
    ("alice", ALICE, {"timeout": "soon"}, "not a duration"),
    ("alice", ALICE, {"parameters": {"bad-name": 1}}, "not Python identifiers"),
    ("alice", ALICE, {"parameters": {"__class__": 1}}, "not Python identifiers"),
    ("alice", ALICE, {"priority": "urgent"}, "does not exist"),
    ("alice", ALICE, {"notebook_path": "x.py"}, "ends in .ipynb"[:0] or ".ipynb"),
    ("alice", ALICE, {"extra": 1}, "unknown field"),
])
def test_refusals(cfg, user, groups, kw, needle):
    with pytest.raises(JobRequestError, match=None) as e:
        plan_submission(cfg, user, groups, body(**kw), 0)
    assert needle in str(e.value)


def test_max_per_user_counts_active_jobs(cfg):
    plan_submission(cfg, "alice", ALICE, body(), 1)
    with pytest.raises(JobRequestError, match="the limit is 2 per user"):
        plan_submission(cfg, "alice", ALICE, body(), 2)


def test_oversize_notebook_names_the_limit(cfg):
    import os
    big = {**NB, "cells": [{"cell_type": "code", "id": "x", "metadata": {}, "outputs": [], "execution_count": None,
                            "source": os.urandom(MAX_SNAPSHOT_BYTES).hex()}]}
    with pytest.raises(JobRequestError, match=f"the limit is {MAX_SNAPSHOT_BYTES // 1024} KiB"):
        plan_submission(cfg, "alice", ALICE, body(notebook=big), 0)


def test_hub_wiring_least_privilege(tmp_path, monkeypatch):
    from traitlets.config import Config

    from gpu_spawner.services.jobs.app import listen_address
    from gpu_spawner.services.jobs.hub import configure

    monkeypatch.delenv("GPUHUB_JOBS_SERVICE_URL", raising=False)
    c = Config()
    c.JupyterHub.services = [{"name": "other", "api_token": "x"}]
    c.GPUSpawner.environment = {"A": "1"}
    configure(c, "/p.yaml", port=10123)
    configure(c, "/p.yaml", port=10124)  # idempotent: replaces its own entries
    names = [s["name"] for s in c.JupyterHub.services]
    assert names == ["other", "gpu-jobs"] and c.JupyterHub.services[1]["url"] == "http://127.0.0.1:10124"
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert roles["gpu-jobs-service"]["scopes"] == ["read:users"]
    assert roles["user"]["scopes"] == ["self", "access:services!service=gpu-jobs"]
    assert "access:services!service=gpu-jobs" in c.Spawner.server_token_scopes
    assert c.GPUSpawner.environment["A"] == "1" and c.GPUSpawner.environment["GPUHUB_JOBS_URL"].endswith("/gpu-jobs/")
    assert listen_address("127.0.0.1") == "127.0.0.1" and listen_address("hub") == ""


def test_service_options_reach_the_job_builder_from_the_hub_config(monkeypatch):
    """An admin's `options=` in jupyterhub_config.py become the service's command line, and from there
    the Job builder's settings; a bad duration stops the service naming the option."""
    from traitlets.config import Config

    from gpu_spawner.services.jobs.hub import configure
    from gpu_spawner.services.jobs.options import GPUJobs

    for var in ("GPUHUB_RUNNER_IMAGE", "GPUHUB_JOBS_STORAGE_CLASS", "GPUHUB_JOBS_DEV"):
        monkeypatch.delenv(var, raising=False)
    c = Config()
    configure(c, "/p.yaml", options={"storage-class": "azurefile-csi-retain", "max-timeout": "3d",
                                     "termination-grace": "15m", "runner-image": "reg.example/runner:1"})
    command = c.JupyterHub.services[0]["command"]
    assert command[1:3] == ["-m", "gpu_spawner.services.jobs"]
    app = GPUJobs()
    app.initialize(command[3:])
    s = app.job_settings()
    assert (s.storage_class, s.max_timeout, s.termination_grace_seconds, s.runner_image) == \
        ("azurefile-csi-retain", 3 * 86400, 900, "reg.example/runner:1")
    assert app.profiles_file == "/p.yaml" and not app.dev
    defaults = GPUJobs()
    defaults.initialize([])
    d = defaults.job_settings()
    assert (d.storage_class, d.default_timeout, d.max_timeout, d.termination_grace_seconds) == \
        (None, 2 * 3600, 7 * 86400, 600)
    monkeypatch.setenv("GPUHUB_JOBS_STORAGE_CLASS", "from-env")  # deploy/values.yaml sets it this way
    from_env = GPUJobs()
    from_env.initialize(["--dev"])
    assert from_env.job_settings().storage_class == "from-env" and from_env.dev
    bad = GPUJobs()
    bad.initialize(["--max-timeout=forever"])
    with pytest.raises(SystemExit, match="--max-timeout='forever'"):
        bad.job_settings()
