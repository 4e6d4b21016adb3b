"""DCGM exporter series as Prometheus returns them (pure): the metric names and which pod and device a
series' labels name. The culler's GPU evidence (services/culler/decide.py) and showback's GPU-hours used
(services/usage/accounting.py) read them the same way."""
from __future__ import annotations

#: DCGM's graphics-engine activity (0..1) works on MIG instances; GPU_UTIL (0..100) is whole-GPU only.
PROF_METRIC = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"


def pod_of(labels: dict[str, str]) -> tuple[str, str] | None:
    """(namespace, pod): `exported_*` when Prometheus renamed clashing labels, else `pod`/`namespace`."""
    if labels.get("exported_pod"):
        return labels.get("exported_namespace", ""), labels["exported_pod"]
    if labels.get("pod"):
        return labels.get("namespace", ""), labels["pod"]
    return None


def device_of(labels: dict[str, str]) -> str:
    """The device a series is about: 'gpu0', or 'gpu0/mig1(1g.10gb)' for a MIG instance."""
    dev = f"gpu{labels['gpu']}" if "gpu" in labels else labels.get("UUID") or labels.get("device") or "gpu"
    if labels.get("GPU_I_ID") not in (None, ""):
        dev += f"/mig{labels['GPU_I_ID']}"
        if labels.get("GPU_I_PROFILE"):
            dev += f"({labels['GPU_I_PROFILE']})"
    return dev
