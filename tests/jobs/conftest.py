"""Helpers for the gpu-jobs tests: realistic Job / Workload / Pod objects as the API server returns them."""
from __future__ import annotations

import pytest

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

NB = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
      "cells": [{"cell_type": "code", "id": "a", "metadata": {"tags": ["parameters"]}, "source": "epochs = 1",
                 "outputs": [], "execution_count": None},
                {"cell_type": "code", "id": "b", "metadata": {}, "source": "print(epochs * 2)", "outputs": [],
                 "execution_count": None}]}


@pytest.fixture(scope="session")
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def job(name="gpu-alice-nb-abc123", ns="team-ds", suspend=True, conditions=(), start=None, user="alice"):
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T10:00:00Z",
                         "labels": {"gpuhub.io/profile": "a100-mig-1g10gb", "kueue.x-k8s.io/queue-name": "data-science",
                                    "kueue.x-k8s.io/priority-class": "normal", "gpuhub.io/job": name,
                                    "gpuhub.io/user": user},
                         "annotations": {"gpuhub.io/username": user, "gpuhub.io/notebook": "work/nb.ipynb"}},
            "spec": {"suspend": suspend},
            "status": {"conditions": [{"type": t, "status": "True", "reason": r, "message": m,
                                       "lastTransitionTime": "2026-01-01T11:00:00Z"} for t, r, m in conditions],
                       **({"startTime": start} if start else {})}}


def workload(job_name, ns="team-ds", created="2026-01-01T10:00:00Z", priority=1000, admitted=False,
             queue="data-science",
             evicted=False):
    conds = []
    if admitted:
        conds += [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved",
                   "lastTransitionTime": created},
                  {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                   "lastTransitionTime": created}]
    else:
        conds += [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                   "message": "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/mig-1g.10gb",
                   "lastTransitionTime": created}]
    if evicted:
        conds.append({"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted to accommodate",
                      "lastTransitionTime": "2026-01-01T10:30:00Z"})
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"job-{job_name}-1a2b3", "namespace": ns, "creationTimestamp": created,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": "x"}]},
            "spec": {"queueName": queue, "priority": priority, "priorityClassName": "normal"},
            "status": {"conditions": conds,
                       **({"admission": {"clusterQueue": "team-data-science"}} if admitted else {})}}


def pod(name, job_name="gpu-alice-nb-abc123", phase="Running", created="2026-01-01T10:05:00Z", exit_code=None,
        disrupted=False, node="kwok-gpumig-0"):
    status = {"phase": phase}
    if exit_code is not None:
        status["containerStatuses"] = [{"name": "runner", "state": {"terminated": {"exitCode": exit_code}}}]
    if disrupted:
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    return {"metadata": {"name": name, "namespace": "team-ds", "creationTimestamp": created,
                         "labels": {"batch.kubernetes.io/job-name": job_name, "gpuhub.io/job": job_name}},
            "spec": {"nodeName": node}, "status": status}
