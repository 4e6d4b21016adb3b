"""What separate processes must agree on, spelled once: the hub, the `gpu-jobs` service, the culler, the
kernel extension, the runner inside a Job's pod and the dev cluster all import their keys from here.

Standard library only: the kernel and the runner import it without pulling in the hub.
"""
from __future__ import annotations

import os
import re
from enum import IntEnum, StrEnum

# ---------------------------------------------------------------------- labels and annotations
LABEL_PREFIX = "gpuhub.io"
PROFILE_LABEL = f"{LABEL_PREFIX}/profile"
POOL_LABEL = f"{LABEL_PREFIX}/pool"
GPU_KIND_LABEL = f"{LABEL_PREFIX}/gpu-kind"
TEAM_LABEL = f"{LABEL_PREFIX}/team"
#: A DNS-safe slug of the user name (selectors); the exact name is in USER_ANNOTATION.
USER_LABEL = f"{LABEL_PREFIX}/user"
#: Set on a `%gpu_submit` Job, its pods and its ConfigMap; the value is the Job's name.
JOB_LABEL = f"{LABEL_PREFIX}/job"
USER_ANNOTATION = f"{LABEL_PREFIX}/username"
#: On a Job / JobSet and its ConfigMap made under an `Idempotency-Key`: a hash of (user, key), so a retry finds
#: the job it made (services/jobs/idempotency.py); the body's digest tells a retry from a reused key.
SUBMISSION_LABEL = f"{LABEL_PREFIX}/submission"
#: The digest of the request an object was made from: a keyed Job's body; a queued server pod's manifest
#: without its token (hub/queued_pod.py: the next start after a hub restart keeps that pod and its place).
REQUEST_DIGEST_ANNOTATION = f"{LABEL_PREFIX}/request-digest"
NOTEBOOK_ANNOTATION = f"{LABEL_PREFIX}/notebook"
GPU_RESOURCE_ANNOTATION = f"{LABEL_PREFIX}/gpu-resource"
GPU_COUNT_ANNOTATION = f"{LABEL_PREFIX}/gpu-count"
#: A node that says it has no real GPUs behind it (KWOK nodes of the dev cluster): `gpuhub doctor`
#: reports its device plugin as simulated instead of missing.
SIMULATED_NODE_LABEL = f"{LABEL_PREFIX}/simulated"
MANAGED_BY = {"app.kubernetes.io/managed-by": "jupyterhub-gpu"}
#: On a server pod of a `preemptible: true` profile that waits in its team's queue ("true"): a training job of
#: the team may preempt it (the dev agent plays the kubelet's grace period for it, as for Job pods).
PREEMPTIBLE_LABEL = f"{LABEL_PREFIX}/preemptible"
#: Set by the Job controller on a Job's pods.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"

# ---------------------------------------------------------------------- Kueue
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_API = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
QUEUE_LABEL = f"{KUEUE_GROUP}/queue-name"
PRIORITY_LABEL = f"{KUEUE_GROUP}/priority-class"
#: The scheduling gate Kueue's pod integration puts on a pod carrying QUEUE_LABEL until it admits it.
KUEUE_ADMISSION_GATE = f"{KUEUE_GROUP}/admission"
#: The pod condition Kueue's pod integration sets, with the reason (`WorkloadEvictedDueToPreempted`, ...) and its
#: message, right before it deletes a pod whose Workload it evicted or stopped.
KUEUE_TERMINATION_TARGET = "TerminationTarget"

# ---------------------------------------------------------------------- JobSet (multi-node jobs)
JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_API = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
#: Set by the JobSet controller on its Jobs and pods (labels and annotations).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
#: The one replicated job of a multi-node job: its pods are `<jobset>-node-<rank>-0`.
JOBSET_REPLICATED_JOB = "node"

