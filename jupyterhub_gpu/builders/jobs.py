"""The Job a `%gpu_submit` creates, and the ConfigMap it needs (pure; also `gpuhub render job`).

A suspended batch/v1 Job in the user's team namespace, queued in the team's LocalQueue, with the
profile's GPU, pool and tolerations (the same builders the spawner uses). Its pod mounts the user's
home from the shared home share (`builders.storage`) at the same path as the user's server, runs in
the notebook's folder, and writes `~/gpu-jobs/<job>/` (output notebook, `checkpoint/`). The notebook
snapshot (outputs stripped, gzip) is in a ConfigMap that the service makes owned by the Job. It mounts the
datasets its server would (`builders.datasets`), read-only at the same paths.
"""
from __future__ import annotations

import base64
import copy
import gzip
import json
import posixpath
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from kubespawner.slugs import safe_slug

from jupyterhub_gpu.builders import dra
from jupyterhub_gpu.builders import pods as podspec
from jupyterhub_gpu.builders.datasets import pod_datasets
from jupyterhub_gpu.builders.hardening import DEFAULT_EPHEMERAL_STORAGE, harden
from jupyterhub_gpu.builders.identity import pod_identity, with_identity
from jupyterhub_gpu.builders.kueue import local_queue_name
from jupyterhub_gpu.builders.storage import HomeStorage, StorageError, home_folder_container, job_home
from jupyterhub_gpu.contract import (
    CHECKPOINTS_FOLDER,
    ENV_CHECKPOINT_DIR,
    ENV_JOB,
    ENV_NOTEBOOK_NAME,
    ENV_OUTPUT_DIR,
    ENV_PARAMETERS,
    ENV_SNAPSHOT,
    JOB_LABEL,
    JOBS_FOLDER,
    NOTEBOOK_ANNOTATION,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    USER_ANNOTATION,
    USER_LABEL,
    RunnerExit,
)
from jupyterhub_gpu.model import quantities
from jupyterhub_gpu.model.choices import ChoiceError, check_options, choose_profile
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig

RUNNER_CONTAINER = "runner"
#: A ConfigMap holds at most 1 MiB; keep room for metadata.
MAX_SNAPSHOT_BYTES = 900 * 1024
PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: A Job's name: its pods (`<job>-<5 random>`) stay within 63 characters.
JOB_NAME_LIMIT = 52


class JobRequestError(ValueError):
    """A submission that must be refused before anything is created; the message says why and the limit."""


@dataclass(frozen=True)
class JobSettings:
    runner_image: str = "jupyterhub-gpu/runner:latest"
    home: HomeStorage = HomeStorage()
    #: Added to every Job pod's labels (e.g. for cost allocation, or a policy that selects them).
    pod_labels: dict[str, str] = field(default_factory=dict)
    termination_grace_seconds: int = 600
    backoff_limit: int = 3
    default_timeout: int = 2 * 3600
    max_timeout: int = 7 * 24 * 3600
    ephemeral_storage: str = DEFAULT_EPHEMERAL_STORAGE


def strip_outputs(nb: dict[str, Any]) -> dict[str, Any]:
    """The snapshot keeps code and markdown, not outputs: smaller, and no stale results in the run."""
    nb = copy.deepcopy(nb)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return nb


def compress_notebook(nb: dict[str, Any]) -> bytes:
    data = gzip.compress(json.dumps(strip_outputs(nb), separators=(",", ":")).encode(), mtime=0)
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise JobRequestError(f"the notebook is {len(data) / 1024:.0f} KiB after removing outputs and compressing; "
                              f"the limit is {MAX_SNAPSHOT_BYTES // 1024} KiB. Move data out of the notebook "
                              "(read it from storage instead) and submit again.")
    return data


def check_parameters(params: dict[str, Any]) -> None:
    bad = [k for k in params if not isinstance(k, str) or not PARAM_NAME.fullmatch(k) or k.startswith("__")]
    if bad:
        raise JobRequestError(f"parameter name(s) {', '.join(map(repr, bad))} are not Python identifiers; "
                              "use names like learning_rate or epochs")
    try:
        json.dumps(params)
    except (TypeError, ValueError):
        raise JobRequestError("parameter values must be JSON values (numbers, strings, lists, ...)") from None


