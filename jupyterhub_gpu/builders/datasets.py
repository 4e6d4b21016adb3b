"""Read-only datasets as Kubernetes objects and pod fields (pure).

Each dataset (model/datasets.py) is one statically bound PersistentVolume/claim pair per namespace that mounts
it (`dataset_objects`; `gpuhub render datasets`, deploy/datasets.yaml): the hub's for servers, each entitled
team's for jobs, since a pod can only mount a claim of its own namespace. The claim is `gpuhub-dataset-NAME`
everywhere, so a server's and a job's pod spec name the same claim. Read-only three times over, as Kubernetes
means it: the volume and claim are ReadOnlyMany, the CSI volume is published read-only, and every pod mounts
it with `readOnly: true`. `pod_datasets` is what a pod gets, from `datasets_for`, the one rule servers and
jobs share.
"""
from __future__ import annotations

from typing import Any

from jupyterhub_gpu.contract import DATASET_LABEL, DATASETS_DIR, ENV_DATASETS, MANAGED_BY
from jupyterhub_gpu.model.datasets import AzureFileSource, Dataset, dataset_namespaces, datasets_for
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig

BLOB_DRIVER = "blob.csi.azure.com"
FILE_DRIVER = "file.csi.azure.com"
#: A static volume's size is a label to Kubernetes; the data's size is the storage account's business.
SIZE = "1Ti"
ACCESS = ["ReadOnlyMany"]


def claim_name(name: str) -> str:
    return f"gpuhub-dataset-{name}"


def volume_name(name: str) -> str:
    """The pod's volume: a DNS label (dataset names are at most 48 characters)."""
    return f"dataset-{name}"


def pv_name(name: str, namespace: str) -> str:
    """Cluster-wide, so unique per (namespace, dataset): a dot between them, which neither (DNS labels) may hold and
    a PV name (a DNS subdomain) may; `team`+`ds-x` and `team-ds`+`x` were one name, and the second claim never bound."""
    return f"gpuhub-dataset.{namespace}.{name}"


def mount_path(name: str) -> str:
    return f"{DATASETS_DIR}/{name}"


def driver_of(dataset: Dataset) -> str:
    return FILE_DRIVER if isinstance(dataset.source, AzureFileSource) else BLOB_DRIVER


def csi_source(name: str, dataset: Dataset, namespace: str) -> tuple[dict[str, Any], list[str]]:
    """(the PV's `csi` source, its mount options). The volume handle is unique per PV, as both drivers require,
    and has no '#' (their internal separator); the attributes name the data."""
    src = dataset.source
    if isinstance(src, AzureFileSource):
        where, attrs = src.share, {"shareName": src.share, "protocol": src.protocol}
    else:
        where, attrs = src.container, {"containerName": src.container, "protocol": src.protocol}
        if src.identity_client_id:  # blobfuse2 authenticates as the nodes' managed identity: no key, no secret
            attrs.update(AzureStorageAuthType="MSI", AzureStorageIdentityClientID=src.identity_client_id)
    attrs["storageAccount"] = src.storage_account
    if src.resource_group:
        attrs["resourceGroup"] = src.resource_group
    options = ["-o allow_other", "--read-only=true"] if src.protocol == "fuse2" else ["ro"]
    return ({"driver": driver_of(dataset), "readOnly": True,
             "volumeHandle": f"{src.storage_account}_{where}_{name}_{namespace}",
             "volumeAttributes": dict(sorted(attrs.items()))}, options)


def dataset_objects(cfg: ProfilesConfig, hub_namespace: str, sources: dict[str, dict[str, Any]] | None = None) \
        -> list[dict[str, Any]]:
    """[PV, claim] per dataset and namespace that mounts it, bound to each other (claimRef ↔ volumeName).
    `sources`: dataset name → a PV volume source to use instead of the CSI one (the dev cluster's folders)."""
    out: list[dict[str, Any]] = []
    for name, dataset in cfg.datasets.items():
        labels = {DATASET_LABEL: name, **MANAGED_BY}
        for ns in dataset_namespaces(cfg, name, hub_namespace):
            if sources and name in sources:
                source, options = dict(sources[name]), []
            else:
                csi, options = csi_source(name, dataset, ns)
                source = {"csi": csi}
            spec: dict[str, Any] = {"capacity": {"storage": SIZE}, "accessModes": list(ACCESS),
                                    "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                                    "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                                 "namespace": ns, "name": claim_name(name)}, **source}
            if options:
                spec["mountOptions"] = options
            out.append({"apiVersion": "v1", "kind": "PersistentVolume",
                        "metadata": {"name": pv_name(name, ns), "labels": dict(labels)}, "spec": spec})
            out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": claim_name(name), "namespace": ns, "labels": dict(labels)},
                        "spec": {"accessModes": list(ACCESS), "storageClassName": "", "volumeName": pv_name(name, ns),
                                 "resources": {"requests": {"storage": SIZE}}}})
    return out


def pod_datasets(cfg: ProfilesConfig, profile: Profile, groups: list[str]) \
        -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str]]:
    """(volumes, volumeMounts, env) that give a pod of this user and profile its datasets, read-only; all empty
    when it gets none. Servers (builders/pods.py) and jobs (builders/jobs.py) both take them from here."""
    names = datasets_for(cfg, profile.slug, groups)
    volumes = [{"name": volume_name(n), "persistentVolumeClaim": {"claimName": claim_name(n), "readOnly": True}}
               for n in names]
    mounts = [{"name": volume_name(n), "mountPath": mount_path(n), "readOnly": True} for n in names]
    return volumes, mounts, ({ENV_DATASETS: DATASETS_DIR} if names else {})
