"""Object metadata that several builders (and gpu-jobs) share (pure; a leaf: standard library only)."""
from __future__ import annotations

from typing import Any


def owner_reference(job: dict[str, Any]) -> dict[str, Any]:
    """An ownerReference to a created Job or JobSet (needs its uid): its ConfigMap goes away with it."""
    return {"apiVersion": job.get("apiVersion") or "batch/v1", "kind": job.get("kind") or "Job",
            "name": job["metadata"]["name"], "uid": job["metadata"]["uid"], "controller": False,
            "blockOwnerDeletion": False}