def job_name(user: str, notebook: str, limit: int = JOB_NAME_LIMIT, suffix: str | None = None) -> str:
    """Unique, valid DNS-1123 label: gpu-<user>-<notebook>-<random> in at most `limit` characters, so the
    pods Kubernetes names after it stay within 63. `suffix` (6 lowercase hex digits) instead of the random
    part: a retried submission's name (services/jobs/idempotency.py)."""
    stem = re.sub(r"\.ipynb$", "", notebook.rsplit("/", 1)[-1])
    base = safe_slug(f"{user}-{stem}", max_length=38).replace("---", "-")[:limit - 11].strip("-")
    if suffix is not None and not re.fullmatch(r"[0-9a-f]{6}", suffix):
        raise ValueError(f"a job name's suffix is 6 lowercase hex digits, not {suffix[:20]!r}")
    return f"gpu-{base}-{suffix or secrets.token_hex(3)}"[:limit].strip("-")


def notebook_folder(notebook_path: str) -> str:
    """The notebook's folder relative to home ("" for home itself); a path that leaves home is refused."""
    norm = posixpath.normpath(notebook_path)
    if notebook_path.startswith("/") or norm == ".." or norm.startswith("../") or "\0" in notebook_path:
        raise JobRequestError(f"notebook_path {notebook_path!r} must be relative to your home folder, inside it")
    folder = posixpath.dirname(norm)
    return "" if folder in ("", ".") else folder


@dataclass(frozen=True)
class JobParts:
    """What a single-node Job and a multi-node JobSet share: the checked request, the pod, the snapshot."""

    name: str
    namespace: str
    team: str
    priority: str
    timeout: int
    labels: dict[str, str]
    annotations: dict[str, str]
    pod_spec: dict[str, Any]
    config_map: dict[str, Any]
    #: The pod's own labels beyond `labels` (the team's workload identity: `builders.identity`).
    pod_only_labels: dict[str, str] = field(default_factory=dict)

    def pod_template(self, settings: JobSettings) -> dict[str, Any]:
        return {"metadata": {"labels": {**settings.pod_labels, **self.labels, **self.pod_only_labels},
                             "annotations": dict(self.annotations)},
                "spec": copy.deepcopy(self.pod_spec)}

    def queued_labels(self) -> dict[str, str]:
        """The labels of the object Kueue admits: the team's LocalQueue and the priority."""
        return {**self.labels, QUEUE_LABEL: local_queue_name(self.team), PRIORITY_LABEL: self.priority}


#: The runner's exit on a cell error fails the Job at once: retrying will not help.
NOTEBOOK_FAILED_RULE = {"action": "FailJob", "onExitCodes": {"containerName": RUNNER_CONTAINER, "operator": "In",
                                                             "values": [int(RunnerExit.NOTEBOOK_FAILED)]}}


