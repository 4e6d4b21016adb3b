"""A GPU Job's status for users, from what Kubernetes and Kueue say (pure functions, no I/O).

States, in the order a job normally goes through them:
  Queued     suspended, its Workload waits in the team's LocalQueue (with its position)
  Admitted   Kueue reserved quota and unsuspended the Job; no pod runs yet
  Running    a pod runs the notebook (current cell from the runner's progress lines; its throughput from the
             notebook's own reports, when it makes them)
  Succeeded / Failed   the Job finished
A job whose pod was preempted or evicted and that got a new pod is `Preempted-and-resumed` while
that pod runs, and `preempted` counts such interruptions in every state.
"""
from __future__ import annotations

from typing import Any

from jupyterhub_gpu.builders.jobs import RUNNER_CONTAINER
from jupyterhub_gpu.cluster.conditions import condition, is_true
from jupyterhub_gpu.cluster.workloads import admissions, is_pending, queue_key
from jupyterhub_gpu.contract import (
    ADMITTED,
    FAILED,
    JOB_LABEL,
    JOB_NAME_LABEL,
    NOTEBOOK_ANNOTATION,
    PRIORITY_LABEL,
    PROFILE_LABEL,
    PROGRESS_RE,
    QUEUE_LABEL,
    QUEUED,
    RESUMED,
    RUNNING,
    SUCCEEDED,
    UNKNOWN,
    USER_ANNOTATION,
    RunnerExit,
)
from jupyterhub_gpu.model.throughput import throughput
from jupyterhub_gpu.model.wait_estimate import estimate
from jupyterhub_gpu.reports import reports_in


def current_cell(log: str) -> dict | None:
    """The last progress line of the runner: {"cell": N, "of": M, "since": "HH:MM:SS"}."""
    found = None
    for m in PROGRESS_RE.finditer(log or ""):
        found = m
    if not found:
        return None
    return {"cell": int(found.group(2)), "of": int(found.group(3)), "since": found.group(1)}


def unreadable(job: dict) -> dict[str, Any]:
    """A job whose status could not be derived: listed with what its metadata says, never failing the list."""
    meta = job.get("metadata") or {}
    ann = meta.get("annotations") or {}
    return {"name": meta.get("name"), "namespace": meta.get("namespace"), "user": ann.get(USER_ANNOTATION),
            "notebook": ann.get(NOTEBOOK_ANNOTATION), "profile": (meta.get("labels") or {}).get(PROFILE_LABEL),
            "created": meta.get("creationTimestamp"), "state": UNKNOWN, "cell": None,
            "message": "its status cannot be read right now"}


def workload_owner(workload: dict) -> str | None:
    """The Job or JobSet (a multi-node job) the Workload stands for."""
    for ref in workload.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") in ("Job", "JobSet"):
            return ref.get("name")
    return None


def queue_positions(workloads: list[dict]) -> dict[str, dict[str, int]]:
    """Job name → {"position": 1-based place among the pending workloads of its LocalQueue, "of": how
    many are pending there, and the queue ETA (wait_estimate.estimate: eta_p50_s, eta_p90_s, None when history is
    thin, eta_samples)}; only pending (not quota-reserved) workloads get one."""
    by_queue: dict[tuple[str, str], list[dict]] = {}
    for wl in workloads:
        if is_pending(wl):
            key = (wl["metadata"].get("namespace", ""), (wl.get("spec") or {}).get("queueName", ""))
            by_queue.setdefault(key, []).append(wl)
    history = admissions(workloads)
    out = {}
    for key, pending in by_queue.items():
        pending.sort(key=queue_key)
        for i, wl in enumerate(pending, 1):
            if owner := workload_owner(wl):
                out[owner] = {"position": i, "of": len(pending),
                              **estimate(history.get(key, []), i).as_fields()}
    return out


def _pod_interrupted(pod: dict) -> bool:
    """A pod that was stopped from outside: preempted, evicted, disrupted, or SIGTERM'd (exit 143)."""
    st = pod.get("status") or {}
    if is_true(pod, "DisruptionTarget") or st.get("reason") in ("Evicted", "Preempting", "Terminated"):
        return True
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return True
    for cs in st.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term.get("exitCode") in (137, 143):
            return True
    return st.get("phase") == "Failed"


def _runner_exit(pod: dict | None) -> dict | None:
    """The runner container's `terminated` state of a finished pod (exitCode, finishedAt), if any."""
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == RUNNER_CONTAINER and (term := (cs.get("state") or {}).get("terminated")):
            return term
    return None


