"""What a node of a pool says about itself once the NVIDIA stack runs on it (pure).

GPU feature discovery (GFD), the device plugin and mig-manager label each GPU node; these are the
labels a healthy node of a pool carries. `gpuhub doctor` compares live nodes with them; test clusters
build their nodes from them (they follow the product's facts, never the reverse).
"""
from __future__ import annotations

from jupyterhub_gpu.model.gpu_stack import MANAGED_GPU_LABEL, MANAGED_GPU_LABEL_VALUE, is_managed
from jupyterhub_gpu.model.profiles import MIGSharing, MPSSharing, Pool, TimeSlicing, slice_memory_gb

#: GPU feature discovery's label saying the node's GPUs run MPS (its config has `sharing.mps` and no GPU is
#: MIG-enabled); the device plugin's MPS control daemon DaemonSet runs only on nodes labelled "true".
MPS_CAPABLE_LABEL = "nvidia.com/mps.capable"


def gpu_labels(pool: Pool) -> dict[str, str]:
    """The `nvidia.com/*` labels GFD, the device plugin and mig-manager put on a node of this pool (on an
    AKS-managed pool: AKS's own label for its managed GPU stack)."""
    if not pool.is_gpu:
        return {}
    if is_managed(pool):  # AKS's managed stack runs no GFD: its one label says the stack was installed
        return {MANAGED_GPU_LABEL: MANAGED_GPU_LABEL_VALUE}
    model, gpus, sharing = pool.gpu.spec, pool.gpu.count_per_node, pool.sharing
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": model.product,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": str(model.memory_mib),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": str(model.supports_mig).lower(),
        "nvidia.com/mig.strategy": "none",
    }
    if isinstance(sharing, (TimeSlicing, MPSSharing)):
        labels["nvidia.com/gpu.replicas"] = str(sharing.replicas)
        labels["nvidia.com/gpu.sharing-strategy"] = sharing.strategy  # time-slicing | mps
        if not sharing.rename_by_default:
            labels["nvidia.com/gpu.product"] = model.product + "-SHARED"
        if isinstance(sharing, MPSSharing):
            labels[MPS_CAPABLE_LABEL] = "true"
    elif isinstance(sharing, MIGSharing):
        layout = pool.mig_layout
        labels["nvidia.com/mig.strategy"] = sharing.mig_strategy
        labels["nvidia.com/mig.config"] = pool.mig_config_name()
        labels["nvidia.com/mig.config.state"] = "success"
        for slice_name, per_gpu in layout.items():
            labels[f"nvidia.com/mig-{slice_name}.count"] = str(per_gpu * gpus)
        if sharing.mig_strategy == "single":
            first = next(iter(layout))
            labels["nvidia.com/gpu.product"] = f"{model.product}-MIG-{first}"
            labels["nvidia.com/gpu.count"] = str(sum(layout.values()) * gpus)
            labels["nvidia.com/gpu.memory"] = str(slice_memory_gb(first) * 1024)
    return labels
