"""What AKS must be told to create each pool of the profiles file (pure): the ONE set of per-pool facts that
`deploy.render_aks_script()` (`az aks nodepool add`) and `terraform.render_terraform()`
(`azurerm_kubernetes_cluster_node_pool`) both turn into their own syntax, so the two cannot drift.

`aks_node_pool(name, pool)` gives, for one pool: the agent pool name, VM size, the labels and taints to set
(the admin's own, plus the NVIDIA stack's `nvidia.com/device-plugin.config` and `nvidia.com/mig.config` labels),
autoscaling bounds or a fixed count, spot priority with its eviction policy and price cap, and who installs the
GPU software: on `gpu_stack: operator` pools AKS installs no driver (the NVIDIA GPU operator does); on
`aks-managed` pools AKS installs its managed stack (`managed_gpu`), and the nodes are labelled so that a GPU
operator installed for other pools deploys none of its operands there (model/gpu_stack.py). Besides, what
AKS itself puts on a spot pool (`aks_labels`, `aks_taints`): the CLI leaves those to AKS; Terraform must declare
them, or every plan would show AKS's label and taint as drift to remove.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from jupyterhub_gpu.model.gpu_stack import OPERATOR_OPERANDS_LABEL, is_managed
from jupyterhub_gpu.model.profiles import SPOT_TAINT, MIGSharing, MPSSharing, Pool, ProfilesConfig, Taint
from jupyterhub_gpu.model.sharing_rules import MIG_DISABLED

AGENTPOOL = "kubernetes.azure.com/agentpool"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
#: Labels under this prefix are AKS's own: AKS sets them, a node pool request never does.
AKS_LABEL_PREFIX = "kubernetes.azure.com/"
#: The pool name whose CPU pool comes with the cluster (`az aks create --nodepool-name system`).
SYSTEM_POOL = "system"
#: AKS's GPUDriver value for "do not install the driver" (the GPU operator installs it).
GPU_DRIVER_NONE = "None"
SPOT_EVICTION_POLICY = "Delete"
#: The spot price cap: -1 is "up to the on-demand price" (never evicted for price, only for capacity).
SPOT_MAX_PRICE = -1


def taint_text(t: Taint) -> str:
    """A taint as AKS takes it (`key=value:Effect`)."""
    return f"{t.key}={t.value}:{t.effect}"


@dataclass(frozen=True)
class AKSNodePool:
    """One AKS agent pool as jupyterhub-gpu needs it (the facts both renderers use)."""

    pool: str                          # the pool's name in the profiles file
    name: str                          # the AKS agent pool name (`kubernetes.azure.com/agentpool`)
    comment: str                       # one line about it, safe inside a `#` comment of any renderer
    with_cluster: bool                 # the system pool: created with the cluster, not here
    vm_size: str | None
    labels: dict[str, str]             # to set on the pool's nodes
    taints: tuple[str, ...]            # the admin's own, `key=value:Effect`
    autoscale: bool
    node_count: int                    # the initial count (autoscaled) or the fixed one
    min_count: int | None              # autoscaling bounds (None: a fixed-size pool)
    max_count: int | None
    spot: bool
    gpu_driver: str | None             # GPU_DRIVER_NONE on operator GPU pools, else None (not said)
    managed_gpu: bool = False          # AKS installs driver, device plugin and DCGM exporter (preview)
    mode: Literal["User"] = "User"
    os_type: Literal["Linux"] = "Linux"
    aks_labels: dict[str, str] = field(default_factory=dict)  # what AKS itself puts on the pool (spot)
    aks_taints: tuple[str, ...] = ()

    @property
    def priority(self) -> Literal["Regular", "Spot"]:
        return "Spot" if self.spot else "Regular"

    @property
    def eviction_policy(self) -> str | None:
        return SPOT_EVICTION_POLICY if self.spot else None

    @property
    def spot_max_price(self) -> int | None:
        return SPOT_MAX_PRICE if self.spot else None


def aks_pool_name(name: str, pool: Pool) -> str:
    """The AKS agent pool name: the `kubernetes.azure.com/agentpool` value the file selects on."""
    return pool.node_selector.get(AGENTPOOL, name)


def node_labels_for_aks(name: str, pool: Pool) -> dict[str, str]:
    """Labels a node pool request must set (AKS sets kubernetes.azure.com/* itself)."""
    labels = {k: v for k, v in pool.node_selector.items() if not k.startswith(AKS_LABEL_PREFIX)}
    if is_managed(pool):  # no device plugin config or MIG layout: AKS's stack takes none
        labels[OPERATOR_OPERANDS_LABEL] = "false"
        return labels
    if pool.is_gpu:
        labels[DEVICE_PLUGIN_CONFIG_LABEL] = name
    if isinstance(pool.sharing, MIGSharing):
        labels[MIG_CONFIG_LABEL] = pool.mig_config_name()
    elif isinstance(pool.sharing, MPSSharing) and pool.gpu.spec.supports_mig:
        labels[MIG_CONFIG_LABEL] = MIG_DISABLED  # MPS needs MIG off; mig-manager turns it off on these GPUs
    return labels


def one_line(text: str) -> str:
    """Text for a `#` comment: no line breaks or other unprintable characters that could end it."""
    return "".join(c if c.isprintable() else " " for c in text)


def aks_node_pool(name: str, pool: Pool) -> AKSNodePool:
    """The facts of one pool of the file."""
    aks_name = aks_pool_name(name, pool)
    what = pool.label + (" (spot)" if pool.spot and "spot" not in pool.label else "")
    spot_key = SPOT_TAINT["key"]
    autoscale = bool(pool.max_nodes)
    return AKSNodePool(
        pool=name, name=aks_name, comment=one_line(f"pool {name!r}: {what}"),
        with_cluster=not pool.is_gpu and aks_name == SYSTEM_POOL,
        vm_size=pool.instance_type,
        labels=node_labels_for_aks(name, pool),
        # AKS adds the spot taint to spot pools itself; the admin's own taints are set here.
        taints=tuple(taint_text(t) for t in pool.taints if t.key != spot_key),
        autoscale=autoscale,
        node_count=pool.min_nodes if autoscale else max(pool.min_nodes, 1),
        min_count=pool.min_nodes if autoscale else None,
        max_count=pool.max_nodes if autoscale else None,
        spot=pool.spot,
        gpu_driver=GPU_DRIVER_NONE if pool.is_gpu and not is_managed(pool) else None,
        managed_gpu=is_managed(pool),
        aks_labels={spot_key: SPOT_TAINT["value"]} if pool.spot else {},
        aks_taints=(taint_text(Taint(**SPOT_TAINT)),) if pool.spot else (),
    )


def aks_node_pools(cfg: ProfilesConfig) -> list[AKSNodePool]:
    """Every pool of the file, in its order (the system pool too: `with_cluster` says it is not created here)."""
    return [aks_node_pool(name, pool) for name, pool in cfg.pools.items()]
