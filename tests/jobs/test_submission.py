"""Submission checks (pure): every refusal happens before anything is created, with a clear reason."""
from __future__ import annotations

import pytest

from jupyterhub_gpu.builders.jobs import MAX_SNAPSHOT_BYTES, JobRequestError
from jupyterhub_gpu.services.jobs.submission import ServiceSettings, plan_submission

from .conftest import NB

ALICE = ["data-science"]


def body(**kw):
    return {"profile": "a100-mig-1g10gb", "notebook_path": "work/nb.ipynb", "notebook": NB, **kw}


def test_plan_builds_job_and_configmap_and_creates_no_claim(cfg):
    job, cm = plan_submission(cfg, "alice", ALICE, body(parameters={"epochs": 3}, priority="high", timeout="2h"), 0)
    assert (job["kind"], cm["kind"]) == ("Job", "ConfigMap")
    assert job["spec"]["suspend"] is True and job["spec"]["activeDeadlineSeconds"] == 7200
    assert job["metadata"]["namespace"] == "team-ds"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert "gpuhub.io/dev-agent" not in job["spec"]["template"]["metadata"]["labels"]


def test_the_job_mounts_the_users_home_folder_of_the_team_share_and_runs_in_the_notebooks_folder(cfg):
    from jupyterhub_gpu.builders.jobs import JobSettings
    from jupyterhub_gpu.builders.storage import HomeStorage

    settings = ServiceSettings(job=JobSettings(home=HomeStorage(claim="homes", mount_path="/home/jovyan"),
                                               pod_labels={"cost-centre": "ds"}))
    job, _ = plan_submission(cfg, "Alice Smith", ALICE, body(notebook_path="work/exp 1/nb.ipynb"), 0, settings,
                             name="gpu-alice-nb-1")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    home = next(v for v in pod["volumes"] if v["name"] == "home")
    mount = next(m for m in container["volumeMounts"] if m["name"] == "home")
    assert home == {"name": "home", "persistentVolumeClaim": {"claimName": "homes"}}
    # KubeSpawner's "safe" slug of the name: the folder the user's server mounts (tests/unit/test_storage.py)
    assert mount == {"name": "home", "mountPath": "/home/jovyan", "subPath": "alice-smith---8ae10dfc"}
    assert container["workingDir"] == "/home/jovyan/work/exp 1"
    assert env["OUTPUT_DIR"] == "/home/jovyan/gpu-jobs/gpu-alice-nb-1"
    assert env["CHECKPOINT_DIR"] == "/home/jovyan/gpu-jobs/gpu-alice-nb-1/checkpoint"
    assert env["HOME"] == "/home/jovyan"
    assert job["spec"]["template"]["metadata"]["labels"]["cost-centre"] == "ds"
    assert not any("hostPath" in v for v in pod["volumes"])


@pytest.mark.parametrize("path", ["/etc/x.ipynb", "../bob/x.ipynb", "work/../../bob/x.ipynb"])
def test_a_notebook_path_outside_home_is_refused(cfg, path):
    with pytest.raises(JobRequestError, match="relative to your home folder"):
        plan_submission(cfg, "alice", ALICE, body(notebook_path=path), 0)


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


def test_service_options_reach_the_job_builder_from_the_hub_config(monkeypatch):
    """An admin's `options=` in jupyterhub_config.py become the service's command line, and from there
    the Job builder's settings; a bad duration stops the service naming the option."""
    from jupyterhub_gpu.services.jobs.hub import jobs_service
    from jupyterhub_gpu.services.jobs.options import GPUJobs

    monkeypatch.delenv("GPUHUB_RUNNER_IMAGE", raising=False)
    service, _ = jobs_service("/p.yaml", options={"home-claim": "users-share", "max-timeout": "3d",
                                                  "termination-grace": "15m", "runner-image": "reg.example/runner:1"})
    command = service["command"]
    assert command[1:3] == ["-m", "jupyterhub_gpu.services.jobs"]
    app = GPUJobs()
    app.initialize(command[3:])
    s = app.job_settings()
    assert (s.home.claim, s.max_timeout, s.termination_grace_seconds, s.runner_image) == \
        ("users-share", 3 * 86400, 900, "reg.example/runner:1")
    assert app.profiles_file == "/p.yaml"
    defaults = GPUJobs()
    defaults.initialize([])
    d = defaults.job_settings()
    assert (d.home.claim, d.home.subpath, d.default_timeout, d.max_timeout, d.termination_grace_seconds) == \
        ("gpuhub-home", "{username}", 2 * 3600, 7 * 86400, 600)
    assert defaults.log_source_class.__name__ == "PodLogs" and defaults.orphan_grace_seconds() == 120
    # the dev configuration plugs its own pieces in by import path (jupyterhub_gpu never imports devcluster)
    plugged = GPUJobs()
    plugged.initialize(["--GPUJobs.log_source_class=jupyterhub_gpu_dev.agent_logs.AgentLogs",
                        "--GPUJobs.pod_labels=gpuhub.io/dev-agent=run"])
    assert plugged.log_source_class.__module__ == "jupyterhub_gpu_dev.agent_logs"
    assert plugged.job_settings().pod_labels == {"gpuhub.io/dev-agent": "run"}
    bad = GPUJobs()
    bad.initialize(["--max-timeout=forever"])
    with pytest.raises(SystemExit, match="--max-timeout='forever'"):
        bad.job_settings()
