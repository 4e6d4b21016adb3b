"""The gpu-jobs API's answers as models, spelled once: the service builds every answer through them (a key it
forgets or misspells is an error there, not a silent change on the wire), and the JupyterLab extension's
types are generated from their JSON schema (`python -m jupyterhub_gpu.tools.wire_types`; a unit test fails
when the committed file is behind).

Contract layer: the standard library, pydantic and `jupyterhub_gpu.contract` only. Fields without a default
are in every answer; those with one appear only where the service has them (`dump` keeps that: a key is
sent exactly when it was given).
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from jupyterhub_gpu.contract import JobState


class Wire(BaseModel):
    """No key beyond the fields: a renamed one fails where the answer is built."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


def dump(model: type[Wire], data: dict[str, Any]) -> dict[str, Any]:
    """`data`, checked against `model` and sent as it is (the same keys; a re-dump through the model would
    double the cost of an admin's list of 10,000 jobs: 122 ms against 55 ms to validate alone)."""
    model.__pydantic_validator__.validate_python(data)
    return data


class CellProgress(Wire):
    """The runner's last progress line: cell `cell` of `of`, running since `since` (HH:MM:SS)."""

    cell: int
    of: int
    since: str


class Throughput(Wire):
    """A running job's training speed from the notebook's own `gpuhub.report()` calls (model/throughput.py)."""

    step: int | None
    total_steps: int | None
    samples: int | None
    """Samples processed so far (cumulative)."""
    loss: float | None
    reported_at: float
    """The newest report's time (Unix seconds)."""
    samples_per_s: float | None
    """Over the last few minutes of reports (None: fewer than two, or no samples reported)."""
    step_s: float | None
    """Seconds per step, over the same reports."""
    eta_s: float | None
    """Seconds until `total_steps` at that pace."""


class RankStatus(Wire):
    """One rank of a multi-node job; `state`: waiting, starting, running, stopping, succeeded, failed (else
    the pod's own phase)."""

    rank: int
    state: str
    pod: str | None
    node: str | None


class JobStatus(Wire):
    """One job's status (GET /jobs/{name}, each entry of GET /jobs, the answer to POST /jobs)."""

    name: str
    namespace: str | None
    user: str | None
    notebook: str | None
    """The submitted notebook's path, relative to the user's server root."""
    profile: str | None
    created: str | None
    state: JobState
    cell: CellProgress | None
    """Where a running job is (None: not running, or no progress line yet)."""
    throughput: Throughput | None = None
    """A running job's training speed, when its notebook reports it."""
    message: str
    """Plain words for people (a queued job's Kueue reason told for its team and place in the queue)."""
    queue: str | None = None
    """The team's LocalQueue."""
    priority: str | None = None
    started: str | None = None
    finished: str | None = None
    preempted: int = 0
    """How often the job was interrupted (preempted, evicted) and resumed."""
    position: int | None = None
    """A queued job's 1-based place among the pending jobs of its queue."""
    queue_length: int | None = None
    eta_p50_s: int | None = None
    """The queue ETA in seconds, median (None: history too thin)."""
    eta_p90_s: int | None = None
    eta_samples: int | None = None
    """How many past admissions the ETA rests on."""
    kueue_message: str | None = None
    """Kueue's own words for a queued job; shown only under "details"."""
    kueue_reason: str | None = None
    pod: str | None = None
    """The newest pod (a multi-node job: rank 0's)."""
    node: str | None = None
    cluster_queue: str | None = None
    nodes: int | None = None
    """A multi-node job's node count (absent for a single-node job)."""
    restarts: int | None = None
    """A multi-node job's gang restarts."""
    ranks: list[RankStatus] | None = None
    stale: bool | None = None
    """True when the cluster does not answer: the last known state, as of `as_of`."""
    as_of: str | None = None


class JobList(Wire):
    """GET /jobs: newest first."""

    jobs: list[JobStatus]


class Cancelled(Wire):
    """DELETE /jobs/{name}."""

    name: str
    cancelled: bool


class ProfileEntry(Wire):
    """One GPU profile the caller may submit to, with its queue length and free quota."""

    slug: str
    display_name: str
    description: str
    gpus: int
    gpu_label: str
    """What one job gets, e.g. "¼ T4 (time-sliced)"."""
    resource: str | None
    pool: str | None
    priority: str
    max_per_user: int | None
    max_nodes: int
    priorities: list[str]
    max_timeout: int
    free: int | None
    queued: int | None


class Profiles(Wire):
    """GET /profiles."""

    user: str
    team: str | None
    profiles: list[ProfileEntry]
    priorities: list[str]
    max_jobs_per_user: int | None


class LabJob(JobStatus):
    """A job as the single-user server's gpuhub routes give it to JupyterLab: the status, with where its
    output notebook lands and the status widget's one-line summary."""

    output_path: str
    summary: str


class LabJobList(Wire):
    """GET <base>/gpuhub/jobs."""

    jobs: list[LabJob]


#: What the TypeScript generator writes, in this order.
MODELS: tuple[type[Wire], ...] = (CellProgress, Throughput, RankStatus, JobStatus, JobList, Cancelled, ProfileEntry,
                                  Profiles, LabJob, LabJobList)
