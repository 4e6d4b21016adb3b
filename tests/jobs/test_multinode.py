"""Multi-node jobs (pure): `max_nodes` in the profiles file, the `nodes` field of a submission, the JobSet
builder and a JobSet's status. The dev-cluster half is tests/jobs/test_multinode_cluster.py."""
from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.builders.jobs import JobRequestError, JobSettings, build_job
from jupyterhub_gpu.builders.jobsets import JOBSET_NAME_LIMIT, build_jobset, master_addr
from jupyterhub_gpu.contract import (
    ENV_CHECKPOINT_DIR,
    ENV_LOCAL_RANK,
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_NODE_RANK,
    ENV_NPROC_PER_NODE,
    ENV_OUTPUT_DIR,
    ENV_RANK,
    ENV_WORLD_SIZE,
    JOB_LABEL,
    JOBSET_JOB_INDEX,
    QUEUE_LABEL,
)
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles_text
from jupyterhub_gpu.services.jobs.gang import check_rank, derive_gang_status
from jupyterhub_gpu.services.jobs.submission import plan_submission

from .conftest import NB

RITA = ["ml-research"]


def body(**kw):
    return {"profile": "h100-full", "notebook_path": "work/train.ipynb", "notebook": NB, **kw}


def edited(change) -> str:
    data = yaml.safe_load(open(EXAMPLE_PROFILES).read())
    change(data)
    return yaml.safe_dump(data, sort_keys=False)


def profile(data, slug):
    return next(p for p in data["profiles"] if p["slug"] == slug)


# ------------------------------------------------------------------ the profiles file
@pytest.mark.parametrize("slug, needle", [
    ("a100-mig-1g10gb", "multi-node jobs need whole GPUs; this profile has mig GPUs"),
    ("t4-shared", "multi-node jobs need whole GPUs; this profile has time-sliced GPUs"),
])
def test_max_nodes_on_a_shared_gpu_profile_is_refused(slug, needle):
    text = edited(lambda d: profile(d, slug).update(max_nodes=2))
    with pytest.raises(ProfilesError) as e:
        parse_profiles_text(text)
    assert needle in str(e.value) and ".max_nodes" in str(e.value)


def test_max_nodes_above_the_pools_nodes_is_refused():
    text = edited(lambda d: profile(d, "h100-full").update(max_nodes=3))
    with pytest.raises(ProfilesError) as e:
        parse_profiles_text(text)
    assert "3 nodes never fit: pool 'gpuh100' has at most 2" in str(e.value)


