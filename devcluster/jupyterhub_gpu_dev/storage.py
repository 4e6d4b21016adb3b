"""The dev cluster's home share, as Kubernetes objects only: a folder of this machine (`homes/` in the
cluster's state folder) published as statically bound PersistentVolume/claim pairs (the same
`share_objects` an admin renders for a real share), one in the hub namespace and one in each team
namespace. `cluster up` creates them, and a dev hub adds any team its own profiles file names. The file's
read-only datasets are bound the same way, each to a stand-in folder (`datasets/NAME`). The real
controller-manager binds them; the dev node agent (SIMULATOR) mounts a pod's claims by resolving claim →
bound PV → its path.

hostPath appears only in these PersistentVolumes, never in a pod spec.
"""
from __future__ import annotations

import time
from pathlib import Path

from kubernetes import client, config

from jupyterhub_gpu.builders.datasets import dataset_objects
from jupyterhub_gpu.builders.storage import HomeStorage, share_objects
from jupyterhub_gpu.contract import DATASET_LABEL, HOME_SHARE_LABEL

#: Where servers run in the dev cluster (devhub.NAMESPACE).
HUB_NAMESPACE = "jhub"


def cluster_share(kubeconfig: Path) -> Path:
    """The dev cluster's share folder, next to its kubeconfig in its state folder."""
    return Path(kubeconfig).parent / "homes"


def home_namespaces(cfg, hub_namespace: str = HUB_NAMESPACE) -> list[str]:
    return [hub_namespace, *sorted({t.namespace for t in cfg.teams.values()})]


def dev_share_objects(share: Path, namespaces: list[str], storage: HomeStorage = HomeStorage()) -> list[dict]:
    return share_objects(namespaces, {"hostPath": {"path": str(share), "type": "Directory"}}, size="10Gi",
                         storage=storage)


def _wait_gone(read, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            read()
        except client.ApiException as e:
            if e.status == 404:
                return
            raise
        time.sleep(0.3)
    raise RuntimeError(f"a claim or volume of the old dev home share did not go within {timeout:.0f} s "
                       "(a pod still uses it?)")


def ensure_home_share(kubeconfig: Path, namespaces: list[str], share: Path | None = None,
                      storage: HomeStorage = HomeStorage(), timeout: float = 60) -> list[dict]:
    """Create (or move to `share`, default the cluster's) the home share's PV/claim pairs in these
    namespaces and wait until every claim is Bound."""
    share = share or cluster_share(kubeconfig)
    share.mkdir(parents=True, exist_ok=True)
    objs = dev_share_objects(share, namespaces, storage)
    ensure_bound(kubeconfig, objs, f"{HOME_SHARE_LABEL}=true", timeout)
    return objs


def cluster_datasets(kubeconfig: Path) -> Path:
    """The dev stand-ins of the profiles file's datasets: `datasets/NAME` in the cluster's state folder."""
    return Path(kubeconfig).parent / "datasets"


def dataset_folder(root: Path, name: str, dataset) -> Path:
    """A dataset's stand-in folder with a README.txt saying what it stands for (the dev agent mounts it read-only:
    agent_env.read_only_command)."""
    folder = root / name
    readme = folder / "README.txt"
    if not readme.exists():
        folder.mkdir(parents=True, exist_ok=True)
        src = dataset.source
        where = getattr(src, "container", None) or getattr(src, "share", "")
        readme.write_text(f"dataset {name}: the dev cluster's stand-in for {src.storage_account}/{where}\n")
    return folder


def ensure_datasets(kubeconfig: Path, cfg, hub_namespace: str = HUB_NAMESPACE, root: Path | None = None,
                    timeout: float = 60) -> list[dict]:
    """The file's datasets bound as an admin's render binds them (`dataset_objects`, the same namespaces and
    claims), each on its local stand-in folder instead of Azure; waits until every claim is Bound."""
    root = root or cluster_datasets(kubeconfig)
    sources = {name: {"hostPath": {"path": str(dataset_folder(root, name, d)), "type": "Directory"}}
               for name, d in cfg.datasets.items()}
    objs = dataset_objects(cfg, hub_namespace, sources)
    ensure_bound(kubeconfig, objs, DATASET_LABEL, timeout)
    return objs


def ensure_bound(kubeconfig: Path, objs: list[dict], selector: str, timeout: float = 60) -> None:
    """Create [PV, claim, ...] pairs (and their namespaces), replacing a claim bound elsewhere and the PVs under
    `selector` that are not wanted any more, and wait until every claim is Bound."""
    api = config.new_client_from_config(str(kubeconfig))
    core = client.CoreV1Api(api)
    claims = [o for o in objs if o["kind"] == "PersistentVolumeClaim"]
    try:
        for ns in sorted({c["metadata"]["namespace"] for c in claims}):
            try:
                core.create_namespace({"metadata": {"name": ns}})
            except client.ApiException as e:
                if e.status != 409:
                    raise
        wanted = {o["metadata"]["name"] for o in objs if o["kind"] == "PersistentVolume"}
        for pvc in claims:  # a claim bound to another volume (an earlier dev hub's): replace it
            ns, name = pvc["metadata"]["namespace"], pvc["metadata"]["name"]
            try:
                old = core.read_namespaced_persistent_volume_claim(name, ns)
            except client.ApiException as e:
                if e.status != 404:
                    raise
                continue
            if old.spec.volume_name != pvc["spec"]["volumeName"]:
                core.delete_namespaced_persistent_volume_claim(name, ns)
                _wait_gone(lambda: core.read_namespaced_persistent_volume_claim(name, ns), timeout)
        for pv in core.list_persistent_volume(label_selector=selector).items:
            if pv.metadata.name not in wanted or pv.status.phase == "Released":  # Released: never binds again
                core.delete_persistent_volume(pv.metadata.name)
                if pv.metadata.name in wanted:
                    _wait_gone(lambda: core.read_persistent_volume(pv.metadata.name), timeout)
        for obj in objs:
            try:
                if obj["kind"] == "PersistentVolume":
                    core.create_persistent_volume(obj)
                else:
                    core.create_namespaced_persistent_volume_claim(obj["metadata"]["namespace"], obj)
            except client.ApiException as e:
                if e.status != 409:
                    raise
        deadline = time.monotonic() + timeout
        for pvc in claims:
            ns, name = pvc["metadata"]["namespace"], pvc["metadata"]["name"]
            while core.read_namespaced_persistent_volume_claim(name, ns).status.phase != "Bound":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"claim {ns}/{name} was not bound within {timeout:.0f} s: is the "
                                       "controller-manager's persistentvolume-binder-controller running?")
                time.sleep(0.2)
    finally:
        api.close()
