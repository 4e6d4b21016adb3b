"""`Idempotency-Key` on `POST /jobs`: a retried submission gets the job it made, never a second one (pure).

A client sends a fresh key per submission and the same key on its own retries (a lost answer, a gpu-jobs
restart). A key is its user's: the submission's identity is a hash of (user, key), kept as a label on the
Job or JobSet and on its ConfigMap (contract.SUBMISSION_LABEL), and the job name's random part is taken
from that hash. So a gpu-jobs that restarted before its watch saw the first create still makes nothing
twice: the API server answers "already exists" for that name, and the object it holds is checked to be
this user's submission before it is returned. The body's digest (contract.REQUEST_DIGEST_ANNOTATION)
tells a retry from a different request under a reused key, which is refused (422). A key is remembered
as long as its job exists (a cancelled or expired job frees it).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from jupyterhub_gpu.builders.jobs import JobRequestError
from jupyterhub_gpu.contract import (
    IDEMPOTENCY_KEY_HEADER,
    IDEMPOTENCY_KEY_RE,
    REQUEST_DIGEST_ANNOTATION,
    SUBMISSION_LABEL,
    USER_ANNOTATION,
)

#: The job name's random part (6 hex digits, as `builders.jobs.job_name` makes) comes from the submission id.
SUFFIX_CHARS = 6


class KeyReused(JobRequestError):
    """The key was used before for a different request (422: the client must make a fresh key)."""


def check_key(value: str | None) -> str | None:
    """The header's value (None when absent), or JobRequestError naming the syntax (400)."""
    if value is None:
        return None
    if not IDEMPOTENCY_KEY_RE.fullmatch(value):
        raise JobRequestError(f"the {IDEMPOTENCY_KEY_HEADER} header must be 8 to 64 letters, digits, '-' or '_' "
                              f"(a UUID works); got {value[:80]!r}")
    return value


def submission_id(user: str, key: str) -> str:
    """The submission's identity, a label value: the same for a user's retries, unrelated across users."""
    return hashlib.sha256(f"{len(user)}:{user}:{key}".encode("utf-8", "surrogatepass")).hexdigest()[:40]


def name_suffix(submission: str) -> str:
    return submission[:SUFFIX_CHARS]


def body_digest(body: Any) -> str:
    """The request's digest, independent of key order and whitespace (a retry re-serialises the same body)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def stamp(objs: list[dict], submission: str, digest: str) -> list[dict]:
    """Mark every object of the submission (the Job or JobSet and its ConfigMap) with its id and digest."""
    for obj in objs:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("labels", {})[SUBMISSION_LABEL] = submission
        meta.setdefault("annotations", {})[REQUEST_DIGEST_ANNOTATION] = digest
    return objs


def is_submission(obj: dict | None, user: str, submission: str) -> bool:
    """`obj` is this user's object of this submission (never another user's, whatever its name)."""
    meta = (obj or {}).get("metadata") or {}
    return ((meta.get("labels") or {}).get(SUBMISSION_LABEL) == submission
            and (meta.get("annotations") or {}).get(USER_ANNOTATION) == user)


def find(jobs: list[dict], user: str, submission: str) -> dict | None:
    """The user's job made under this submission id, if it still exists."""
    return next((j for j in jobs if is_submission(j, user, submission)), None)


def check_replay(obj: dict, digest: str) -> None:
    """The retry carries the body the job was made from, else KeyReused saying so."""
    made_from = ((obj.get("metadata") or {}).get("annotations") or {}).get(REQUEST_DIGEST_ANNOTATION)
    if made_from != digest:
        name = (obj.get("metadata") or {}).get("name", "")
        raise KeyReused(f"this {IDEMPOTENCY_KEY_HEADER} was already used for job {name}, with a different request; "
                        "send a fresh key for a new submission")
