"""A queued job's status told in plain words for the API, the widget and `%gpu_jobs` (pure).

`derive_status` keeps Kueue's own text in `kueue_message`/`kueue_reason`; here `message` becomes the
sentence of `model/kueue_words.py` for the job's team, pool and place in the queue.
"""
from __future__ import annotations

from typing import Any

from jupyterhub_gpu.contract import QUEUED
from jupyterhub_gpu.model.kueue_words import context_for, plain_reason
from jupyterhub_gpu.model.profiles import ProfilesConfig

PREEMPTED = "preempted; waiting to resume"


def explain(cfg: ProfilesConfig, status: dict[str, Any]) -> dict[str, Any]:
    """The status with a plain `message` when it is queued with something Kueue said; else unchanged."""
    if status.get("state") != QUEUED or "kueue_message" not in status:
        return status
    ctx = context_for(cfg, status.get("namespace"), status.get("profile"), status.get("position"),
                      status.get("queue_length"))
    plain = plain_reason(status["kueue_message"], ctx, status.get("kueue_reason"))
    message = f"{PREEMPTED} — {plain}" if status.get("preempted") else plain
    if (status.get("nodes") or 1) > 1:  # a multi-node job (gang.py): Kueue admits its N pods together or not
        message = f"waiting for {status['nodes']} nodes — {message}"
    return {**status, "message": message}
