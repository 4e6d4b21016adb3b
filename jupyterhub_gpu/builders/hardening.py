"""What locks a `%gpu_submit` Job pod down (pure): the Pod Security `restricted` profile, and more
than z2jh's own user pods get.

The notebook inside a Job is the user's code, so its pod runs as an ordinary user with nothing
extra: a fixed non-root uid/gid (z2jh's jovyan: 1000, group 100, which also owns the mounted volumes),
no privilege escalation, no Linux capabilities, the runtime's default seccomp filter, no
service-account token, and a bounded scratch disk. Team namespaces enforce `restricted`
(`builders.kueue.team_namespace`), so a pod without these is refused by the API server itself.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from jupyterhub_gpu.model import quantities

JOB_UID, JOB_GID = 1000, 100

#: The Pod Security Standard that team namespaces enforce (and warn and audit on).
POD_SECURITY_LEVEL = "restricted"
POD_SECURITY_LABELS = {f"pod-security.kubernetes.io/{mode}": POD_SECURITY_LEVEL
                       for mode in ("enforce", "warn", "audit")}

#: A Job's scratch disk may not exceed this: each GPU slot of a team's Kueue quota carries this much
#: `ephemeral-storage` quota (Kueue refuses a workload asking for a resource its queue does not cover),
#: so the GPU quota, not the disk, decides admission.
MAX_EPHEMERAL_STORAGE = "100Gi"
DEFAULT_EPHEMERAL_STORAGE = "20Gi"


def pod_security_context() -> dict[str, Any]:
    """Pod level: non-root with a fixed uid/gid and fsGroup; RuntimeDefault seccomp."""
    return {"runAsNonRoot": True, "runAsUser": JOB_UID, "runAsGroup": JOB_GID, "fsGroup": JOB_GID,
            "seccompProfile": {"type": "RuntimeDefault"}}


def container_security_context() -> dict[str, Any]:
    """Container level: no setuid escalation, every capability dropped."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True}


def ephemeral_storage_bytes(value: str) -> Decimal:
    """The setting as bytes, or ValueError naming the bounds (above zero, at most MAX_EPHEMERAL_STORAGE)."""
    try:
        q = quantities.parse(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a Kubernetes storage quantity; write e.g. 20Gi") from None
    if not 0 < q <= quantities.parse(MAX_EPHEMERAL_STORAGE):
        raise ValueError(f"{value!r} is out of bounds: above 0 and at most {MAX_EPHEMERAL_STORAGE} (each GPU slot "
                         "of a team's Kueue quota carries that much ephemeral-storage quota)")
    return q


def harden(pod_spec: dict[str, Any], ephemeral_storage: str) -> dict[str, Any]:
    """The pod spec with the security contexts, no token, and the scratch-disk request = limit on every
    container (added to what the spec has; nothing else changes)."""
    ephemeral_storage_bytes(ephemeral_storage)
    containers = []
    for c in pod_spec.get("containers") or []:
        res = c.get("resources") or {}
        resources = {k: {**(res.get(k) or {}), "ephemeral-storage": ephemeral_storage} for k in ("requests", "limits")}
        containers.append({**c, "resources": {**res, **resources},
                           "securityContext": {**(c.get("securityContext") or {}), **container_security_context()}})
    return {**pod_spec, "automountServiceAccountToken": False,
            "securityContext": {**(pod_spec.get("securityContext") or {}), **pod_security_context()},
            "containers": containers}


def server_pod_security_context() -> dict[str, Any]:
    """A notebook server's pod (and so its GPU-check init container): non-root, RuntimeDefault seccomp. The uid
    and fsGroup stay KubeSpawner's (z2jh: 1000 and 100), so an admin's image choice is kept."""
    return {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def server_container_security_context() -> dict[str, Any]:
    """A notebook server's container: every capability dropped, non-root (Pod Security `restricted` with the
    pod's seccomp and KubeSpawner's allowPrivilegeEscalation: false)."""
    return {"capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True}
