"""Azure VM sizes as Kubernetes sees a node of them: what pods can be given (allocatable), not the VM's
nominal size (pure).

AKS keeps part of every node for the OS, the kubelet and eviction headroom, so four 1-CPU / 7 GiB
sessions do not fit a 4-vCPU / 28 GiB NC4as_T4_v3. Validation, the picker's cost shares and the Kueue
CPU/memory quota use these allocatable-shaped numbers; `gpuhub doctor` compares them with the real
nodes' allocatable and says when a node offers less. A VM size not listed here is *unknown*: nothing
is assumed (give the pool `node: {cpu, memory}` to have its profiles checked).

How a nominal size becomes allocatable here (AKS's documented reservations, Kubernetes ≥ 1.29):
- CPU: minus kube-reserved, 60m for 1 core, 100m for 2, 140m for 4, plus 10m per core above 4
  (AKS's table: 180m at 8, 260m at 16, 420m at 32, 740m at 64).
- Memory: Linux reports about 3% less than the VM's size; minus kube-reserved, 20 MiB per pod the
  node may run (`max_pods`, 110 here: kubenet and Azure CNI Overlay with `--max-pods 110`) + 50 MiB,
  and minus the 100 MiB hard eviction threshold. Rounded down to 0.1 GiB (whole MiB).
Daemonsets (GPU operator, CNI, monitoring) take part of allocatable too; doctor's free-capacity view is
the live one.
"""
from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal

#: vCPU and memory (GiB) of the VM sizes jupyterhub-gpu knows, as Azure lists them.
NOMINAL: dict[str, tuple[int, int]] = {
    "Standard_D4s_v5": (4, 16),
    "Standard_D8s_v5": (8, 32),
    "Standard_D16s_v5": (16, 64),
    "Standard_NC4as_T4_v3": (4, 28),
    "Standard_NC8as_T4_v3": (8, 56),
    "Standard_NC24ads_A100_v4": (24, 220),
    "Standard_NC48ads_A100_v4": (48, 440),
    "Standard_NC40ads_H100_v5": (40, 320),
    "Standard_ND96asr_v4": (96, 900),
    "Standard_ND96isr_H100_v5": (96, 1900),
}
MAX_PODS = 110
GIB = 2**30
MIB = 2**20
#: What the Linux kernel of a VM reports as MemTotal, relative to the VM size (about 97%).
KERNEL_SHARE = Decimal("0.97")
EVICTION_MIB = 100


def reserved_cpu_millis(cores: int) -> int:
    """AKS kube-reserved CPU for a node with this many cores."""
    if cores <= 4:
        return {1: 60, 2: 100, 3: 120, 4: 140}[max(cores, 1)]
    return 140 + 10 * (cores - 4)


def allocatable(vcpus: int, memory_gib: int, max_pods: int = MAX_PODS) -> tuple[Decimal, Decimal]:
    """(CPU cores, memory bytes) a node of this nominal size offers pods on AKS."""
    cpu = Decimal(vcpus * 1000 - reserved_cpu_millis(vcpus)) / 1000
    mem = Decimal(memory_gib) * GIB * KERNEL_SHARE - (20 * max_pods + 50 + EVICTION_MIB) * MIB
    tenths = (mem / GIB * 10).to_integral_value(rounding=ROUND_FLOOR)
    return cpu, Decimal(int(tenths * GIB / 10) // MIB * MIB)  # whole MiB, as a node reports it


def allocatable_of(instance_type: str | None) -> tuple[Decimal, Decimal] | None:
    """Allocatable CPU and memory of a known VM size; None for an unknown one (never a guess)."""
    nominal = NOMINAL.get(instance_type or "")
    return allocatable(*nominal) if nominal else None
