"""The reconcile loop's decisions (pure): what a crash or a failed rollback left is removed or adopted,
never anything young, finished, or not made by gpu-jobs."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.services.jobs.lifecycle import plan_reconcile

from .conftest import job as job_obj

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


def at(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(name, age=600, finished=False):
    j = job_obj(name=name, conditions=[("Complete", "Completed", "")] if finished else ())
    j["metadata"]["creationTimestamp"] = at(age)
    return j


def cm(name, age=600, owned=False, ours=True):
    meta = {"name": name, "namespace": "team-ds", "creationTimestamp": at(age),
            "labels": {"gpuhub.io/job": name} if ours else {"app": "x"},
            "annotations": {"gpuhub.io/username": "alice"} if ours else {}}
    if owned:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": f"uid-{name}"}]
    return {"metadata": meta}


def test_a_whole_submission_is_left_alone():
    assert plan_reconcile([job("a")], [cm("a", owned=True)], NOW, 120) == []


def test_a_configmap_whose_job_never_came_is_deleted_once_older_than_the_grace():
    assert plan_reconcile([], [cm("a", age=600)], NOW, 120) == [("delete-configmap", "a")]
    assert plan_reconcile([], [cm("a", age=30)], NOW, 120) == []  # may be mid-submission


def test_a_configmap_left_unowned_is_adopted_by_its_job():
    (action,) = plan_reconcile([job("a", age=5)], [cm("a", age=5)], NOW, 120)
    assert action[:2] == ("own-configmap", "a") and action[2]["metadata"]["uid"] == "uid-a"


def test_an_unfinished_job_without_its_configmap_is_deleted_a_finished_one_is_not():
    assert plan_reconcile([job("a", age=600)], [], NOW, 120) == [("delete-job", "a")]
    assert plan_reconcile([job("a", age=600, finished=True)], [], NOW, 120) == []
    assert plan_reconcile([job("a", age=10)], [], NOW, 120) == []


def test_objects_not_made_by_gpu_jobs_are_never_touched():
    foreign = job("a")
    del foreign["metadata"]["annotations"]["gpuhub.io/username"]
    assert plan_reconcile([foreign], [cm("b", ours=False)], NOW, 120) == []


def jobset(name, age=600, finished=False):
    j = job(name, age, finished)
    j["kind"], j["apiVersion"] = "JobSet", "jobset.x-k8s.io/v1alpha2"
    if finished:
        j["status"]["conditions"] = [{"type": "Completed", "status": "True"}]
    return j


def test_a_jobset_not_known_to_have_its_networkpolicy_gets_one_made_or_is_removed():
    """A crash between creating a JobSet and its ranks' NetworkPolicy leaves ranks that can never reach
    each other: the loop makes sure of the policy once per JobSet (the shell creates it or deletes the JobSet)."""
    (action,) = plan_reconcile([jobset("g")], [cm("g", owned=True)], NOW, 120)
    assert action[:2] == ("ensure-policy", "g") and action[2]["metadata"]["uid"] == "uid-g"
    assert plan_reconcile([jobset("g")], [cm("g", owned=True)], NOW, 120, {"uid-g"}) == []  # confirmed once
    assert plan_reconcile([jobset("g", age=10)], [cm("g", owned=True)], NOW, 120) == []  # may be mid-submission
    assert plan_reconcile([jobset("g", finished=True)], [cm("g", owned=True)], NOW, 120) == []
    assert plan_reconcile([jobset("g")], [], NOW, 120) == [("delete-job", "g")]  # no ConfigMap: deleted anyway
    assert plan_reconcile([job("a")], [cm("a", owned=True)], NOW, 120) == []  # a single-node Job has no policy