# ------------------------------------------------------------------ the submission
def test_nodes_builds_a_suspended_jobset_of_one_replicated_job(cfg):
    js, cm = plan_submission(cfg, "rita", RITA, body(nodes=2), 0)
    assert (js["apiVersion"], js["kind"], cm["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet", "ConfigMap")
    assert js["spec"]["suspend"] is True
    assert js["metadata"]["labels"][QUEUE_LABEL] == "ml-research"
    assert js["spec"]["network"]["enableDNSHostnames"] is True
    (rj,) = js["spec"]["replicatedJobs"]
    assert rj["replicas"] == 2 and rj["template"]["spec"]["parallelism"] == 1
    assert JOB_LABEL not in rj["template"]["metadata"]["labels"]  # gpu-jobs lists the JobSet, not its Jobs
    assert rj["template"]["spec"]["template"]["metadata"]["labels"][JOB_LABEL] == js["metadata"]["name"]
    assert len(js["metadata"]["name"]) <= JOBSET_NAME_LIMIT
    # restarts the gang on any failure but a cell error or the timeout
    rules = js["spec"]["failurePolicy"]["rules"]
    assert rules[0]["action"] == "FailJobSet" and set(rules[0]["onJobFailureReasons"]) == {
        "PodFailurePolicy", "DeadlineExceeded"}
    assert js["spec"]["failurePolicy"]["maxRestarts"] == JobSettings().backoff_limit
    assert rj["template"]["spec"]["backoffLimit"] == 0


def test_every_rank_gets_the_torchrun_environment(cfg):
    js, _ = plan_submission(cfg, "rita", RITA, body(nodes=2), 0, name="gpu-rita-train-1")
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    expected = "gpu-rita-train-1-node-0-0.gpu-rita-train-1"
    assert env[ENV_MASTER_ADDR]["value"] == master_addr("gpu-rita-train-1") == expected
    assert (env[ENV_MASTER_PORT]["value"], env[ENV_WORLD_SIZE]["value"], env[ENV_LOCAL_RANK]["value"],
            env[ENV_NPROC_PER_NODE]["value"]) == ("29500", "2", "0", "1")
    for name in (ENV_RANK, ENV_NODE_RANK):  # the JobSet's job index, read by the kubelet
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.annotations['{JOBSET_JOB_INDEX}']"
    assert env[ENV_CHECKPOINT_DIR]["value"] == "/home/jovyan/gpu-jobs/gpu-rita-train-1/checkpoint"  # shared
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"


def test_a_rank_is_the_single_node_jobs_pod_plus_the_rank_environment(cfg):
    """Same tolerations, selectors, hardening and storage as a single-node job: built from the same parts."""
    job, _ = build_job(cfg, cfg.profile("h100-full"), "rita", RITA, "work/train.ipynb", NB, name="gpu-x")
    js, _ = build_jobset(cfg, cfg.profile("h100-full"), "rita", RITA, "work/train.ipynb", NB, 2, name="gpu-x")
    single = job["spec"]["template"]
    rank = copy.deepcopy(js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    rank["spec"].pop("affinity")
    extra = {ENV_MASTER_ADDR, ENV_MASTER_PORT, ENV_WORLD_SIZE, ENV_RANK, ENV_NODE_RANK, ENV_LOCAL_RANK,
             ENV_NPROC_PER_NODE}
    rank["spec"]["containers"][0]["env"] = [e for e in rank["spec"]["containers"][0]["env"] if e["name"] not in extra]
    assert rank == single


@pytest.mark.parametrize("user, groups, kw, needle", [
    ("rita", RITA, {"nodes": 3}, "nodes must be from 1 to 2 on 'h100-full'; got 3"),
    ("rita", RITA, {"nodes": 0}, "nodes must be from 1 to 2"),
    ("rita", RITA, {"nodes": -5}, "nodes must be from 1 to 2"),
    ("rita", RITA, {"nodes": "2"}, "nodes must be a whole number"),
    ("rita", RITA, {"nodes": True}, "nodes must be a whole number"),
    ("rita", RITA, {"nodes": 2.0}, "nodes must be a whole number"),
    ("rita", RITA, {"nodes": 2, "profile": "a100-spot"}, "profile 'a100-spot' runs on one node"),
    ("alice", ["data-science"], {"nodes": 2, "profile": "a100-mig-1g10gb"}, "runs on one node"),
])
def test_forged_nodes_are_refused(cfg, user, groups, kw, needle):
    with pytest.raises(JobRequestError) as e:
        plan_submission(cfg, user, groups, body(**kw), 0)
    assert needle in str(e.value)


def test_nodes_beyond_the_teams_quota_are_refused_with_the_numbers():
    cfg = parse_profiles_text(edited(lambda d: (profile(d, "h100-full").update(max_nodes=2, groups=None),
                                                d["pools"]["gpuh100"].update(max_nodes=4),
                                                d["teams"].update(solo={"namespace": "team-solo",
                                                                        "quota": {"gpuh100": 1}}))))
    with pytest.raises(JobRequestError) as e:
        plan_submission(cfg, "sam", ["solo"], body(nodes=2), 0)
    assert "2 nodes x 1 GPU(s) = 2 GPUs, but team 'solo' can get at most 1 GPUs of pool 'gpuh100'" in str(e.value)


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.integers(), st.text(max_size=20), st.floats(), st.none(), st.lists(st.integers(), max_size=3)))
def test_any_nodes_value_is_a_job_or_a_clear_refusal(cfg, nodes):
    try:
        objs = plan_submission(cfg, "rita", RITA, body(nodes=nodes), 0)
    except JobRequestError as e:
        assert "nodes" in str(e)
        return
    assert nodes in (None, 1, 2) and not isinstance(nodes, bool)
    kind = "JobSet" if nodes == 2 else "Job"
    assert [o["kind"] for o in objs] == [kind, "ConfigMap"]


