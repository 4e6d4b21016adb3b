"""Names, labels and defaults that several builders share (pure constants; a leaf: imports only `contract`).

The ports the services listen on are in `contract` (the services themselves listen on them); these are
the names only the rendered objects agree on among themselves.
"""
from __future__ import annotations

from jupyterhub_gpu.contract import JOBS_SERVICE

#: The z2jh release namespace the hub (and gpu-jobs) run in unless told otherwise.
DEFAULT_HUB_NAMESPACE = "jhub"
#: The namespace only gpu-jobs writes Leases in (its per-user submit locks, the notification leader), beside the hub's:
#: a Role there cannot reach another Lease (z2jh's user-scheduler keeps its leader's in the hub namespace).
LEASES_SUFFIX = "-gpuhub-leases"


def leases_namespace(hub_namespace: str) -> str:
    """`<hub namespace>-gpuhub-leases`; one per install, so two hubs in one cluster never share locks."""
    return f"{hub_namespace}{LEASES_SUFFIX}"


#: The gpu-jobs service's own ServiceAccount (`workloads.render_gpu_jobs`), bound by `deploy.render_rbac`.
JOBS_ACCOUNT = JOBS_SERVICE
#: The ConfigMaps the GPU operator's `devicePlugin.config.name` and `migManager.config.name` point at
#: (`workloads.render_gpu_operator_values`), rendered by `deploy`.
DEVICE_PLUGIN_CONFIG = "gpuhub-device-plugin-config"
MIG_PARTED_CONFIG = "gpuhub-mig-parted-config"
#: The labels of the gpu-jobs pods (`workloads.render_gpu_jobs`), which its NetworkPolicy selects (`network`).
GPU_JOBS_POD = {"app.kubernetes.io/name": JOBS_SERVICE, "app.kubernetes.io/part-of": "jupyterhub-gpu"}