# ---------------------------------------------------------------------- hub services
JOBS_SERVICE = "gpu-jobs"
CULLER_SERVICE = "gpu-culler"
#: The showback page (a hub service) and the usage collector (a hub-managed process, no page).
USAGE_SERVICE = "gpu-usage"
USAGE_COLLECTOR_SERVICE = "gpu-usage-collector"
#: The ports the services listen on (the NetworkPolicies and the gpu-jobs Service open exactly these):
#: gpu-jobs, the culler, the showback page and the admins' console (the last three in the hub pod).
JOBS_PORT = 10101
CULLER_PORT = 10102
USAGE_PORT = 10103
ADMIN_PORT = 10104
#: gpu-jobs' per-job training-throughput series for Prometheus (`--metrics-port`; deploy/gpu-jobs.yaml): a port of its
#: own, never routed by the proxy, since the series name users and their jobs.
JOBS_METRICS_PORT = 9403
#: The metrics port's bearer token (deploy/gpu-jobs.yaml: from the Secret gpu-jobs-metrics-token, if present);
#: without one the port listens on loopback only (services/metrics_auth.py).
JOBS_METRICS_TOKEN_ENV = "GPUHUB_JOBS_METRICS_TOKEN"
#: The header of `POST /jobs` that makes a retried submission return the job it made (a fresh key per submission,
#: the same key on the client's own retries): the kernel's client, the lab routes and gpu-jobs send or read it.
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
#: Its syntax: what a UUID or `secrets.token_urlsafe` gives, bounded.
IDEMPOTENCY_KEY_RE = re.compile(r"[A-Za-z0-9_-]{8,64}")
#: What a user's token (and the server token a kernel sees) needs to call gpu-jobs.
JOBS_ACCESS_SCOPE = f"access:services!service={JOBS_SERVICE}"
#: Hub API scopes of gpu-jobs' own token: none. It learns who calls from the caller's own token
#: (GET /hub/api/user answers name, groups and admin flag to any token), never by looking a name up.
JOBS_SERVICE_SCOPES: tuple[str, ...] = ()
#: The single-user server's own routes for the JupyterLab extension (jupyterhub_gpu/singleuser/server.py), under its
#: base URL: the browser calls these; the server calls gpu-jobs and the culler with its own hub token.
LAB_API_PREFIX = "gpuhub"
#: Comm target the JupyterLab extension opens on each notebook kernel, so `%gpu_submit` can ask it to save.
LAB_COMM_TARGET = "gpuhub.frontend"

# ---------------------------------------------------------------------- environment variables
ENV_PROFILES = "GPUHUB_PROFILES"              # the profiles file (hub, services, CLI)
ENV_PROFILE = "GPUHUB_PROFILE"                # a server's or job's profile slug
#: a server's option choices (user_options as a query string), for %gpu_submit
ENV_PROFILE_OPTIONS = "GPUHUB_PROFILE_OPTIONS"
#: KubeSpawner's user_options key for a typed (unlisted) choice: `<option>--unlisted-choice`.
UNLISTED_CHOICE_SUFFIX = "--unlisted-choice"
ENV_POOL = "GPUHUB_POOL"
ENV_GPU_KIND = "GPUHUB_GPU_KIND"
ENV_GPU_COUNT = "GPUHUB_GPU_COUNT"
ENV_GPU_RESOURCE = "GPUHUB_GPU_RESOURCE"
ENV_MIG_PROFILE = "GPUHUB_MIG_PROFILE"
#: Set on a pod whose GPUs come through DRA (a ResourceClaim, builders/dra.py): what its claim may be allocated, in
#: order, as `<kind>:<count>[:<MIG slice>]` joined by spaces (`full:1`; a server with alternatives `full:1
#: mig:1:3g.40gb`). The GPU check counts the devices the claim put in the container against it: the NVIDIA DRA
#: driver's CDI spec sets NVIDIA_VISIBLE_DEVICES=void, so that variable names no device there.
ENV_DRA_DEVICES = "GPUHUB_DRA_DEVICES"
ENV_NODE_NAME = "GPUHUB_NODE_NAME"
ENV_DEVICE_ROOT = "GPUHUB_DEVICE_ROOT"        # where the GPU check looks for /dev/nvidia*
ENV_TERMINATION_LOG = "GPUHUB_TERMINATION_LOG"
#: What the GPU check reads of the server container's env; nothing else goes to its init container (no token).
#: An option's `environment` may set none of these, nor any GPUHUB_* or NVIDIA_* (model/profiles.py).
GPU_CHECK_ENV = frozenset({ENV_GPU_KIND, ENV_GPU_COUNT, ENV_GPU_RESOURCE, ENV_MIG_PROFILE, ENV_NODE_NAME,
                           ENV_DRA_DEVICES, "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
                           "CUDA_VISIBLE_DEVICES"})