# ------------------------------------------------------------------ status
def jobset(name="gpu-rita-train-1", suspend=True, conditions=(), restarts=0, nodes=2):
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "team-mlr", "creationTimestamp": "2026-01-01T10:00:00Z",
                         "labels": {"gpuhub.io/profile": "h100-full", JOB_LABEL: name},
                         "annotations": {"gpuhub.io/username": "rita", "gpuhub.io/notebook": "work/train.ipynb"}},
            "spec": {"suspend": suspend, "replicatedJobs": [{"name": "node", "replicas": nodes}]},
            "status": {"restarts": restarts, "conditions": [
                {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": "2026-01-01T11:00:00Z"}
                for t, r, m in conditions]}}


def rank_pod(rank, phase="Running", exit_code=None, created="2026-01-01T10:05:00Z", name=None):
    status = {"phase": phase}
    if exit_code is not None:
        status["containerStatuses"] = [{"name": "runner", "state": {"terminated": {"exitCode": exit_code}}}]
    return {"metadata": {"name": name or f"gpu-rita-train-1-node-{rank}-0-abcde", "namespace": "team-mlr",
                         "creationTimestamp": created,
                         "labels": {JOB_LABEL: "gpu-rita-train-1", JOBSET_JOB_INDEX: str(rank)}},
            "spec": {"nodeName": f"kwok-gpuh100-{rank}"}, "status": status}


def test_a_queued_gang_waits_for_its_nodes():
    s = derive_gang_status(jobset(), None, [])
    assert (s["state"], s["nodes"], s["message"]) == (
        "Queued", 2, "waiting for 2 nodes — waiting for Kueue to queue it")
    assert [r["state"] for r in s["ranks"]] == ["waiting", "waiting"]


def test_a_queued_gangs_plain_words_keep_its_nodes(cfg):
    from jupyterhub_gpu.services.jobs.words import explain

    wl = {"metadata": {"name": "w", "namespace": "team-mlr"}, "status": {"conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending",
         "message": "couldn't assign flavors to pod set node: insufficient unused quota for nvidia.com/gpu in "
                    "flavor gpuh100, 1 more needed"}]}}
    s = explain(cfg, derive_gang_status(jobset(), wl, []))
    assert s["message"].startswith("waiting for 2 nodes — ") and "insufficient" in s["kueue_message"], s


def test_running_needs_every_rank():
    one = derive_gang_status(jobset(suspend=False), None, [rank_pod(0), rank_pod(1, "Pending")])
    assert one["state"] == "Admitted" and "1 of 2 ranks running" in one["message"]
    both = derive_gang_status(jobset(suspend=False), None, [rank_pod(0), rank_pod(1)])
    assert both["state"] == "Running" and [r["node"] for r in both["ranks"]] == ["kwok-gpuh100-0", "kwok-gpuh100-1"]
    assert both["pod"] == "gpu-rita-train-1-node-0-0-abcde"  # rank 0's: its log has the cell progress


def test_a_gang_restart_counts_as_a_preemption_and_shows_resumed():
    pods = [rank_pod(0, "Failed", 143, "2026-01-01T10:05:00Z", "old0"), rank_pod(1, "Failed", 143, name="old1"),
            rank_pod(0, created="2026-01-01T10:20:00Z"), rank_pod(1, created="2026-01-01T10:20:00Z", name="new1")]
    s = derive_gang_status(jobset(suspend=False, restarts=1), None, pods)
    assert (s["state"], s["preempted"], s["restarts"]) == ("Preempted-and-resumed", 1, 1)
    assert s["ranks"][1]["pod"] == "new1"