def derive_status(job: dict, workload: dict | None = None, pods: list[dict] | None = None,
                  position: dict | None = None, log: str = "") -> dict[str, Any]:
    """One job's status for the API and the widget (pure). `pods`: the Job's pods in any order;
    `position`: from `queue_positions`; `log`: the newest pod's log (tail is enough)."""
    meta, spec, st = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    labels, ann = meta.get("labels") or {}, meta.get("annotations") or {}
    pods = sorted(pods or [], key=lambda p: p["metadata"].get("creationTimestamp") or "")
    interrupted = [p for p in pods[:-1] if _pod_interrupted(p)]
    wl_status = (workload or {}).get("status") or {}
    # Kueue's eviction counter outlives re-admission (the Evicted condition turns False then)
    counted = sum(e.get("count") or 0 for e in (wl_status.get("schedulingStats") or {}).get("evictions") or [])
    wl_evictions = max(counted, sum(1 for c in wl_status.get("conditions") or []
                                    if c.get("type") in ("Evicted", "Preempted") and c.get("status") == "True"))
    # pods the Job controller counted as failed and replaced (ignored disruptions are not counted there,
    # but show as interrupted pods or as Workload evictions)
    replaced = (st.get("failed") or 0) if not is_true(job, "Failed") else max(0, (st.get("failed") or 0) - 1)
    preempted = max(len(interrupted), wl_evictions, replaced)
    newest = pods[-1] if pods else None
    out: dict[str, Any] = {
        "name": meta["name"], "namespace": meta.get("namespace"), "user": ann.get(USER_ANNOTATION),
        "notebook": ann.get(NOTEBOOK_ANNOTATION), "profile": labels.get(PROFILE_LABEL),
        "queue": labels.get(QUEUE_LABEL), "priority": labels.get(PRIORITY_LABEL),
        "created": meta.get("creationTimestamp"), "started": st.get("startTime"),
        "finished": st.get("completionTime"), "preempted": preempted, "position": None, "queue_length": None,
        "cell": None, "message": "", "pod": newest["metadata"]["name"] if newest else None,
        "node": (newest.get("spec") or {}).get("nodeName") if newest else None,
        "cluster_queue": (((workload or {}).get("status") or {}).get("admission") or {}).get("clusterQueue"),
    }
    if is_true(job, "Complete") or is_true(job, "SuccessCriteriaMet"):
        out.update(state=SUCCEEDED, message="the notebook ran to the end")
        out["finished"] = out["finished"] or (condition(job, "Complete") or {}).get("lastTransitionTime")
        return out
    if is_true(job, "Failed") or is_true(job, "FailureTarget"):
        c = condition(job, "Failed") or condition(job, "FailureTarget")
        reason = c.get("reason") or ""
        why = {"DeadlineExceeded": "the job ran past its timeout",
               "BackoffLimitExceeded": "its pods failed too often (infrastructure errors)",
               "PodFailurePolicy": "a cell of the notebook raised an error"}.get(reason, c.get("message") or reason)
        out.update(state=FAILED, message=why, finished=c.get("lastTransitionTime"))
        return out
    if spec.get("suspend", False):
        out["state"] = QUEUED
        if position:
            out["position"], out["queue_length"] = position.get("position"), position.get("of")
            out.update({k: position.get(k) for k in ("eta_p50_s", "eta_p90_s", "eta_samples")})
        if workload is None:
            out["message"] = "waiting for Kueue to queue it"
        elif c := condition(workload, "QuotaReserved"):
            out["message"] = c.get("message") or ""
            # Kueue's own words, kept for "details"; `explain` (services/jobs/words.py) puts plain ones in message
            out["kueue_message"], out["kueue_reason"] = out["message"], c.get("reason")
        if preempted and not out.get("kueue_message") and (c := condition(workload, "Evicted")) and c.get("message"):
            out["kueue_message"], out["kueue_reason"] = c["message"], c.get("reason")
        if preempted:
            out["message"] = f"preempted; waiting to resume ({out['message']})" if out["message"] else \
                "preempted; waiting to resume"
        return out
    # The Job controller marks the Job Complete/Failed a moment after its pod ends (finalizer
    # bookkeeping, its sync period); the pod's own end is the earlier, equally final signal.
    phase = ((newest or {}).get("status") or {}).get("phase")
    term = _runner_exit(newest)
    if phase == "Succeeded":
        out.update(state=SUCCEEDED, message="the notebook ran to the end",
                   finished=out["finished"] or (term or {}).get("finishedAt"))
        return out
    if phase == "Failed" and term and term.get("exitCode") == RunnerExit.NOTEBOOK_FAILED:
        out.update(state=FAILED, message="a cell of the notebook raised an error",
                   finished=out["finished"] or term.get("finishedAt"))
        return out
    running = newest and (newest.get("status") or {}).get("phase") == "Running" \
        and not newest["metadata"].get("deletionTimestamp")
    if running:
        out["state"] = RESUMED if preempted else RUNNING
        out["cell"] = current_cell(log)
        c = out["cell"]
        out["message"] = f"cell {c['cell']} of {c['of']}" if c else "starting the kernel"
        if speed := throughput(reports_in(log)):  # the notebook's own gpuhub.report()s
            out["throughput"] = speed
        return out
    out["state"] = ADMITTED
    if not newest:
        doing = "waiting for its pod to start"
    elif phase == "Failed":
        code = (term or {}).get("exitCode")
        doing = f"its pod stopped{f' (exit {code})' if code is not None else ''}; the Job starts a new one"
    else:
        doing = f"pod {phase or 'Pending'}"
    out["message"] = (f"admitted to {out['cluster_queue']}; " if out["cluster_queue"] else "admitted; ") + doing
    return out


def job_name_of(pod: dict) -> str | None:
    """The submission a pod belongs to: our job label first (a JobSet's pods also carry their rank's Job)."""
    labels = pod.get("metadata", {}).get("labels") or {}
    return labels.get(JOB_LABEL) or labels.get(JOB_NAME_LABEL) or labels.get("job-name")