ENV_JOBS_URL = "GPUHUB_JOBS_URL"              # where kernels reach the gpu-jobs service
ENV_CULLER_URL = "GPUHUB_CULLER_URL"          # where the server reaches the culler (default: beside gpu-jobs)
#: Set on a preemptible server: its pod's grace period in seconds, the time it has after SIGTERM to warn the open
#: JupyterLab and let it save (jupyterhub_gpu/singleuser/stopping.py).
ENV_PREEMPTION_GRACE = "GPUHUB_PREEMPTION_GRACE_S"
#: The hub API where the hub listens, for the services it runs in its own pod. JupyterHub hands them its
#: connect URL (z2jh: http://hub:8081/hub/api, the hub Service), which z2jh's hub NetworkPolicy does not admit
#: from the hub pod itself; each such service adopts this one instead (`adopt_hub_api_url`).
ENV_HUB_API_URL = "GPUHUB_HUB_API_URL"


def adopt_hub_api_url(environ=None) -> None:
    """Make $GPUHUB_HUB_API_URL, when configure(c) set it, this process's $JUPYTERHUB_API_URL (what HubAuth and
    jupyterhub-idle-culler read); call before importing either."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV_HUB_API_URL):
        environ["JUPYTERHUB_API_URL"] = environ[ENV_HUB_API_URL]


ENV_JOB = "GPUHUB_JOB"                        # set inside a running Job: %gpu_submit does nothing there
ENV_SNAPSHOT = "GPUHUB_SNAPSHOT"
ENV_NOTEBOOK_NAME = "GPUHUB_NOTEBOOK_NAME"
ENV_PARAMETERS = "GPUHUB_PARAMETERS"
ENV_KERNEL = "GPUHUB_KERNEL"
ENV_CHECKPOINT_DIR = "CHECKPOINT_DIR"
#: Inside a running Job: where `gpuhub.report()` writes the notebook's latest progress report (a private file of
#: the runner's, which prints it into the job's log; jupyterhub_gpu/reports.py).
ENV_PROGRESS_FILE = "GPUHUB_PROGRESS_FILE"
ENV_OUTPUT_DIR = "OUTPUT_DIR"
# A multi-node job's ranks (`%gpu_submit --nodes N`): torchrun's names, one notebook process per node.
ENV_MASTER_ADDR = "MASTER_ADDR"               # rank 0's stable hostname (the JobSet's headless service)
ENV_MASTER_PORT = "MASTER_PORT"
ENV_WORLD_SIZE = "WORLD_SIZE"                 # the number of nodes (= notebook processes)
ENV_RANK = "RANK"                             # this node's index, 0..WORLD_SIZE-1
ENV_NODE_RANK = "NODE_RANK"                   # the same (torchrun --node_rank)
ENV_LOCAL_RANK = "LOCAL_RANK"                 # 0: one notebook process per node
ENV_NPROC_PER_NODE = "NPROC_PER_NODE"         # GPUs per node (torchrun --nproc_per_node)
MASTER_PORT = 29500                           # torch.distributed's usual port


# ---------------------------------------------------------------------- runner exit codes
class RunnerExit(IntEnum):
    """How `gpuhub-runner` ends; the Job's pod failure policy and the job status read these."""

    OK = 0
    NOTEBOOK_FAILED = 3   # a cell raised: retrying will not help (FailJob)
    INFRASTRUCTURE = 4    # kernel died, input unreadable, output unwritable: the Job retries
    TERMINATED = 143      # SIGTERM (preemption, eviction, cancel): partial output saved, a new pod resumes


#: `gpuhub-singleuser` exits with this when the GPU it was given is missing.
GPU_CHECK_FAILED = 3
#: The init container of a GPU server's pod that runs the check alone (`gpuhub-singleuser --gpu-check-only`),
#: with no home mounted: the only GPU-check verdict the hub records against a node.
GPU_CHECK_CONTAINER = "gpuhub-gpu-check"
GPU_CHECK_ONLY = "--gpu-check-only"
#: The init container that creates a pod's home folder on the share as the pod's own user (builders/storage.py).
HOME_FOLDER_CONTAINER = "gpuhub-home-folder"

