"""The gpu-jobs wire contract (jupyterhub_gpu/wire.py): the service's real statuses fit its models exactly, and
the JupyterLab extension's wire.ts is what the generator writes from them now (so a field renamed in Python
without regenerating fails here, and regenerating fails tsc where the TypeScript still uses the old name)."""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from jupyterhub_gpu import wire
from jupyterhub_gpu.contract import JOB_LABEL, JOB_STATES, JOBSET_JOB_INDEX, JobState
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.services.jobs.app import profiles_answer
from jupyterhub_gpu.services.jobs.gang import derive_gang_status
from jupyterhub_gpu.services.jobs.status import derive_status, queue_positions, unreadable
from jupyterhub_gpu.services.jobs.submission import ServiceSettings
from jupyterhub_gpu.services.jobs.words import explain
from jupyterhub_gpu.singleuser.server import for_lab
from jupyterhub_gpu.tools import wire_types

ROOT = Path(__file__).resolve().parents[2]
T0 = "2026-01-01T10:00:00Z"


def cond(kind, reason="", message="", status="True"):
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": T0}


def job(name="gpu-alice-nb-1", suspend=True, conditions=(), start=None):
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "team-ds", "creationTimestamp": T0,
                         "labels": {"gpuhub.io/profile": "a100-mig-1g10gb", "kueue.x-k8s.io/queue-name": "data-science",
                                    "kueue.x-k8s.io/priority-class": "normal", JOB_LABEL: name},
                         "annotations": {"gpuhub.io/username": "alice", "gpuhub.io/notebook": "work/nb.ipynb"}},
            "spec": {"suspend": suspend},
            "status": {"conditions": list(conditions), **({"startTime": start} if start else {})}}


def workload(owner, kind="Job", admitted=False, evicted=False):
    conds = [cond("QuotaReserved", "QuotaReserved", "Quota reserved"), cond("Admitted", "Admitted")] if admitted else \
        [cond("QuotaReserved", "Pending", "couldn't assign flavors to pod set main: insufficient quota", "False")]
    if evicted:
        conds.append(cond("Evicted", "Preempted", "Preempted to accommodate"))
    return {"metadata": {"name": f"wl-{owner}", "namespace": "team-ds", "creationTimestamp": T0,
                         "ownerReferences": [{"kind": kind, "name": owner}]},
            "spec": {"queueName": "data-science", "priority": 1000},
            "status": {"conditions": conds, **({"admission": {"clusterQueue": "team-ds"}} if admitted else {})}}


def pod(name, owner="gpu-alice-nb-1", phase="Running", exit_code=None, rank=None):
    status = {"phase": phase}
    if exit_code is not None:
        status["containerStatuses"] = [{"name": "runner", "state": {"terminated": {"exitCode": exit_code}}}]
    labels = {JOB_LABEL: owner, **({JOBSET_JOB_INDEX: str(rank)} if rank is not None else {})}
    return {"metadata": {"name": name, "namespace": "team-ds", "creationTimestamp": T0, "labels": labels},
            "spec": {"nodeName": "kwok-0"}, "status": status}


def jobset(name="gpu-alice-train-1", suspend=False, nodes=2):
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "team-ds", "creationTimestamp": T0,
                         "labels": {"gpuhub.io/profile": "h100-full", JOB_LABEL: name},
                         "annotations": {"gpuhub.io/username": "alice", "gpuhub.io/notebook": "work/train.ipynb"}},
            "spec": {"suspend": suspend, "replicatedJobs": [{"name": "node", "replicas": nodes}]},
            "status": {"restarts": 0, "conditions": []}}


LOG = "[gpuhub-runner] 10:01:02 cell 2/5 running\n"
#: The notebook's gpuhub.report()s as the runner prints them.
REPORTS = ('[gpuhub-runner] 10:01:10 report {"t":1767261670,"step":100,"samples":3200,"total_steps":1000,"loss":0.9}\n'
           '[gpuhub-runner] 10:01:20 report {"t":1767261680,"step":150,"samples":4800,"total_steps":1000,"loss":0.8}\n')


def statuses() -> list[dict]:
    """What the service derives for jobs in every state it reports (and the plain words it adds)."""
    cfg = load_profiles(EXAMPLE_PROFILES)
    wl = workload("gpu-alice-nb-1")
    queued = explain(cfg, derive_status(job(), wl, [], queue_positions([wl])["gpu-alice-nb-1"]))
    preempted = derive_status(job(), workload("gpu-alice-nb-1", evicted=True), [pod("p0", phase="Failed")])
    admitted = derive_status(job(suspend=False), workload("gpu-alice-nb-1", admitted=True), [])
    running = derive_status(job(suspend=False, start=T0), workload("gpu-alice-nb-1", admitted=True), [pod("p1")], None,
                            LOG + REPORTS)
    resumed = derive_status(job(suspend=False, start=T0), None,
                            [pod("p0", phase="Failed", exit_code=143), pod("p1")], None, LOG)
    succeeded = derive_status(job(suspend=False, conditions=[cond("Complete")]), None, [pod("p1", phase="Succeeded")])
    failed = derive_status(job(suspend=False, conditions=[cond("Failed", "PodFailurePolicy")]), None,
                           [pod("p1", phase="Failed", exit_code=3)])
    gang = derive_gang_status(jobset(), workload("gpu-alice-train-1", "JobSet", admitted=True),
                              [pod("r0", "gpu-alice-train-1", rank=0), pod("r1", "gpu-alice-train-1", rank=1)], None,
                              LOG)
    queued_gang = explain(cfg, derive_gang_status(jobset(suspend=True), workload("gpu-alice-train-1", "JobSet"), []))
    stale = {**running, "stale": True, "as_of": "2026-01-01T10:02:00+00:00"}  # Kube.statuses' marks
    return [queued, preempted, admitted, running, resumed, succeeded, failed, gang, queued_gang, stale,
            unreadable(job("gpu-alice-odd"))]


