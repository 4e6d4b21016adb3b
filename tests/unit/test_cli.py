"""Every `gpuhub` verb through the installed console script: stdout for results, exit 2 + stderr for bad input."""
from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES

EXAMPLE = str(EXAMPLE_PROFILES)
BAD = """
pools:
  gpu: {node_selector: {a: b}, gpu: {model: A100-80GB}, sharing: {strategy: mig, layout: all-1g.11gb}}
profiles:
  - {slug: X, display_name: x}
"""


def gpuhub(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["gpuhub", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def bad_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(BAD)
    return str(p)


def test_validate_ok():
    r = gpuhub("validate", EXAMPLE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"ok: {EXAMPLE}: 6 pools (5 GPU), 6 profiles, 2 teams"


@pytest.mark.parametrize("verb", [["validate"], ["render", "kueue"], ["render", "terraform"],
                                  ["render", "pod", "--profile", "cpu", "--user", "a"]])
def test_bad_file_exit_2_all_errors_on_stderr_nothing_on_stdout(verb, bad_file):
    r = gpuhub(*verb[:2], bad_file, *verb[2:]) if len(verb) > 1 else gpuhub(verb[0], bad_file)
    assert r.returncode == 2
    assert r.stdout == ""
    assert "pools.gpu.taints: a GPU pool needs a NoSchedule taint" in r.stderr
    assert "pools.gpu.sharing.layout: 'all-1g.11gb' is not a MIG layout of A100-80GB" in r.stderr
    assert "profiles[0].slug: 'X' is not a valid name" in r.stderr


def test_missing_file_is_bad_input(tmp_path):
    r = gpuhub("validate", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and r.stdout == ""
    assert "cannot read profiles file" in r.stderr


def test_render_pod_json():
    r = gpuhub("render", "pod", EXAMPLE, "--profile", "h100-full", "--user", "ana", "--group", "ml-research")
    assert r.returncode == 0, r.stderr
    pod = json.loads(r.stdout)
    assert pod["kind"] == "Pod" and pod["metadata"]["name"] == "jupyter-ana"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["spec"]["nodeSelector"] == {"kubernetes.azure.com/agentpool": "gpuh100"}


@pytest.mark.parametrize("profile, groups, message", [
    ("h100-full", ["data-science"], "Profile 'h100-full' is not available to ana: it is for members of "
                                    "ml-research. Choose one of: "),
    ("nope", [], "There is no profile 'nope'. Choose one of: cpu"),
])
def test_render_pod_refused(profile, groups, message):
    group_args = [a for g in groups for a in ("--group", g)]
    r = gpuhub("render", "pod", EXAMPLE, "--profile", profile, "--user", "ana", *group_args)
    assert r.returncode == 2 and r.stdout == ""
    assert message in r.stderr


def test_render_kueue_yaml():
    r = gpuhub("render", "kueue", EXAMPLE)
    assert r.returncode == 0, r.stderr
    docs = list(yaml.safe_load_all(r.stdout))
    kinds = [d["kind"] for d in docs]
    assert kinds.count("ResourceFlavor") == 5 and kinds.count("ClusterQueue") == 2
    # each team's LocalQueue in its namespace (Jobs) and in the hub namespace (servers)
    assert kinds.count("LocalQueue") == 4 and kinds.count("WorkloadPriorityClass") == 6
    assert all(d["apiVersion"] == "kueue.x-k8s.io/v1beta2" for d in docs if d["kind"] in
               ("ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"))


def test_doctor_without_a_kubeconfig_is_bad_input(tmp_path):
    r = gpuhub("doctor", EXAMPLE, "--kubeconfig", str(tmp_path / "missing"))
    assert r.returncode == 2 and "does not exist" in r.stderr and r.stdout == ""


def test_usage_error_is_exit_2():
    r = gpuhub("render", "pod", EXAMPLE)  # missing --profile/--user
    assert r.returncode == 2 and "--profile" in r.stderr and r.stdout == ""


def test_render_pod_prints_the_namespace_the_hub_runs_it_in_beside_its_teams_localqueue():
    """Applied as printed, a queued profile's pod must land where its LocalQueue is, not in `default`."""
    r = gpuhub("render", "pod", EXAMPLE, "--profile", "a100-mig-1g10gb", "--user", "ana", "--group", "data-science",
               "--hub-namespace", "hub-prod")
    assert r.returncode == 0, r.stderr
    pod = json.loads(r.stdout)
    assert pod["metadata"]["namespace"] == "hub-prod"
    queue = pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    kueue = yaml.safe_load_all(gpuhub("render", "kueue", EXAMPLE, "--hub-namespace", "hub-prod").stdout)
    assert ("hub-prod", queue) in {(d["metadata"].get("namespace"), d["metadata"]["name"]) for d in kueue
                                   if d["kind"] == "LocalQueue"}
    default = json.loads(gpuhub("render", "pod", EXAMPLE, "--profile", "cpu", "--user", "ana").stdout)
    assert default["metadata"]["namespace"] == "jhub"  # render kueue's and z2jh docs' default
    bad = gpuhub("render", "pod", EXAMPLE, "--profile", "cpu", "--user", "ana", "--hub-namespace", "../kube-system")
    assert bad.returncode == 2 and bad.stdout == "" and "is not a namespace name" in bad.stderr


def _job(*args: str) -> subprocess.CompletedProcess:
    return gpuhub("render", "job", EXAMPLE, "--profile", "t4-shared", "--user", "ana", "--group", "data-science",
                  *args)


def test_render_job_reads_the_notebook_from_any_path_and_places_it_by_notebook_path(tmp_path):
    nb = tmp_path / "deep" / "folder" / "train.ipynb"
    nb.parent.mkdir(parents=True)
    nb.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    r = _job("--notebook", str(nb))  # an absolute local path: its name, at the top of the home
    assert r.returncode == 0, r.stderr
    job = next(d for d in yaml.safe_load_all(r.stdout) if d["kind"] == "Job")
    assert job["metadata"]["annotations"]["gpuhub.io/notebook"] == "train.ipynb"
    r = _job("--notebook", str(nb), "--notebook-path", "projects/x/train.ipynb")
    assert r.returncode == 0, r.stderr
    job = next(d for d in yaml.safe_load_all(r.stdout) if d["kind"] == "Job")
    assert job["metadata"]["annotations"]["gpuhub.io/notebook"] == "projects/x/train.ipynb"
    assert job["spec"]["template"]["spec"]["containers"][0]["workingDir"].endswith("/projects/x")
    for hostile, why in [("/etc/x.ipynb", "not absolute"), ("../x.ipynb", "no '..'"), ("a/../../x.ipynb", "no '..'"),
                         ("x.txt", "ending in .ipynb"), ("a\tb.ipynb", "control characters")]:
        r = _job("--notebook", str(nb), "--notebook-path", hostile)
        assert r.returncode == 2 and r.stdout == "" and "--notebook-path:" in r.stderr and why in r.stderr, hostile
    r = _job("--notebook", str(tmp_path / "missing.ipynb"))
    assert r.returncode == 2 and "cannot read notebook" in r.stderr
