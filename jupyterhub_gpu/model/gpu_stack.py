"""Who installs a GPU pool's NVIDIA software (pure): the GPU operator, or AKS itself (a managed GPU pool).

`pools.<name>.gpu_stack`:
  operator     (default) AKS installs no GPU driver (`--gpu-driver none`); the NVIDIA GPU operator installs the
               driver, device plugin (with this file's config: time-slicing, MPS), GPU feature discovery,
               mig-manager and its DCGM exporter.
  aks-managed  AKS's managed GPU node pool (preview, `az aks nodepool add --enable-managed-gpu=true`): AKS
               installs the driver, the NVIDIA device plugin and a DCGM exporter as systemd services on each
               node (no pods, no DaemonSets) and labels the node `kubernetes.azure.com/dcgm-exporter=enabled`.

Facts, from AKS's managed GPU docs and its node bootstrap script: the managed device plugin runs without a
config file, so there is no time-slicing or MPS; GPU feature discovery is not installed, so the node has no
`nvidia.com/gpu.*` labels; the exporter listens on port 19400 with no Kubernetes pod mapping, and Azure
Managed Prometheus keeps only its `cluster`, `instance` (the node), `gpu` and `job` labels. The cluster
autoscaler is not supported on these pools during the preview, and the profile is fixed at creation.

What this file refuses on an `aks-managed` pool, and why:
- sharing (time-slicing, MPS): the managed device plugin takes no sharing config;
- MIG: AKS can partition managed pools (`--gpu-instance-profile`, `--gpu-mig-strategy`), but the managed
  Prometheus scrape drops the MIG instance labels, so neither the culler nor showback could tell one slice's
  use from another's; such a pool stays on the GPU operator here;
- `max_nodes` (autoscaling; `warm` windows need it too): no autoscaler on these pools yet.
"""
from __future__ import annotations

from dataclasses import dataclass

OPERATOR = "operator"
AKS_MANAGED = "aks-managed"
GPU_STACKS = (OPERATOR, AKS_MANAGED)

#: AKS's label on a node whose managed GPU stack (device plugin, DCGM, exporter) was installed and started.
MANAGED_GPU_LABEL = "kubernetes.azure.com/dcgm-exporter"
MANAGED_GPU_LABEL_VALUE = "enabled"
#: The managed exporter's port (AKS moved it off the usual 9400 so that an admin's own exporter can keep it).
MANAGED_EXPORTER_PORT = 19400
#: Node Problem Detector's conditions for the managed services: status "True" means unhealthy.
DEVICE_PLUGIN_CONDITION = "UnhealthyNvidiaDevicePlugin"
DCGM_CONDITION = "UnhealthyNvidiaDCGMServices"
#: The GPU operator's node label that keeps all of its operands (driver, device plugin, GFD, DCGM exporter,
#: mig-manager) off a node: set on managed pools, so that an operator installed for other pools stays away.
OPERATOR_OPERANDS_LABEL = "nvidia.com/gpu.deploy.operands"


@dataclass(frozen=True)
class StackProblem:
    at: str
    message: str


def is_managed(pool) -> bool:
    """Does AKS install this pool's GPU software itself?"""
    return pool.is_gpu and pool.gpu_stack == AKS_MANAGED


def pool_problems(name: str, pool) -> list[StackProblem]:
    """What an `aks-managed` pool of the file asks for that a managed GPU pool cannot give."""
    at = f"pools.{name}"
    if pool.gpu_stack != AKS_MANAGED:
        return []
    if not pool.is_gpu:
        return [StackProblem(f"{at}.gpu_stack", "aks-managed is for GPU pools; remove it from this CPU pool")]
    out = []
    strategy = pool.sharing.strategy
    if strategy == "mig":
        out.append(StackProblem(f"{at}.sharing", "MIG is not supported on aks-managed pools here: the managed "
                                "Prometheus scrape drops the MIG instance labels, so slices' use cannot be "
                                "told apart; use gpu_stack: operator for a MIG pool"))
    elif strategy != "none":
        out.append(StackProblem(f"{at}.sharing", f"{strategy!r} needs the GPU operator's device plugin config; "
                                "AKS's managed device plugin has none. Use gpu_stack: operator, or no sharing"))
    if pool.max_nodes is not None:
        out.append(StackProblem(f"{at}.max_nodes", "AKS-managed GPU pools do not support the cluster autoscaler "
                                "during the preview: remove max_nodes and set min_nodes to the fixed size"))
    return out
