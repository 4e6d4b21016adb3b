"""`gpuhub doctor`'s rows and statuses, and what the live shell fetched (pure): the types doctor.py,
doctor_quota.py and doctor_storage.py share, so that none of them imports another's for them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OK, FAIL, SIMULATED = "ok", "fail", "simulated"
SYMBOL = {OK: "✓", FAIL: "✗", SIMULATED: "~"}

APPLY_KUEUE = "gpuhub render kueue {file} | kubectl apply --server-side -f -"


@dataclass(frozen=True)
class Check:
    section: str  # "pool gput4", "kueue", "rbac"
    name: str     # "nodes", "taints", "ClusterQueue team-ds", ...
    status: str
    detail: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status == FAIL


@dataclass
class Snapshot:
    """What the live shell fetched. `None` for a part means it could not be read (`errors` says why)."""

    nodes: list[dict[str, Any]] | None = None
    daemonsets: list[dict[str, Any]] | None = None          # device plugin DaemonSets (any namespace)
    device_plugin_pods: list[dict[str, Any]] | None = None  # their pods
    crds: dict[str, dict[str, Any]] | None = None           # Kueue CRDs by name; missing ones absent
    kueue: dict[str, list[dict[str, Any]]] | None = None     # kind → live objects
    access: dict[tuple[str, str, str, str | None], bool] = field(default_factory=dict)  # (verb, group, res, ns)
    identity: str = "the kubeconfig's user"
    #: Whose rights were reviewed, per account of `deploy.Permission` ("hub", "gpu-jobs"); else `identity`.
    identities: dict[str, str] = field(default_factory=dict)
    #: The home-share claim per namespace (hub + teams; None: absent) and the PVs they are bound to.
    home_claims: dict[str, dict[str, Any] | None] | None = None
    home_volumes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Workload identity (read only when a team has one): the webhook's configuration (None: absent), its pods,
    #: and the teams' ServiceAccounts by (namespace, name) (None: absent); `identity_accounts` None: not read.
    identity_webhook: dict[str, Any] | None = None
    identity_webhook_pods: list[dict[str, Any]] | None = None
    identity_accounts: dict[tuple[str, str], dict[str, Any] | None] | None = None
    #: Datasets (read only when the file has some): each CSI driver's CSIDriver (None: absent), the claims by
    #: (namespace, name) (None: absent; `dataset_claims` None: not read) and the PVs they are bound to.
    dataset_drivers: dict[str, dict[str, Any] | None] | None = None
    dataset_claims: dict[tuple[str, str], dict[str, Any] | None] | None = None
    dataset_volumes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: GPUs through DRA (read only when a pool has `allocation: dra`): every DeviceClass by name, the ResourceSlices
    #: (`dra_slices` None: not read) and gpuhub's claim templates by (namespace, name) (None: absent).
    dra_classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    dra_slices: list[dict[str, Any]] | None = None
    dra_templates: dict[tuple[str, str], dict[str, Any] | None] = field(default_factory=dict)
    #: Kueue's own Configuration: the ConfigMaps and Deployments of kueue-system (None: not read).
    kueue_config_maps: list[dict[str, Any]] | None = None
    kueue_deployments: list[dict[str, Any]] | None = None
    errors: dict[str, str] = field(default_factory=dict)
