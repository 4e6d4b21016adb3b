"""A submission request → the manifests to create, or a `JobRequestError` (a 4xx) saying why not (pure).

Every check runs before anything is created: the profile exists and the user's groups allow it, it
has a GPU and the requested GPU count is the profile's, the user's active jobs on it stay within
`max_per_user`, the timeout is within bounds, the parameters are identifiers with JSON values, the
snapshot fits in a ConfigMap.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpu_spawner.builders.jobs import JobRequestError, JobSettings, build_job
from gpu_spawner.model.choices import ChoiceError, choose_profile
from gpu_spawner.model.profiles import ProfilesConfig, duration_seconds

FIELDS = {"profile", "notebook_path", "notebook", "parameters", "priority", "timeout", "gpus", "name", "options"}


@dataclass(frozen=True)
class ServiceSettings:
    job: JobSettings = field(default_factory=JobSettings)


def parse_timeout(value: Any) -> int | None:
    if value in (None, ""):
        return None
    try:
        return duration_seconds(value)
    except ValueError as e:
        raise JobRequestError(f"timeout: {e}") from None


def plan_submission(cfg: ProfilesConfig, user: str, groups: list[str], body: dict[str, Any],
                    active_on_profile: int, settings: ServiceSettings = ServiceSettings(),
                    name: str | None = None) -> list[dict[str, Any]]:
    """[Job, ConfigMap] for `body`, the JSON the user posted; `active_on_profile`: the user's unfinished jobs on the requested profile."""
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
    if gpus is not None and gpus != profile.gpu.count:
        raise JobRequestError(f"profile {slug!r} gives {profile.gpu.count} GPU(s) per job; {gpus!r} were asked for. "
                              "Pick a profile with more GPUs.")
    if profile.max_per_user is not None and active_on_profile >= profile.max_per_user:
        raise JobRequestError(f"you already have {active_on_profile} unfinished job(s) on {slug!r}; the limit is "
                              f"{profile.max_per_user} per user. Wait for one to finish or cancel one.")
    nb_path, nb = body.get("notebook_path"), body.get("notebook")
    if not isinstance(nb_path, str) or not nb_path.endswith(".ipynb"):
        raise JobRequestError("notebook_path must be the notebook's path ending in .ipynb")
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise JobRequestError("notebook must be the notebook's JSON content (nbformat 4)")
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise JobRequestError("parameters must be an object of name: value")
    priority = body.get("priority") or None
    if priority is not None and not isinstance(priority, str):
        raise JobRequestError(f"priority must be one of {', '.join(cfg.priorities)}")
    objs = build_job(cfg, profile, user, groups, nb_path, nb, params, priority, parse_timeout(body.get("timeout")),
                     settings.job, name, options=body.get("options"))
    return objs


__all__ = ["JobRequestError", "ServiceSettings", "plan_submission", "parse_timeout"]