# ---------------------------------------------------------------------- job states (gpu-jobs → widgets)
class JobState(StrEnum):
    """A job's `state` on the wire; jupyterhub_gpu/wire.py models the rest of its status.

    Members are the strings themselves: they compare and serialise as their values."""

    QUEUED = "Queued"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    RESUMED = "Preempted-and-resumed"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    #: Never sent by the service: a cancelled job is gone from the cluster, so only a client knows it.
    CANCELLED = "Cancelled"
    #: A job whose status could not be derived (listed with its metadata only).
    UNKNOWN = "Unknown"


QUEUED, ADMITTED, RUNNING, RESUMED = JobState.QUEUED, JobState.ADMITTED, JobState.RUNNING, JobState.RESUMED
SUCCEEDED, FAILED, CANCELLED, UNKNOWN = JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.UNKNOWN
#: States the service reports for a Job that exists.
JOB_STATES = (QUEUED, ADMITTED, RUNNING, RESUMED, SUCCEEDED, FAILED)
FINISHED = (SUCCEEDED, FAILED)
#: What a client may show: a cancelled job is gone from the cluster, so only the client knows it.
CLIENT_FINAL = (SUCCEEDED, FAILED, CANCELLED)
#: States whose pod has run: its log and output notebook are worth showing.
HAS_RUN = (RUNNING, RESUMED, SUCCEEDED, FAILED)

# ---------------------------------------------------------------------- the runner's progress lines
PROGRESS_TAG = "[gpuhub-runner]"
#: Bounded: ASCII digits only, at most 6 per number (a job can print anything; int() refuses 4,300 digits).
PROGRESS_RE = re.compile(r"\[gpuhub-runner\] ([0-9]{2}:[0-9]{2}:[0-9]{2}) cell ([0-9]{1,6})/([0-9]{1,6}) running")


def progress_line(message: str, clock: str) -> str:
    """`[gpuhub-runner] 12:03:04 cell 3/7 running`: what the runner prints and the service parses."""
    return f"{PROGRESS_TAG} {clock} {message}"


def cell_progress(cell: int, total: int) -> str:
    return f"cell {cell}/{total} running"

# ---------------------------------------------------------------------- storage
#: Where the singleuser and runner images keep the user's home; servers and Jobs mount it here.
HOME_DIR = "/home/jovyan"
#: On a claim of the shared home share (hub namespace and each team namespace): the claim a Job mounts
#: must carry it, so a claim someone else made under that name is never used.
HOME_SHARE_LABEL = f"{LABEL_PREFIX}/home-share"
#: Inside the user's home: one folder per job, with the output notebook and a `checkpoint` folder (not
#: "checkpoints": Jupyter's contents API reserves `<path>/checkpoints`, so JupyterLab could not open it).
JOBS_FOLDER = "gpu-jobs"
CHECKPOINTS_FOLDER = "checkpoint"
#: Read-only datasets of the profiles file: servers and Jobs mount each at DATASETS_DIR/NAME, and get the folder
#: in ENV_DATASETS (only when they have a dataset); the claims and volumes of a dataset carry DATASET_LABEL=NAME.
DATASETS_DIR = "/datasets"
ENV_DATASETS = "GPUHUB_DATASETS"
DATASET_LABEL = f"{LABEL_PREFIX}/dataset"


def output_notebook_path(job: str, notebook: str | None) -> str:
    """Where a job's output notebook lands, relative to the user's home (the runner writes it there)."""
    return f"{JOBS_FOLDER}/{job}/{str(notebook or 'notebook.ipynb').rsplit('/', 1)[-1]}"


# ---------------------------------------------------------------------- notifications outside JupyterLab
#: What a user may ask to be told about (gpu-jobs' /notifications preferences; the culler forwards warnings).
NOTIFY_ADMITTED, NOTIFY_PREEMPTED, NOTIFY_RESUMED = "admitted", "preempted", "resumed"
NOTIFY_SUCCEEDED, NOTIFY_FAILED, NOTIFY_CULL_WARNING = "succeeded", "failed", "cull-warning"
NOTIFY_EVENTS = (NOTIFY_ADMITTED, NOTIFY_PREEMPTED, NOTIFY_RESUMED, NOTIFY_SUCCEEDED, NOTIFY_FAILED,
                 NOTIFY_CULL_WARNING)
#: The e-mail channel's name in a user's preferences (webhook channels are named by the admin).
NOTIFY_EMAIL = "email"
#: Where the culler posts new cull warnings on gpu-jobs (with its own service token).
NOTIFY_CULL_PATH = "notifications/cull-warnings"

