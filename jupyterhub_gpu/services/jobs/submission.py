"""A submission request → the manifests to create, or a `JobRequestError` (a 4xx) saying why not (pure).

Every check runs before anything is created: the profile exists and the user's groups allow it, it
has a GPU and the requested GPU count is the profile's, `nodes` is 1 or within the profile's `max_nodes`
and the team's quota (model/multinode.py), the user's active jobs on it stay within `max_per_user` and
the user's jobs overall `max_jobs_per_user`, the priority is within the user's ceiling, the notebook
path stays in home, the timeout is within bounds, the parameters are identifiers with JSON values
within their size limits (`limits`), the snapshot fits in a ConfigMap.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from jupyterhub_gpu.builders.jobs import JOB_NAME_LIMIT, JobRequestError, JobSettings, build_job, job_name
from jupyterhub_gpu.builders.jobsets import JOBSET_NAME_LIMIT, build_jobset
from jupyterhub_gpu.model.choices import ChoiceError, choose_profile
from jupyterhub_gpu.model.multinode import check_nodes
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig, duration_seconds
from jupyterhub_gpu.services.jobs import idempotency, limits

FIELDS = {"profile", "notebook_path", "notebook", "parameters", "priority", "timeout", "gpus", "name", "options",
          "nodes"}


@dataclass(frozen=True)
class ServiceSettings:
    job: JobSettings = field(default_factory=JobSettings)
    #: Unfinished jobs one user may have over all profiles (0: no limit); see options.GPUJobs.max_jobs_per_user.
    max_jobs_per_user: int = 10
    #: Submissions of one user being read, checked or created at once; see options.GPUJobs.submissions_in_flight.
    submissions_in_flight: int = 2


def parse_timeout(value: Any) -> int | None:
    if value in (None, ""):
        return None
    try:
        return duration_seconds(value)
    except ValueError as e:
        raise JobRequestError(f"timeout: {e}") from None


def check_priority(cfg: ProfilesConfig, profile: Profile, groups: list[str], priority: Any) -> str:
    """The job's priority: the one asked for, if it exists and is within the user's ceiling on this
    profile (`max_priority`, `group_max_priority`), else the profile's (always explicit)."""
    if priority in (None, ""):
        return cfg.effective_priority(profile)
    allowed = cfg.allowed_priorities(profile, groups)
    if not isinstance(priority, str) or priority not in cfg.priorities:
        shown = repr(priority[:40]) if isinstance(priority, str) else f"of type {type(priority).__name__}"
        raise JobRequestError(f"priority {shown} does not exist; choose one of {', '.join(allowed)}")
    if priority not in allowed:
        raise JobRequestError(f"priority {priority!r} is above what you may pick on {profile.slug!r}; "
                              f"allowed: {', '.join(allowed)}")
    return priority


def plan_submission(cfg: ProfilesConfig, user: str, groups: list[str], body: dict[str, Any],
                    active_on_profile: int, settings: ServiceSettings = ServiceSettings(),
                    name: str | None = None, active_total: int = 0,
                    submission: str | None = None) -> list[dict[str, Any]]:
    """[Job, ConfigMap] for `body`, the JSON the user posted ([JobSet, ConfigMap] with `nodes` > 1);
    `active_on_profile` / `active_total`: the user's unfinished jobs on the requested profile / on all profiles
    (counted under a per-user lock). `submission`: the id of an `Idempotency-Key` (idempotency.py): the name
    is derived from it and every object is marked with it and the body's digest."""
    if not isinstance(body, dict):
        raise JobRequestError("the request body must be a JSON object")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise JobRequestError(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(FIELDS))}")
    try:
        profile = choose_profile(cfg, user, groups, body.get("profile"), gpu=True, required=True)
    except ChoiceError as e:
        raise JobRequestError(str(e)) from None
    slug = profile.slug
    gpus = body.get("gpus")
    if gpus is not None and (isinstance(gpus, bool) or gpus != profile.gpu.count):
        raise JobRequestError(f"profile {slug!r} gives {profile.gpu.count} GPU(s) per job; {gpus!r} were asked for. "
                              "Pick a profile with more GPUs.")
    try:  # a multi-node job: a whole-GPU profile that allows N nodes, N x its GPUs within the team's reach
        nodes = check_nodes(cfg, profile, cfg.team_for(groups), body.get("nodes", 1))
    except ValueError as e:
        raise JobRequestError(str(e)) from None
    if settings.max_jobs_per_user and active_total >= settings.max_jobs_per_user:
        raise JobRequestError(f"you already have {active_total} unfinished job(s); the limit is "
                              f"{settings.max_jobs_per_user} per user over all profiles. Wait for one to finish "
                              "or cancel one.")
    if profile.max_per_user is not None and active_on_profile >= profile.max_per_user:
        raise JobRequestError(f"you already have {active_on_profile} unfinished job(s) on {slug!r}; the limit is "
                              f"{profile.max_per_user} per user. Wait for one to finish or cancel one.")
    nb_path = limits.check_notebook_path(body.get("notebook_path"))
    nb = body.get("notebook")
    limits.check_notebook(nb)
    params = limits.check_parameters(body.get("parameters"))
    priority = check_priority(cfg, profile, groups, body.get("priority"))
    if body.get("name") is not None and not isinstance(body.get("name"), str):
        raise JobRequestError("name must be text")
    if submission is not None and name is None:  # a retry must come to the same name
        name = job_name(user, nb_path, JOBSET_NAME_LIMIT if nodes > 1 else JOB_NAME_LIMIT,
                        idempotency.name_suffix(submission))
    build = partial(build_jobset, nodes=nodes) if nodes > 1 else build_job
    objs = build(cfg, profile, user, groups, nb_path, nb, parameters=params, priority=priority,
                 timeout=parse_timeout(body.get("timeout")), settings=settings.job, name=name,
                 options=body.get("options"))
    return objs if submission is None else idempotency.stamp(objs, submission, idempotency.body_digest(body))


__all__ = ["JobRequestError", "ServiceSettings", "plan_submission", "parse_timeout"]