def job_parts(cfg: ProfilesConfig, profile: Profile, user: str, groups: list[str], notebook_path: str,
              notebook: dict[str, Any], parameters: dict[str, Any] | None = None, priority: str | None = None,
              timeout: int | None = None, settings: JobSettings = JobSettings(),
              name: str | None = None, options: dict[str, Any] | None = None) -> JobParts:
    """Check a submission and build its pod and snapshot ConfigMap, or JobRequestError saying why not."""
    try:  # callers choose first; checked again here because this builds what runs on the GPU
        choose_profile(cfg, user, groups, profile.slug, gpu=True)
        image = check_options(profile, user, groups, {} if options is None else options).image
    except ChoiceError as e:
        raise JobRequestError(str(e)) from None
    team = cfg.team_for(groups)
    if team is None:
        raise JobRequestError(f"{user} is in no team (groups: {', '.join(groups) or 'none'}) and the profiles file "
                              "has no default team; ask an admin to add you to a team's group")
    team_name, team_cfg = team
    priority = priority or cfg.effective_priority(profile)  # always explicit: none would rank below `low`
    if priority and priority not in cfg.priorities:
        raise JobRequestError(f"priority {priority!r} does not exist; choose one of {', '.join(cfg.priorities)}")
    limit = min(profile.max_job_timeout or settings.max_timeout, settings.max_timeout)
    timeout = timeout or min(settings.default_timeout, limit)
    if not 60 <= timeout <= limit:
        raise JobRequestError(f"timeout {timeout} s is out of bounds for {profile.slug!r}: between 60 s and {limit} s")
    parameters = parameters or {}
    check_parameters(parameters)
    folder = notebook_folder(notebook_path)
    snapshot = compress_notebook(notebook)
    name = name or job_name(user, notebook_path)
    nb_name = re.sub(r"\.ipynb$", "", notebook_path.rsplit("/", 1)[-1]) or "notebook"
    ns = team_cfg.namespace
    labels = {**podspec.labels(profile), USER_LABEL: safe_slug(user, max_length=63), JOB_LABEL: name}
    annotations = {USER_ANNOTATION: user, NOTEBOOK_ANNOTATION: notebook_path}
    gpus = podspec.gpu_resources(cfg, profile)
    res = {"cpu": quantities.cpu(profile.cpu), "memory": str(profile.memory_limit),
           **{k: str(v) for k, v in gpus.items()}}
    try:
        home_volume, home_mount = job_home(settings.home, user)
    except StorageError as e:
        raise JobRequestError(str(e)) from None
    home = settings.home.mount_path.rstrip("/")
    out_dir = f"{home}/{JOBS_FOLDER}/{name}"
    env = {**podspec.environment(cfg, profile), "HOME": home, ENV_CHECKPOINT_DIR: f"{out_dir}/{CHECKPOINTS_FOLDER}",
           ENV_OUTPUT_DIR: out_dir, ENV_SNAPSHOT: "/snapshot/notebook.gz", ENV_NOTEBOOK_NAME: nb_name,
           ENV_PARAMETERS: json.dumps(parameters), ENV_JOB: name}
    # an MPS pod's /dev/shm is the device plugin's (the node's MPS daemon talks through it), never its own
    shm_mounts, shm_volumes = ([podspec.shm_mount()], [podspec.shm_volume(profile)]) if profile.own_shm else ([], [])
    data_volumes, data_mounts, data_env = pod_datasets(cfg, profile, groups)  # exactly its server's datasets
    env.update(data_env)
    pod_spec = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": settings.termination_grace_seconds,
        "nodeSelector": podspec.node_selector(cfg, profile),
        "tolerations": podspec.tolerations(cfg, profile),
        "containers": [{
            "name": RUNNER_CONTAINER, "image": image or settings.runner_image,
            "args": ["gpuhub-runner"],  # args, not command: the image's tini entrypoint stays PID 1
            "workingDir": posixpath.join(home, folder) if folder else home,  # as in JupyterLab: relative paths work
            "env": [{"name": k, "value": v} for k, v in env.items()] + [
                {"name": k, **v} for k, v in podspec.NODE_NAME_ENV.items()],
            "resources": {"requests": res, "limits": dict(res)},
            "volumeMounts": shm_mounts + [{"name": "snapshot", "mountPath": "/snapshot", "readOnly": True},
                                          home_mount] + data_mounts,
        }],
        "volumes": shm_volumes + [{"name": "snapshot", "configMap": {"name": name, "items": [
            {"key": "notebook.gz", "path": "notebook.gz"}]}}, home_volume] + data_volumes,
    }
    if dra.uses_dra(cfg, profile):  # its GPUs as a claim per pod (per rank of a JobSet), from the team's template
        pod_spec["resourceClaims"], pod_spec["containers"][0]["resources"]["claims"] = dra.pod_claims(
            dra.job_template_name(profile))
    pod_spec = harden(pod_spec, settings.ephemeral_storage)  # Pod Security `restricted`, bounded scratch disk
    if make_home := home_folder_container(pod_spec["containers"][0], pod_spec["volumes"]):  # a first job's home
        pod_spec["initContainers"] = [make_home]
    ident = pod_identity(cfg, groups)  # the user's team's (team_for, as above), never another's
    if ident is not None:
        pod_spec = with_identity(pod_spec, ident)
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": name, "namespace": ns, "labels": dict(labels),
                               "annotations": dict(annotations)},
                  "binaryData": {"notebook.gz": base64.b64encode(snapshot).decode()}}
    return JobParts(name, ns, team_name, priority, timeout, labels, annotations, pod_spec, config_map,
                    ident.labels if ident else {})


def build_job(cfg: ProfilesConfig, profile: Profile, user: str, groups: list[str], notebook_path: str,
              notebook: dict[str, Any], parameters: dict[str, Any] | None = None, priority: str | None = None,
              timeout: int | None = None, settings: JobSettings = JobSettings(),
              name: str | None = None, options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """[Job, ConfigMap] for one submission, or JobRequestError saying why not. `options`: the profile's option
    choices (as a server's user_options); the job runs in the image they choose, like the server."""
    parts = job_parts(cfg, profile, user, groups, notebook_path, notebook, parameters, priority, timeout, settings,
                      name, options)
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": parts.name, "namespace": parts.namespace, "labels": parts.queued_labels(),
                     "annotations": dict(parts.annotations)},
        "spec": {
            "suspend": True,
            "activeDeadlineSeconds": parts.timeout,
            "backoffLimit": settings.backoff_limit,
            "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                NOTEBOOK_FAILED_RULE,
            ]},
            "ttlSecondsAfterFinished": 7 * 24 * 3600,
            "template": parts.pod_template(settings),
        },
    }
    return [job, parts.config_map]
