"""A multi-node job's status (a JobSet, `%gpu_submit --nodes N`): the same states as a single-node job,
plus its nodes and each rank's state (pure functions, no I/O).

Queued says "waiting for N nodes": Kueue admits the N pods together or not at all. Running means every
rank runs; until then it is Admitted with how many do. A restart of the whole gang (a rank evicted or
preempted, see builders/jobsets.py) counts as a preemption, as do Kueue's evictions of the Workload. A
failed job names the rank whose cell raised.
"""
from __future__ import annotations

import re
from typing import Any

from jupyterhub_gpu.builders.jobs import JobRequestError
from jupyterhub_gpu.cluster.conditions import condition, is_true
from jupyterhub_gpu.contract import ADMITTED, FAILED, FINISHED, JOBSET_JOB_INDEX, QUEUED, RESUMED, RUNNING, RunnerExit
from jupyterhub_gpu.services.jobs.status import _runner_exit, derive_status


def check_rank(value: str | None, nodes: int) -> int | None:
    """`?rank=K` of a log request: a rank of this job (0..nodes-1); None when not asked."""
    if value is None or value == "":
        return None
    if not re.fullmatch(r"[0-9]{1,3}", value) or int(value) >= nodes:
        raise JobRequestError(f"rank must be a whole number from 0 to {nodes - 1} for this job; got {value[:40]!r}")
    return int(value)


def is_jobset(obj: dict) -> bool:
    return obj.get("kind") == "JobSet" or "replicatedJobs" in (obj.get("spec") or {})


def nodes_of(jobset: dict) -> int:
    return sum(int(r.get("replicas") or 1) for r in (jobset.get("spec") or {}).get("replicatedJobs") or [])


def rank_of(pod: dict) -> int | None:
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(JOBSET_JOB_INDEX) or (meta.get("annotations") or {}).get(JOBSET_JOB_INDEX)
    return int(value) if isinstance(value, str) and value.isdigit() else None


def by_rank(pods: list[dict]) -> dict[int, list[dict]]:
    """Each rank's pods, oldest first (a restarted gang has one per attempt)."""
    out: dict[int, list[dict]] = {}
    for p in sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
        rank = rank_of(p)
        if rank is not None:
            out.setdefault(rank, []).append(p)
    return out


def _pod_state(pod: dict | None) -> str:
    if pod is None:
        return "waiting"
    if pod["metadata"].get("deletionTimestamp"):
        return "stopping"
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    return {"Pending": "starting", "Running": "running", "Succeeded": "succeeded", "Failed": "failed"}.get(phase, phase)


def _as_job(jobset: dict) -> dict:
    """The JobSet in a Job's terms, so derive_status's queue, timing and message logic applies as is."""
    st = jobset.get("status") or {}
    conds = []
    for c in st.get("conditions") or []:
        kind = {"Completed": "Complete", "Failed": "Failed"}.get(c.get("type"))
        if kind:
            conds.append({**c, "type": kind})
    return {"metadata": jobset["metadata"], "spec": {"suspend": (jobset.get("spec") or {}).get("suspend", False)},
            "status": {"conditions": conds}}


def derive_gang_status(jobset: dict, workload: dict | None = None, pods: list[dict] | None = None,
                       position: dict | None = None, log: str = "") -> dict[str, Any]:
    """One multi-node job's status (pure). `pods`: all ranks' pods; `log`: rank 0's newest log tail."""
    nodes = nodes_of(jobset)
    ranks = by_rank(pods or [])
    restarts = int((jobset.get("status") or {}).get("restarts") or 0)
    out = derive_status(_as_job(jobset), workload, ranks.get(0, []), position, log)
    out["nodes"] = nodes
    out["restarts"] = restarts
    out["preempted"] = max(out["preempted"], restarts)
    out["ranks"] = [{"rank": k, "state": _pod_state((ranks.get(k) or [None])[-1]),
                     "pod": ranks[k][-1]["metadata"]["name"] if ranks.get(k) else None,
                     "node": ((ranks[k][-1].get("spec") or {}).get("nodeName") if ranks.get(k) else None)}
                    for k in range(nodes)]
    if out["state"] == QUEUED:
        why = out["message"]
        out["message"] = f"waiting for {nodes} nodes" + (f" — {why}" if why else "")
        return out
    failed_rank = next((k for k, ps in sorted(ranks.items())
                        if (_runner_exit(ps[-1]) or {}).get("exitCode") == RunnerExit.NOTEBOOK_FAILED), None)
    if is_true(jobset, "Failed") or failed_rank is not None:
        c = condition(jobset, "Failed") or {}
        if failed_rank is not None:
            why = f"a cell of the notebook raised an error on rank {failed_rank}"
        elif "DeadlineExceeded" in (c.get("message") or ""):
            why = "the job ran past its timeout"
        else:
            why = c.get("message") or c.get("reason") or "a rank failed"
        out.update(state=FAILED, message=why, finished=out["finished"] or c.get("lastTransitionTime"))
        return out
    finished = sum(1 for r in out["ranks"] if r["state"] == "succeeded")
    if out["state"] in FINISHED and (is_true(jobset, "Completed") or finished == nodes):
        return out
    if finished:  # rank 0 may end first: the job succeeds with its last rank (the JobSet's success policy)
        out.update(state=RUNNING, message=f"{finished} of {nodes} ranks finished", finished=None)
        return out
    running = sum(1 for r in out["ranks"] if r["state"] == "running")
    if running == nodes:
        out["state"] = RESUMED if out["preempted"] else RUNNING
        if not out["cell"]:
            out["message"] = "starting the kernels"
        return out
    out["state"] = ADMITTED
    admitted = f"admitted to {out['cluster_queue']}; " if out["cluster_queue"] else "admitted; "
    out["message"] = admitted + f"{running} of {nodes} ranks running"
    return out
