"""`gpuhub doctor`'s dataset rows (pure), only when the profiles file declares `datasets`.

Without its CSI driver a dataset's volume never mounts: the pod waits in ContainerCreating and the user sees a
server that does not start, so each driver the datasets use is checked first (its CSIDriver object: AKS
creates it once the driver is on). Then each dataset's claim in every namespace that mounts it
(builders/datasets.py: the hub's for servers, the entitled teams' for jobs): present, Bound, ReadOnlyMany, and on
a volume with the file's source (else pods would read other data, or data they may write). On the dev cluster
(every node simulated) there is no Azure: the drivers' rows say so instead of failing, and the claims are bound
to local folders, which the row names.
"""
from __future__ import annotations

from typing import Any

from jupyterhub_gpu.builders.datasets import ACCESS, dataset_objects, driver_of
from jupyterhub_gpu.contract import DATASET_LABEL
from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.tools.doctor_checks import FAIL, OK, SIMULATED, Check

SECTION = "datasets"
RENDER = "gpuhub render datasets {file} --hub-namespace {ns} | kubectl apply -f -"
ENABLE = {"blob.csi.azure.com": "az aks update --resource-group RG --name CLUSTER --enable-blob-driver",
          "file.csi.azure.com": "az aks update --resource-group RG --name CLUSTER --enable-file-driver"}


def drivers(cfg: ProfilesConfig) -> list[str]:
    """The CSI drivers the file's datasets need: what the live shell reads."""
    return sorted({driver_of(d) for d in cfg.datasets.values()})


def wanted(cfg: ProfilesConfig, hub_namespace: str) -> list[tuple[str, str]]:
    """(namespace, claim) of every dataset claim the file asks for."""
    return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in dataset_objects(cfg, hub_namespace)
            if o["kind"] == "PersistentVolumeClaim"]


def check_driver(driver: str, have: dict[str, Any] | None, simulated: bool) -> Check:
    if have is not None:
        return Check(SECTION, f"CSI driver {driver}", OK, "installed (CSIDriver object present)")
    if simulated:
        return Check(SECTION, f"CSI driver {driver}", SIMULATED, "simulated nodes, no Azure: the dev cluster binds "
                     "datasets to local folders")
    return Check(SECTION, f"CSI driver {driver}", FAIL, f"not installed: pods with a dataset on {driver} never "
                 "start (their volume cannot mount)", ENABLE.get(driver, f"install the {driver} CSI driver"))


def check_claim(want_pv: dict[str, Any], claim: dict[str, Any] | None, pv: dict[str, Any] | None, fix: str,
                simulated: bool, who: str) -> Check:
    """One dataset claim against the PV the file renders for it (`want_pv`); `who` mounts it there."""
    ref = want_pv["spec"]["claimRef"]
    ns, name, dataset = ref["namespace"], ref["name"], want_pv["metadata"]["labels"][DATASET_LABEL]
    row = f"claim {ns}/{name}"
    if claim is None:
        return Check(SECTION, row, FAIL, f"missing: {who} in {ns} cannot mount dataset {dataset}",
                     fix)
    status, spec = claim.get("status") or {}, claim.get("spec") or {}
    problems = []
    if status.get("phase") != "Bound":
        problems.append(f"{status.get('phase') or 'not bound'}, not Bound")
    modes = status.get("accessModes") or spec.get("accessModes") or []
    if list(modes) != ACCESS:
        problems.append(f"access {modes}, not {ACCESS} (a dataset is read-only for everyone)")
    have_csi, want_csi = ((pv or {}).get("spec") or {}).get("csi"), want_pv["spec"]["csi"]
    local = pv is not None and have_csi is None and simulated
    if pv is not None and not local and (have_csi or {}).get("driver") != want_csi["driver"]:
        problems.append(f"volume {pv['metadata']['name']} is not on {want_csi['driver']}")
    elif have_csi is not None and have_csi.get("volumeAttributes") != want_csi["volumeAttributes"]:
        problems.append(f"volume {pv['metadata']['name']} reads {have_csi.get('volumeAttributes')}, the file says "
                        f"{want_csi['volumeAttributes']}")
    if problems:
        return Check(SECTION, row, FAIL, "; ".join(problems), f"kubectl -n {ns} delete pvc {name}; then {fix}")
    where = "a local folder (dev cluster)" if local else f"{want_csi['driver']} {want_csi['volumeHandle']}"
    return Check(SECTION, row, OK, f"dataset {dataset}: Bound, ReadOnlyMany, on {where}")


def check_datasets(cfg: ProfilesConfig, csi_drivers: dict[str, dict[str, Any] | None] | None,
                   claims: dict[tuple[str, str], dict[str, Any] | None] | None, volumes: dict[str, dict[str, Any]],
                   hub_namespace: str, file: str = "FILE", error: str = "", simulated: bool = False) -> list[Check]:
    """No rows without datasets; else one per CSI driver and one per claim. `csi_drivers`: driver → its CSIDriver
    (None: absent); `claims`: (namespace, claim) → the live claim (None: absent), None: could not be read;
    `volumes`: the PVs those claims are bound to, by name."""
    if not cfg.datasets:
        return []
    if claims is None or csi_drivers is None:
        return [Check(SECTION, "datasets", FAIL, f"cannot read the CSI drivers or the claims: {error}",
                      "run doctor with a kubeconfig that may read csidrivers, persistentvolumeclaims and "
                      "persistentvolumes")]
    rows = [check_driver(d, csi_drivers.get(d), simulated) for d in drivers(cfg)]
    fix = RENDER.format(file=file, ns=hub_namespace)
    for want in dataset_objects(cfg, hub_namespace):
        if want["kind"] == "PersistentVolume":
            ref = want["spec"]["claimRef"]
            claim = claims.get((ref["namespace"], ref["name"]))
            pv = volumes.get(((claim or {}).get("spec") or {}).get("volumeName") or "")
            who = "servers" if ref["namespace"] == hub_namespace else "jobs"
            rows.append(check_claim(want, claim, pv, fix, simulated, who))
    return rows