def test_the_states_are_the_strings_on_the_wire():
    assert [s.value for s in JobState] == ["Queued", "Admitted", "Running", "Preempted-and-resumed", "Succeeded",
                                           "Failed", "Cancelled", "Unknown"]
    assert json.dumps({"state": JobState.RESUMED}) == '{"state": "Preempted-and-resumed"}'
    assert JobState.QUEUED == "Queued" and set(JOB_STATES) <= set(JobState)


def test_the_services_statuses_fit_the_model_key_for_key():
    found = statuses()
    assert {s["state"] for s in found} == {*JOB_STATES, JobState.UNKNOWN}
    for status in found:
        sent = json.loads(json.dumps(wire.dump(wire.JobStatus, status)))
        assert sent == json.loads(json.dumps(status)), status["state"]  # same keys, same values
        assert sent["state"] == str(status["state"])  # the enum's value, as the wire always had it


def test_every_field_of_the_model_is_one_the_service_sends():
    """No field in the model (and so in wire.ts) that the service never fills."""
    sent = {k for s in statuses() for k in s}
    assert set(wire.JobStatus.model_fields) == sent


def test_the_lab_routes_job_fits_its_model():
    for status in statuses():
        lab = for_lab(status)
        assert json.loads(json.dumps(wire.dump(wire.LabJob, lab))) == json.loads(json.dumps(lab))


def test_the_profiles_answer_fits_its_model_for_every_team():
    cfg = load_profiles(EXAMPLE_PROFILES)
    for groups in [[name] for name in cfg.teams] + [[]]:
        team = cfg.team_for(groups)
        info = {"pending": 2, "free": {f"{p.pool}/{cfg.resource_name(p)}": 1 for p in cfg.profiles if p.is_gpu}}
        answer = profiles_answer(cfg, ServiceSettings(), "alice", groups, team[0] if team else None, info)
        assert answer["profiles"] and all(p["free"] == 1 and p["queued"] == 2 for p in answer["profiles"])
        assert set(answer["profiles"][0]) == set(wire.ProfileEntry.model_fields)


@pytest.mark.parametrize("change", [
    lambda s: {**s, "positon": 1},                         # a misspelt key
    lambda s: {k: v for k, v in s.items() if k != "message"},  # a forgotten one
    lambda s: {**s, "state": "Pending"},                    # no such state
    lambda s: {**s, "cell": {"cell": 1, "total": 3, "since": "10:00:00"}},
], ids=["misspelt", "forgotten", "no-such-state", "nested-renamed"])
def test_a_status_that_breaks_the_contract_is_refused(change):
    with pytest.raises(ValidationError):
        wire.dump(wire.JobStatus, change(statuses()[3]))


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | \
        {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}


def test_the_contract_layer_stays_light():
    """contract.py: the standard library only (the runner imports it); wire.py: that, pydantic and contract."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    assert {m.split(".")[0] for m in _imports(ROOT / "jupyterhub_gpu" / "contract.py")} <= stdlib
    wire_imports = _imports(ROOT / "jupyterhub_gpu" / "wire.py")
    assert {m for m in wire_imports if m.split(".")[0] not in stdlib} <= {"pydantic", "jupyterhub_gpu.contract"}


def test_the_committed_wire_ts_is_what_the_generator_writes():
    committed = (ROOT / "labextension" / "src" / "wire.ts").read_text()
    assert committed == wire_types.render(), "wire.ts is behind jupyterhub_gpu/wire.py: run " + wire_types.COMMAND


def test_the_generated_types_name_every_field_and_state():
    text = wire_types.render()
    assert text.startswith(f"// Generated by `{wire_types.COMMAND}`")
    assert "export type JobState = 'Queued' | 'Admitted' |" in text
    assert "export interface ILabJob extends IJobStatus {" in text
    assert "  state: JobState;\n" in text and "  kueue_message?: string | null;\n" in text
    assert "  cell: ICellProgress | null;\n" in text and "  ranks?: IRankStatus[] | null;\n" in text


def test_check_mode_says_when_the_file_is_behind(tmp_path):
    out = tmp_path / "wire.ts"
    assert wire_types.main(["--out", str(out), "--check"]) == 1
    assert wire_types.main(["--out", str(out)]) == 0 and out.read_text() == wire_types.render()
    assert wire_types.main(["--out", str(out), "--check"]) == 0
