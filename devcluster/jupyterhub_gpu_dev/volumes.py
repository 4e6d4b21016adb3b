"""SIMULATOR — how the dev node agent mounts a pod's claims, as a kubelet would (pure functions).

A claim is looked up in the pod's own namespace; it must be Bound to a PersistentVolume whose
claimRef names it back; the volume's local folder (hostPath or local PVs only: the dev machine is
the only "node" disk) plus the mount's subPath is what the process sees. Access modes hold across
simulated nodes: a ReadWriteOnce claim in use on one node cannot be used on another (the
attach-detach "Multi-Attach error"), a ReadWriteOncePod claim by a second pod at all. A `readOnly` mount is
read-only for the process (agent_env.read_only_command).
"""
from __future__ import annotations

import posixpath
from pathlib import Path


class MountError(Exception):
    """The pod cannot start yet; `reason` and the message go into a Warning event, like a kubelet's."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def volume_folder(pv: dict) -> Path:
    spec = pv.get("spec") or {}
    for kind in ("hostPath", "local"):
        if kind in spec:
            return Path(spec[kind]["path"])
    kinds = sorted(k for k in spec if isinstance(spec[k], dict) and k not in ("capacity", "claimRef", "nodeAffinity"))
    raise MountError("FailedMount", f"volume {pv['metadata']['name']}: the dev agent (SIMULATOR) mounts hostPath and "
                                    f"local PersistentVolumes only, not {', '.join(kinds) or 'this source'}")


def sub_path(value: str) -> str:
    if value.startswith("/") or ".." in value.split("/") or "\0" in value:
        raise MountError("Failed", f"subPath {value!r} must be a relative path that does not leave the volume")
    return posixpath.normpath(value) if value else ""


def claim_folder(namespace: str, name: str, claim: dict | None, pv: dict | None, subpath: str = "") -> Path:
    """The local folder a mount of claim `namespace/name` (with `subpath`) shows the process."""
    if claim is None:
        raise MountError("FailedMount", f'persistentvolumeclaim "{name}" not found in namespace {namespace}')
    phase = (claim.get("status") or {}).get("phase")
    volume = (claim.get("spec") or {}).get("volumeName")
    if phase != "Bound" or not volume:
        raise MountError("FailedMount", f'persistentvolumeclaim "{name}" is {phase or "not bound"}, not Bound')
    ref = ((pv or {}).get("spec") or {}).get("claimRef") or {}
    if pv is None or pv["metadata"]["name"] != volume or (ref.get("namespace"), ref.get("name")) != (namespace, name) \
            or ref.get("uid") not in (None, claim["metadata"].get("uid")):
        raise MountError("FailedMount", f'persistentvolumeclaim "{name}": its volume {volume} is not bound to it')
    folder = volume_folder(pv)
    sub = sub_path(subpath)
    return folder / sub if sub else folder


def attach_conflict(claim: dict, pod: str, node: str, users: dict[str, str]) -> str | None:
    """Why `pod` on `node` cannot use the claim, given the pods (→ nodes) that use it now; None if it can."""
    modes = set((claim.get("status") or {}).get("accessModes") or (claim.get("spec") or {}).get("accessModes") or [])
    others = {p: n for p, n in users.items() if p != pod}
    name = claim["metadata"]["name"]
    if "ReadWriteOncePod" in modes and others:
        return f'volume of claim "{name}" is ReadWriteOncePod and already used by pod(s) {", ".join(sorted(others))}'
    if modes and modes <= {"ReadWriteOnce"}:
        elsewhere = sorted(p for p, n in others.items() if n != node)
        if elsewhere:
            return (f'Multi-Attach error for volume of claim "{name}": it is ReadWriteOnce and already used by '
                    f'pod(s) {", ".join(elsewhere)} on another node')
    return None


def home_of(mounts: dict[str, Path], image_home: str, fallback: Path) -> Path:
    """$HOME for the process: where the image's home is mounted, else the pod's own (ephemeral) folder."""
    for mount in sorted(mounts, key=len, reverse=True):
        if image_home == mount or image_home.startswith(mount.rstrip("/") + "/"):
            return mounts[mount] / image_home[len(mount.rstrip("/")):].lstrip("/")
    return fallback


def read_only_folders(pod: dict, container: dict, mounts: dict[str, Path]) -> list[Path]:
    """The local folders of the container's read-only mounts: `readOnly` on the mount or on the pod's claim volume
    (a kubelet mounts either read-only)."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    out = []
    for m in container.get("volumeMounts") or []:
        claim = (volumes.get(m["name"]) or {}).get("persistentVolumeClaim") or {}
        if (m.get("readOnly") or claim.get("readOnly")) and m["mountPath"] in mounts:
            out.append(mounts[m["mountPath"]])
    return sorted(set(out))
