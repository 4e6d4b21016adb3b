"""DCGM exporter series as Prometheus returns them (pure): the metric names and which pod and device a
series' labels name, and whether they are one pod's own use (`attribution`). The culler's GPU evidence
(services/culler/decide.py) and showback's GPU-hours used (services/usage/accounting.py) read them the same
way."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

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


# ------------------------------------------------------------------ whose use a series is

#: Pool sharing strategies whose pods share one device's DCGM series: with time-slicing and MPS the exporter
#: reports the device's utilisation (and framebuffer use) for every pod on it, so an idle pod beside a busy
#: neighbour reads busy. MIG instances have series of their own (GPU_I_ID) and stay attributable.
SHARED_STRATEGIES = {"time-slicing": "time-sliced", "mps": "MPS-shared"}
DEVICE, SHARED_DEVICE, NO_SERIES, NO_GPU = "device", "shared-device", "no-series", "no-gpu"


@dataclass(frozen=True)
class Attribution:
    """Which GPU evidence counts as one pod's own use (`attribution`), and the words that say so."""

    source: str  # DEVICE | SHARED_DEVICE | NO_SERIES | NO_GPU
    note: str  # why, for a culler decision's `why` and a report row's evidence

    @property
    def gpu_counts(self) -> bool:
        """May the pod's DCGM activity and framebuffer series count as its own use?"""
        return self.source == DEVICE


def attribution(strategy: str | None, gpu_model: str = "", sharers: int = 1,
                devices: Sequence[str] = ()) -> Attribution:
    """Decide a pod's GPU evidence from its pool's sharing `strategy` ('none', 'time-slicing', 'mps', 'mig';
    None: no GPU) and the devices its DCGM series name (`device_of`; empty: no series).

    A whole GPU or a MIG slice: the series are the pod's own (DEVICE) when there are any. A time-sliced or
    MPS GPU: never (SHARED_DEVICE), with or without series; what is attributable there is the kernel's
    activity (the hub's last_activity). Per-process GPU memory (NVML's running processes, read inside the
    container) would be attributable too; nothing reports it yet, so it is not used.
    """
    if strategy is None:
        return Attribution(NO_GPU, "no GPU")
    if strategy in SHARED_STRATEGIES:
        what = f"{SHARED_STRATEGIES[strategy]} {gpu_model or 'GPU'}".strip()
        others = f"up to {sharers - 1} other pods" if sharers > 1 else "other pods"
        return Attribution(SHARED_DEVICE, f"GPU utilisation not used: {what} shared with {others}")
    if not devices:
        return Attribution(NO_SERIES, "no DCGM series for this pod")
    kind = "MIG slice" if strategy == "mig" else "GPU"
    shown = ", ".join(list(devices)[:4]) + (f" and {len(devices) - 4} more" if len(devices) > 4 else "")
    return Attribution(DEVICE, f"DCGM of its own {kind} ({shown})")
