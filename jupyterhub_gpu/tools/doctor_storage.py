"""`gpuhub doctor`'s storage rows (pure): the users' home share that servers and `%gpu_submit` Jobs mount.

Every namespace that mounts it (the hub's, where servers run, and each team's, where Jobs run) needs the
claim `gpuhub-home`: present, Bound, ReadWriteMany (a job runs on another node than the server), labelled
as the home share, on a PersistentVolume with reclaimPolicy Retain, and all of them on the same share.
"""
from __future__ import annotations

from typing import Any

from jupyterhub_gpu.builders.storage import HOME_CLAIM
from jupyterhub_gpu.contract import HOME_SHARE_LABEL
from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.tools.doctor_checks import FAIL, OK, Check

RENDER = "gpuhub render storage {file} --nfs SERVER:/EXPORT (or --azure-files ...) | kubectl apply -f -"


def share_of(pv: dict[str, Any]) -> tuple | None:
    """What identifies the share behind a PV, whatever per-PV handle it has (None: unknown source)."""
    spec = pv.get("spec") or {}
    if "csi" in spec:
        csi = spec["csi"]
        attrs = csi.get("volumeAttributes") or {}
        return ("csi", csi.get("driver"), tuple(sorted((k, v) for k, v in attrs.items())))
    if "nfs" in spec:
        return ("nfs", spec["nfs"].get("server"), spec["nfs"].get("path", "").rstrip("/"))
    if "azureFile" in spec:
        return ("azureFile", spec["azureFile"].get("shareName"), spec["azureFile"].get("secretName"))
    for local in ("hostPath", "local"):
        if local in spec:
            return (local, spec[local].get("path", "").rstrip("/"))
    return None


def check_storage(cfg: ProfilesConfig, claims: dict[str, dict | None] | None, volumes: dict[str, dict] | None,
                  hub_namespace: str, file: str = "FILE", error: str = "", claim: str = HOME_CLAIM) -> list[Check]:
    """One row per namespace, and one for "all on one share". `claims`: namespace → claim (None: absent)."""
    sec = "storage"
    if claims is None:
        return [Check(sec, "home share", FAIL, f"cannot read the claims: {error}",
                      "run doctor with a kubeconfig that may read persistentvolumeclaims and persistentvolumes")]
    rows, shares = [], {}
    render = RENDER.format(file=file)
    for ns in [hub_namespace, *sorted({t.namespace for t in cfg.teams.values()})]:
        who = "servers" if ns == hub_namespace else "jobs"
        c = claims.get(ns)
        name = f"claim {ns}/{claim}"
        if c is None:
            rows.append(Check(sec, name, FAIL, f"missing: {who} in {ns} cannot mount the users' homes", render))
            continue
        status, spec = c.get("status") or {}, c.get("spec") or {}
        pv = (volumes or {}).get(spec.get("volumeName") or "")
        problems, fixes = [], []
        if status.get("phase") != "Bound":
            problems.append(f"{status.get('phase') or 'not bound'}, not Bound")
            fixes.append(f"kubectl -n {ns} describe pvc {claim} (its PersistentVolume must name it in claimRef)")
        if "ReadWriteMany" not in (status.get("accessModes") or spec.get("accessModes") or []):
            problems.append(f"access {status.get('accessModes') or spec.get('accessModes')}, not ReadWriteMany")
            fixes.append("a job runs on another node than the user's server: use a ReadWriteMany share "
                         "(Azure Files NFS, Azure NetApp Files, NFS)")
        if ((c.get("metadata") or {}).get("labels") or {}).get(HOME_SHARE_LABEL) != "true":
            problems.append(f"not labelled {HOME_SHARE_LABEL}=true (gpu-jobs refuses it)")
            fixes.append(f"kubectl -n {ns} label pvc {claim} {HOME_SHARE_LABEL}=true, if it is the home share")
        if pv is not None and (pv.get("spec") or {}).get("persistentVolumeReclaimPolicy") != "Retain":
            problems.append(f"volume {pv['metadata']['name']} is reclaimed "
                            f"({pv['spec'].get('persistentVolumeReclaimPolicy')}): deleting the claim deletes homes")
            fixes.append(f"kubectl patch pv {pv['metadata']['name']} -p "
                         "'{\"spec\":{\"persistentVolumeReclaimPolicy\":\"Retain\"}}'")
        if pv is not None:
            shares[ns] = share_of(pv)
        if problems:
            rows.append(Check(sec, name, FAIL, "; ".join(problems), "; ".join(fixes)))
        else:
            rows.append(Check(sec, name, OK, f"Bound, ReadWriteMany, on {pv['metadata']['name'] if pv else '?'}"))
    distinct = {s for s in shares.values()}
    if len(distinct) > 1 or None in distinct:
        rows.append(Check(sec, "one share", FAIL,
                          "the claims' volumes are not on one share: " +
                          "; ".join(f"{ns}: {s or 'unknown source'}" for ns, s in sorted(shares.items())),
                          "every namespace's PersistentVolume must point at the same share (" + render + ")"))
    elif shares:
        rows.append(Check(sec, "one share", OK, f"{len(shares)} namespaces on {next(iter(distinct))[0]} share "
                                                 f"{' '.join(str(x) for x in next(iter(distinct))[1:2])}"))
    return rows
