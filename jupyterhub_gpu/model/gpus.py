"""What NVIDIA hardware offers: GPU models, their MIG slice tables and the labels GFD publishes.

Pure data checked against NVIDIA's MIG user guide and the device plugin / GPU feature discovery
docs. Everything that turns a pool into resource names and slot counts starts here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

MIG_PROFILE_RE = re.compile(r"^(?P<g>[1-7])g\.(?P<mem>\d+)gb$")

#: Compute slices (g) of one full GPU; memory is split into 8 slices.
GPU_COMPUTE_SLICES = 7
GPU_MEMORY_SLICES = 8


@dataclass(frozen=True)
class GPUModel:
    """One GPU model: memory, the product label GFD writes, and its MIG slices (max count per GPU)."""

    name: str
    memory_gib: int
    product: str
    mig: dict[str, int] = field(default_factory=dict)

    @property
    def memory_mib(self) -> int:
        return self.memory_gib * 1024

    @property
    def supports_mig(self) -> bool:
        return bool(self.mig)

    def mig_memory_units(self, slice_name: str) -> int:
        """How many of the GPU's 8 memory slices one MIG slice takes (1g.10gb → 1, 3g.40gb → 4)."""
        smallest = min(int(MIG_PROFILE_RE.match(s)["mem"]) for s in self.mig)
        return max(1, round(int(MIG_PROFILE_RE.match(slice_name)["mem"]) / smallest))

    def balanced_layout(self) -> dict[str, int]:
        """mig-parted's `all-balanced`: two of the smallest 1g, one 2g and one 3g slice."""
        by_g: dict[int, list[str]] = {}
        for s in self.mig:
            by_g.setdefault(int(MIG_PROFILE_RE.match(s)["g"]), []).append(s)
        smallest_1g = min(by_g[1], key=lambda s: int(MIG_PROFILE_RE.match(s)["mem"]))
        return {smallest_1g: 2, by_g[2][0]: 1, by_g[3][0]: 1}


_MIG_80 = {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}

GPU_MODELS: dict[str, GPUModel] = {
    m.name: m
    for m in (
        GPUModel("T4", 16, "Tesla-T4"),
        GPUModel("L4", 24, "NVIDIA-L4"),
        GPUModel("A10", 24, "NVIDIA-A10"),
        GPUModel("V100", 16, "Tesla-V100-PCIE-16GB"),
        GPUModel("L40S", 48, "NVIDIA-L40S"),
        GPUModel(
            "A100-40GB", 40, "NVIDIA-A100-SXM4-40GB",
            {"1g.5gb": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},
        ),
        GPUModel("A100-80GB", 80, "NVIDIA-A100-80GB-PCIe", dict(_MIG_80)),  # Azure NC A100 v4: PCIe
        GPUModel("H100-80GB", 80, "NVIDIA-H100-80GB-HBM3", dict(_MIG_80)),
        GPUModel(
            "H100-NVL-94GB", 94, "NVIDIA-H100-NVL",
            {"1g.12gb": 7, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1},
        ),
        GPUModel(
            "H200-141GB", 141, "NVIDIA-H200",
            {"1g.18gb": 7, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1},
        ),
    )
}


def mig_resource_name(slice_name: str) -> str:
    """The extended resource the device plugin advertises for a slice under the mixed strategy."""
    return f"nvidia.com/mig-{slice_name}"


def mig_layout_problems(model: GPUModel, layout: dict[str, int]) -> list[str]:
    """Why a per-GPU slice layout cannot be carved out of one GPU of this model (empty when it can)."""
    problems = []
    for s, n in layout.items():
        if s not in model.mig:
            problems.append(f"{s!r} is not a MIG profile of {model.name}; valid: {', '.join(model.mig)}")
        elif n > model.mig[s]:
            problems.append(f"{model.name} fits at most {model.mig[s]} x {s} per GPU, not {n}")
    if problems:
        return problems
    compute = sum(int(MIG_PROFILE_RE.match(s)["g"]) * n for s, n in layout.items())
    memory = sum(model.mig_memory_units(s) * n for s, n in layout.items())
    if compute > GPU_COMPUTE_SLICES:
        problems.append(f"the slices use {compute} compute slices; one {model.name} has {GPU_COMPUTE_SLICES}")
    if memory > GPU_MEMORY_SLICES:
        problems.append(f"the slices use {memory} memory slices; one {model.name} has {GPU_MEMORY_SLICES}")
    return problems
