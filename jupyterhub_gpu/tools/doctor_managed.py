"""`gpuhub doctor`'s rows for an AKS-managed GPU pool (pure): its device plugin and DCGM exporter.

On such a pool (`gpu_stack: aks-managed`, model/gpu_stack.py) AKS runs the NVIDIA device plugin, DCGM and the
DCGM exporter as systemd services on each node: there is no DaemonSet or pod to find. What the API shows of
them, and what these rows read:
- the node label `kubernetes.azure.com/dcgm-exporter=enabled`, which AKS's node bootstrap sets only after it
  installed and started the managed services: a node without it was not created with the managed stack;
- Node Problem Detector's conditions `UnhealthyNvidiaDevicePlugin` and `UnhealthyNvidiaDCGMServices`
  (status "True": unhealthy). AKS documents them for managed pools, but a node may have neither (NPD not
  installed there); a missing condition is said, not counted as a failure;
- the GPUs the device plugin advertises: the pool's `allocatable` row (doctor.py) checks those.
Simulated nodes (the dev cluster) have no GPU and no services: a simulated row, as for the GPU operator's.
"""
from __future__ import annotations

from typing import Any

from jupyterhub_gpu.contract import SIMULATED_NODE_LABEL as SIMULATED_LABEL
from jupyterhub_gpu.model.gpu_stack import (
    DCGM_CONDITION,
    DEVICE_PLUGIN_CONDITION,
    MANAGED_EXPORTER_PORT,
    MANAGED_GPU_LABEL,
    MANAGED_GPU_LABEL_VALUE,
)
from jupyterhub_gpu.model.node_pools import node_labels
from jupyterhub_gpu.tools.doctor_checks import FAIL, OK, SIMULATED, Check

RECREATE = ("recreate the pool with the managed stack (deploy/aks-nodepools.sh: az aks nodepool add "
            "--enable-managed-gpu=true; the stack cannot be switched on in place), then move its workloads")


def _names(nodes: list[dict[str, Any]], limit: int = 3) -> str:
    names = [n["metadata"]["name"] for n in nodes]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def condition(node: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The node's condition of this type, if it reports one."""
    conds = (node.get("status") or {}).get("conditions") or []
    return next((c for c in conds if isinstance(c, dict) and c.get("type") == kind), None)


def _service_row(sec: str, row: str, nodes: list[dict[str, Any]], kind: str, what: str, fix: str) -> Check:
    unlabelled = [n for n in nodes if node_labels(n).get(MANAGED_GPU_LABEL) != MANAGED_GPU_LABEL_VALUE]
    if unlabelled:
        return Check(sec, row, FAIL, f"{_names(unlabelled)} lack {MANAGED_GPU_LABEL}={MANAGED_GPU_LABEL_VALUE}: "
                                     "AKS did not install its managed GPU stack there", RECREATE)
    sick = [n for n in nodes if (condition(n, kind) or {}).get("status") == "True"]
    if sick:
        reason = (condition(sick[0], kind) or {}).get("reason") or kind
        return Check(sec, row, FAIL, f"{kind}=True on {_names(sick)} ({reason})", fix)
    unreported = [n for n in nodes if condition(n, kind) is None]
    note = (f"; {len(unreported)} of {len(nodes)} nodes report no {kind} condition (Node Problem Detector not "
            "there), so only the label says it" if unreported else f"; {kind}=False")
    return Check(sec, row, OK, f"{what} on all {len(nodes)} nodes ({MANAGED_GPU_LABEL}={MANAGED_GPU_LABEL_VALUE})"
                               + note)


def check_managed_stack(name: str, nodes: list[dict[str, Any]]) -> list[Check]:
    """The device plugin and DCGM exporter rows of an AKS-managed GPU pool's nodes (none: no rows)."""
    sec = f"pool {name}"
    if not nodes:
        return []
    if all(node_labels(n).get(SIMULATED_LABEL) == "true" for n in nodes):
        why = (f"simulated nodes ({SIMULATED_LABEL}=true): no real GPU and no AKS services; on AKS the managed "
               "{} runs as a systemd service on each node")
        return [Check(sec, "device plugin", SIMULATED, why.format("device plugin")),
                Check(sec, "DCGM exporter", SIMULATED, why.format("DCGM exporter"))]
    return [
        _service_row(sec, "device plugin", nodes, DEVICE_PLUGIN_CONDITION, "AKS-managed device plugin",
                     "the nvidia-device-plugin service on the node failed: read its journal (az aks nodepool "
                     "show --query gpuProfile; kubectl debug node/<node>), or reimage the node"),
        _service_row(sec, "DCGM exporter", nodes, DCGM_CONDITION,
                     f"AKS-managed DCGM exporter (port {MANAGED_EXPORTER_PORT})",
                     "the nvidia-dcgm / nvidia-dcgm-exporter services on the node failed: GPU metrics (the culler's "
                     "evidence, showback's GPU-hours used) are missing there until they run"),
    ]