def test_a_cell_error_names_its_rank():
    s = derive_gang_status(jobset(suspend=False), None, [rank_pod(0, "Running"), rank_pod(1, "Failed", 3)])
    assert (s["state"], s["message"]) == ("Failed", "a cell of the notebook raised an error on rank 1")


def test_rank_0_ending_first_is_not_yet_success():
    s = derive_gang_status(jobset(suspend=False), None, [rank_pod(0, "Succeeded", 0), rank_pod(1)])
    assert (s["state"], s["message"]) == ("Running", "1 of 2 ranks finished")
    done = derive_gang_status(jobset(suspend=False, conditions=[("Completed", "AllJobsCompleted", "")]), None,
                              [rank_pod(0, "Succeeded", 0), rank_pod(1, "Succeeded", 0)])
    assert done["state"] == "Succeeded"


@pytest.mark.parametrize("value, nodes, expected", [(None, 2, None), ("", 2, None), ("0", 2, 0), ("1", 2, 1)])
def test_check_rank(value, nodes, expected):
    assert check_rank(value, nodes) == expected


@pytest.mark.parametrize("value", ["2", "-1", "1.0", "x", "9999", "1; rm"])
def test_check_rank_refuses(value):
    with pytest.raises(JobRequestError):
        check_rank(value, 2)


# ------------------------------------------------------------------ the runner and the dev agent (SIMULATOR)
@pytest.mark.parametrize("rank, expected",
                         [(None, "out/nb.ipynb"), ("0", "out/nb.ipynb"), ("1", "out/rank-1/nb.ipynb")])
def test_rank_0_writes_the_output_notebook_the_others_beside_it(monkeypatch, rank, expected):
    from jupyterhub_gpu.runner.main import default_output

    monkeypatch.setenv(ENV_OUTPUT_DIR, "out")
    if rank is None:
        monkeypatch.delenv(ENV_RANK, raising=False)
    else:
        monkeypatch.setenv(ENV_RANK, rank)
    assert str(default_output("nb")) == expected


def test_the_dev_agent_fills_the_rank_from_the_pods_annotation():
    from jupyterhub_gpu_dev.agent import container_env

    js, _ = build_jobset(load_profiles(EXAMPLE_PROFILES), load_profiles(EXAMPLE_PROFILES).profile("h100-full"),
                         "rita", RITA, "work/train.ipynb", NB, 2, name="gpu-x")
    spec = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod = {"metadata": {"name": "gpu-x-node-1-0-abcde", "namespace": "team-mlr",
                        "annotations": {JOBSET_JOB_INDEX: "1"}, "labels": {JOBSET_JOB_INDEX: "1"}},
           "spec": {**spec, "nodeName": "kwok-gpuh100-1"}, "status": {}}
    env = container_env(pod, spec["containers"][0])
    assert (env[ENV_RANK], env[ENV_NODE_RANK], env[ENV_WORLD_SIZE]) == ("1", "1", "2")


