"""The JobSet a `%gpu_submit --nodes N` creates, and its ConfigMap (pure; also `gpuhub render job --nodes N`).

One replicated job of N single-pod Jobs (one per node: the pods repel each other by hostname), built
from the same pod as a single-node job (`builders.jobs.job_parts`: tolerations, selectors, hardening,
the home share). The JobSet is suspended and labelled for the team's LocalQueue, so Kueue admits all
N pods at once or none. DNS hostnames are on (a headless Service named after the JobSet), so rank 0
has a stable name, `<jobset>-node-0-0.<jobset>`, and every rank gets torchrun's variables (contract).

Failure policy: a cell error (the runner's exit code, a pod failure policy rule) or the timeout fails
the whole JobSet at once; any other failed rank (evicted, preempted, node lost) fails its Job, and the
JobSet restarts every rank together, up to `backoff_limit` times; the notebook resumes from
CHECKPOINT_DIR, which all ranks share.
"""
from __future__ import annotations

import copy
from typing import Any

from jupyterhub_gpu.builders.jobs import (
    NOTEBOOK_FAILED_RULE,
    RUNNER_CONTAINER,
    JobParts,
    JobRequestError,
    JobSettings,
    job_name,
    job_parts,
)
from jupyterhub_gpu.contract import (
    ENV_LOCAL_RANK,
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_NODE_RANK,
    ENV_NPROC_PER_NODE,
    ENV_RANK,
    ENV_WORLD_SIZE,
    JOB_LABEL,
    JOBSET_API,
    JOBSET_JOB_INDEX,
    JOBSET_REPLICATED_JOB,
    MASTER_PORT,
)
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig

#: A JobSet's pods are named `<jobset>-node-<rank>-0-<5 random>`: within 63 characters for up to 100 ranks.
JOBSET_NAME_LIMIT = 40
#: Job failure reasons that end the whole JobSet instead of restarting it (see the module).
FAIL_REASONS = ("PodFailurePolicy", "DeadlineExceeded")


def jobset_name(user: str, notebook: str) -> str:
    return job_name(user, notebook, limit=JOBSET_NAME_LIMIT)


def master_addr(name: str) -> str:
    """Rank 0's stable hostname: `<pod hostname>.<subdomain>`, resolved in the namespace by the
    JobSet's headless Service (the pod hostname is `<jobset>-<replicatedJob>-<job index>-<pod index>`)."""
    return f"{name}-{JOBSET_REPLICATED_JOB}-0-0.{name}"


def rank_env(name: str, nodes: int, gpus_per_node: int) -> list[dict[str, Any]]:
    """torchrun's variables: fixed ones as values, the rank from the pod's JobSet job index (downward API)."""
    rank = {"valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{JOBSET_JOB_INDEX}']"}}}
    fixed = {ENV_MASTER_ADDR: master_addr(name), ENV_MASTER_PORT: str(MASTER_PORT), ENV_WORLD_SIZE: str(nodes),
             ENV_LOCAL_RANK: "0", ENV_NPROC_PER_NODE: str(gpus_per_node)}
    return [*({"name": k, "value": v} for k, v in fixed.items()),
            {"name": ENV_RANK, **rank}, {"name": ENV_NODE_RANK, **copy.deepcopy(rank)}]


def one_per_node(name: str) -> dict[str, Any]:
    """Ranks never share a node: each rank is a node's worth of GPUs, and torchrun counts nodes."""
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {JOB_LABEL: name}}, "topologyKey": "kubernetes.io/hostname"}]}}


def jobset_from_parts(parts: JobParts, nodes: int, gpus_per_node: int, settings: JobSettings) -> dict[str, Any]:
    template = parts.pod_template(settings)
    spec = template["spec"]
    runner = next(c for c in spec["containers"] if c["name"] == RUNNER_CONTAINER)
    runner["env"] = runner["env"] + rank_env(parts.name, nodes, gpus_per_node)
    spec["affinity"] = one_per_node(parts.name)
    child = {
        "parallelism": 1, "completions": 1, "completionMode": "Indexed",  # the pod's hostname: <job>-0
        "backoffLimit": 0,  # a failed rank fails its Job, and the JobSet's failure policy decides for the gang
        "activeDeadlineSeconds": parts.timeout,
        "podFailurePolicy": {"rules": [NOTEBOOK_FAILED_RULE]},
        "template": template,
    }
    return {
        "apiVersion": JOBSET_API, "kind": "JobSet",
        "metadata": {"name": parts.name, "namespace": parts.namespace, "labels": parts.queued_labels(),
                     "annotations": dict(parts.annotations)},
        "spec": {
            "suspend": True,
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": settings.backoff_limit, "restartStrategy": "Recreate", "rules": [
                {"name": "notebookFailedOrTimedOut", "action": "FailJobSet",
                 "onJobFailureReasons": list(FAIL_REASONS)}]},
            "successPolicy": {"operator": "All"},
            "ttlSecondsAfterFinished": 7 * 24 * 3600,
            # the child Jobs carry no job label: gpu-jobs lists the JobSet, not its ranks' Jobs
            "replicatedJobs": [{"name": JOBSET_REPLICATED_JOB, "replicas": nodes, "template": {
                "metadata": {"labels": {k: v for k, v in parts.labels.items() if k != JOB_LABEL}}, "spec": child}}],
        },
    }


def build_jobset(cfg: ProfilesConfig, profile: Profile, user: str, groups: list[str], notebook_path: str,
                 notebook: dict[str, Any], nodes: int, parameters: dict[str, Any] | None = None,
                 priority: str | None = None, timeout: int | None = None, settings: JobSettings = JobSettings(),
                 name: str | None = None, options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """[JobSet, ConfigMap] for a submission on `nodes` nodes (checked by the caller: model/multinode.py)."""
    if name is not None and len(name) > JOBSET_NAME_LIMIT:
        raise JobRequestError(f"a multi-node job's name has at most {JOBSET_NAME_LIMIT} characters "
                              "(its pods are named after it)")
    name = name or jobset_name(user, notebook_path)
    parts = job_parts(cfg, profile, user, groups, notebook_path, notebook, parameters, priority, timeout, settings,
                      name, options)
    return [jobset_from_parts(parts, nodes, profile.gpu.count, settings), parts.config_map]
