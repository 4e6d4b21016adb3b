"""Where users' files live: one ReadWriteMany share holds every user's home in its own folder (pure).

Servers mount the share through a claim in the hub namespace with `subPath: {username}` (what z2jh's
`singleuser.storage.type: static` sets in KubeSpawner); `%gpu_submit` Jobs mount the same share through a
claim of the same name in their team namespace (a pod can only mount a claim of its own namespace), bound
to a PersistentVolume on the same share, with the same subPath. So a job reads the user's files and
writes its output notebook and checkpoints where the user's JupyterLab sees them. `share_objects` builds
those statically bound PV/claim pairs (`gpuhub render storage`; the dev cluster uses it too).
"""
from __future__ import annotations

import hashlib
import posixpath
import string
from dataclasses import dataclass
from typing import Any

from kubespawner.slugs import escape_slug, safe_slug

from jupyterhub_gpu.contract import HOME_DIR, HOME_FOLDER_CONTAINER, HOME_SHARE_LABEL, MANAGED_BY

HOME_CLAIM = "gpuhub-home"
HOME_VOLUME = "home"
#: KubeSpawner's own slug length for user names in templates (kubespawner.spawner._expand_user_properties).
_SLUG_MAX = 48


class StorageError(ValueError):
    """A storage setting that cannot work; the message says which and why."""


@dataclass(frozen=True)
class HomeStorage:
    """The shared home share as servers and Jobs see it."""

    claim: str = HOME_CLAIM           # the claim's name, in the hub namespace and in every team namespace
    subpath: str = "{username}"       # KubeSpawner template of a user's folder on the share
    mount_path: str = HOME_DIR
    slug_scheme: str = "safe"         # the hub's KubeSpawner.slug_scheme: how `{username}` is spelled


def home_subpath(template: str, user: str, slug_scheme: str = "safe") -> str:
    """A user's folder on the share, expanded as KubeSpawner expands `volume_mounts` (with the hub's
    `slug_scheme`), so a Job finds the very folder the user's server mounts."""
    if slug_scheme not in ("safe", "escape"):
        raise StorageError(f"slug scheme {slug_scheme!r}: KubeSpawner knows 'safe' and 'escape'")
    safe, escaped = safe_slug(user, max_length=_SLUG_MAX), escape_slug(user)
    fields = {"username": safe if slug_scheme == "safe" else escaped, "safe_username": safe,
              "escaped_username": escaped, "unescaped_username": user}
    used = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    if unknown := used - set(fields):
        raise StorageError(f"home subPath {template!r}: unknown field(s) {', '.join(sorted(unknown))}; "
                           f"use {', '.join('{' + f + '}' for f in fields)}")
    path = template.format(**fields)
    if not path or path.startswith("/") or ".." in path.split("/") or posixpath.normpath(path) != path:
        raise StorageError(f"home subPath {template!r} gives {path!r} for {user!r}: it must be a plain relative path")
    return path


def spawner_settings(storage: HomeStorage = HomeStorage()) -> dict[str, Any]:
    """KubeSpawner settings that mount a user's home from the share, as z2jh's `singleuser.storage`
    `type: static` (`static.pvcName`, `static.subPath`, `homeMountPath`) sets them."""
    return {"volumes": [{"name": HOME_VOLUME, "persistentVolumeClaim": {"claimName": storage.claim}}],
            "volume_mounts": [{"name": HOME_VOLUME, "mountPath": storage.mount_path, "subPath": storage.subpath}],
            "storage_pvc_ensure": False}