def test_the_dev_agents_pod_hostnames_resolve_with_the_pods_search_path(tmp_path, monkeypatch):
    import importlib.util
    import os
    import socket
    from pathlib import Path

    from jupyterhub_gpu_dev.pod_dns import PodHosts, pod_fqdn

    hosts = PodHosts(tmp_path / "hosts.json")
    pod = {"metadata": {"namespace": "team-mlr"}, "spec": {"hostname": "gpu-x-node-0-0", "subdomain": "gpu-x"}}
    hosts.add("team-mlr/p0", pod_fqdn(pod), "127.11.0.7")
    env = hosts.env("team-mlr")
    real = (socket.getaddrinfo, socket.gethostbyname, socket.gethostbyname_ex)
    for attr, fn in zip(("getaddrinfo", "gethostbyname", "gethostbyname_ex"), real):
        monkeypatch.setattr(socket, attr, fn)  # restored after the shim patches it
    monkeypatch.setattr(socket, "_gpuhub_real_resolvers", real, raising=False)
    for k in ("GPUHUB_DEV_HOSTS", "GPUHUB_DEV_NAMESPACE"):
        monkeypatch.setenv(k, env[k])
    shim_file = Path(env["PYTHONPATH"].split(os.pathsep)[0]) / "sitecustomize.py"
    spec = importlib.util.spec_from_file_location("gpuhub_dev_dns_shim", shim_file)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # what a process the agent runs loads first
    assert socket.gethostbyname("gpu-x-node-0-0.gpu-x") == "127.11.0.7"  # as MASTER_ADDR is written
    assert socket.getaddrinfo("gpu-x-node-0-0.gpu-x.team-mlr.svc.cluster.local", 29500)[0][4][0] == "127.11.0.7"
    assert socket.gethostbyname("localhost") == "127.0.0.1"  # anything else: the real resolver
    hosts.remove("team-mlr/p0")
    with pytest.raises(OSError):
        socket.gethostbyname("gpu-x-node-0-0.gpu-x.team-mlr.svc.cluster.local")


def test_the_runners_kernel_sockets_are_private_to_the_run(monkeypatch, tmp_path):
    """Ranks run in the same notebook folder of the shared home: their kernels' IPC socket files must not
    be jupyter_client's default `kernel-ipc-N` in the working directory (they would read each other's
    messages: "Invalid Signature")."""
    from jupyterhub_gpu.runner.main import ipc_kernel_manager

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    km = ipc_kernel_manager()()
    assert km.transport == "ipc" and km.ip == str(tmp_path / "kernel-ipc")


def test_gpuhub_render_job_nodes_prints_the_jobset_or_says_why_not(tmp_path, monkeypatch, capsys):
    import json as _json

    from jupyterhub_gpu.tools.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.ipynb").write_text(_json.dumps(NB))
    args = ["render", "job", str(EXAMPLE_PROFILES), "--profile", "h100-full", "--user", "rita", "--group",
            "ml-research", "--notebook", "train.ipynb"]
    assert main(args + ["--nodes", "2"]) == 0
    js, cm = yaml.safe_load_all(capsys.readouterr().out)
    assert (js["kind"], js["spec"]["replicatedJobs"][0]["replicas"], cm["kind"]) == ("JobSet", 2, "ConfigMap")
    assert main(args + ["--nodes", "3"]) != 0
    assert "nodes must be from 1 to 2 on 'h100-full'" in capsys.readouterr().err


class _Profiles:
    """What the submit form asks gpu-jobs: GET /profiles."""

    def profiles(self):
        return {"team": "ml-research", "priorities": ["low", "normal", "high"], "profiles": [
            {"slug": "a100-spot", "display_name": "A100 spot", "gpus": 1, "max_nodes": 1},
            {"slug": "h100-full", "display_name": "Full H100", "gpus": 1, "max_nodes": 2}]}


def test_the_submit_forms_nodes_field_shows_only_for_a_multi_node_profile_and_is_sent():
    from jupyterhub_gpu.singleuser.widgets import SubmitForm

    sent = []
    form = SubmitForm(_Profiles(), lambda **kw: None, defaults={"profile": "a100-spot"})
    assert form.nodes.layout.display == "none" and form.nodes.value == 1
    form.profile.value = "h100-full"
    assert form.nodes.layout.display is None and form.nodes.max == 2
    form.nodes.value = 5  # bounded by the profile's max_nodes
    assert form.nodes.value == 2
    form.on_submit(lambda **kw: sent.append(kw) or (_Box(), "submitted"))
    assert sent[-1]["nodes"] == 2 and sent[-1]["profile"] == "h100-full"
    form.profile.value = "a100-spot"
    form.on_submit(lambda **kw: sent.append(kw) or (_Box(), "submitted"))
    assert "nodes" not in sent[-1]


class _Box:
    def __init__(self):
        import ipywidgets as w
        self.box = w.HTML("status")