def job_home(storage: HomeStorage, user: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, volumeMount) that give a Job's pod the user's home at the same path as their server."""
    return ({"name": HOME_VOLUME, "persistentVolumeClaim": {"claimName": storage.claim}},
            {"name": HOME_VOLUME, "mountPath": storage.mount_path,
             "subPath": home_subpath(storage.subpath, user, storage.slug_scheme)})


#: Where the home folder's init container sees the whole share (its working directory).
SHARE_MOUNT = "/gpuhub-share"


def home_folder_container(container: dict[str, Any], volumes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The init container that creates the folders `container` mounts by subPath from a writable claim (a new
    user's home on the share), as the pod's own user, before the kubelet mounts them; None when there are none.

    A kubelet creates a missing subPath folder as root, and a server running as uid 1000 then cannot write its own
    home (Pod Security `restricted` allows no root init container to chown it). This one runs with the container's
    image and security context, sees the share's top folder only for its `mkdir -p`, and nothing of the user's runs
    in it. The share's top folder must be writable by the users (docs/admin-guide.md, step 6)."""
    by_name = {v.get("name"): v for v in volumes or []}
    mounts = [m for m in container.get("volumeMounts") or []
              if m.get("subPath") and not m.get("readOnly")
              and "persistentVolumeClaim" in (by_name.get(m.get("name")) or {})]
    if not mounts:
        return None
    volume = mounts[0]["name"]  # the home share: one volume (servers and jobs mount no second claim by subPath)
    folders = sorted({m["subPath"] for m in mounts if m["name"] == volume})
    for folder in folders:
        if folder.startswith("/") or ".." in folder.split("/") or posixpath.normpath(folder) != folder.rstrip("/"):
            raise StorageError(f"subPath {folder!r} of volume {volume!r}: it must be a plain relative path")
    out: dict[str, Any] = {
        "name": HOME_FOLDER_CONTAINER, "image": container.get("image"),
        "command": ["mkdir", "-p", "--", *folders], "workingDir": SHARE_MOUNT,
        "volumeMounts": [{"name": volume, "mountPath": SHARE_MOUNT}],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "terminationMessagePolicy": "FallbackToLogsOnError"}
    for key in ("imagePullPolicy", "securityContext"):
        if container.get(key):
            out[key] = container[key]
    return out


def _expand(value: Any, namespace: str) -> Any:
    if isinstance(value, str):
        return value.replace("{namespace}", namespace)
    if isinstance(value, dict):
        return {k: _expand(v, namespace) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, namespace) for v in value]
    return value


def pv_name(namespace: str, source: dict[str, Any]) -> str:
    """Cluster-wide PV name per namespace; a short hash of the source tells two shares apart."""
    digest = hashlib.sha256(repr(sorted(source.items())).encode()).hexdigest()[:8]
    return f"{HOME_CLAIM}-{namespace}-{digest}"[:253]


def share_objects(namespaces: list[str], source: dict[str, Any], size: str = "1Ti",
                  storage: HomeStorage = HomeStorage(), access_modes: tuple[str, ...] = ("ReadWriteMany",),
                  mount_options: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """[PV, claim] per namespace, statically bound to each other (claimRef ↔ volumeName), all on one share.

    `source`: the PV's volume source, e.g. `{"nfs": {"server": ..., "path": ...}}` or an Azure Files CSI
    source whose `volumeHandle` contains `{namespace}` (the CSI driver needs one handle per PV)."""
    out: list[dict[str, Any]] = []
    for ns in sorted(set(namespaces)):
        src = _expand(source, ns)
        name = pv_name(ns, src)
        labels = {HOME_SHARE_LABEL: "true", **MANAGED_BY}
        spec: dict[str, Any] = {"capacity": {"storage": size}, "accessModes": list(access_modes),
                                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                             "namespace": ns, "name": storage.claim}, **src}
        if mount_options:
            spec["mountOptions"] = list(mount_options)
        out.append({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": labels},
                    "spec": spec})
        out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": storage.claim, "namespace": ns, "labels": labels},
                    "spec": {"accessModes": list(access_modes), "storageClassName": "", "volumeName": name,
                             "resources": {"requests": {"storage": size}}}})
    return out


def share_source(nfs: str | None = None, azure_files: str | None = None) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(PV volume source, mount options) for the share: `nfs` "SERVER:/EXPORT" (an NFS server, Azure
    NetApp Files), or `azure_files` "RESOURCE_GROUP/ACCOUNT/SHARE" (an Azure Files premium NFS share,
    through the AKS Azure Files CSI driver; one volumeHandle per namespace, as the driver requires)."""
    if bool(nfs) == bool(azure_files):
        raise StorageError("give the share as exactly one of --nfs SERVER:/EXPORT or --azure-files RG/ACCOUNT/SHARE")
    if nfs:
        server, sep, path = nfs.partition(":")
        if not sep or not server or not path.startswith("/"):
            raise StorageError(f"--nfs {nfs!r}: write SERVER:/EXPORT, e.g. 10.0.0.4:/homes")
        return {"nfs": {"server": server, "path": path}}, ("nfsvers=4.1", "hard")
    parts = azure_files.split("/")
    if len(parts) != 3 or not all(parts):
        raise StorageError(f"--azure-files {azure_files!r}: write RESOURCE_GROUP/STORAGE_ACCOUNT/SHARE")
    rg, account, share = parts
    return ({"csi": {"driver": "file.csi.azure.com", "volumeHandle": f"{rg}#{account}#{share}#{{namespace}}",
                     "volumeAttributes": {"resourceGroup": rg, "storageAccount": account, "shareName": share,
                                          "protocol": "nfs"}}},
            ("nconnect=4", "noresvport", "actimeo=30"))
