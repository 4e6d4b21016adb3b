"""Kubernetes quantities, read and written one way (pure): read with the Kubernetes client's own
`parse_quantity`; written as quantities for manifests (`cpu`, `memory`) or as text for people (`human_bytes`).
"""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

KI, MI, GI = 2**10, 2**20, 2**30
#: Kubernetes keeps quantities in 63 bits; anything as large is a typo or hostile.
LIMIT = 2**63


def parse(value: Any) -> Decimal:
    """`'500m'` → 0.5, `'8Gi'` → 8589934592, `2` → 2; ValueError for anything that is not a quantity
    (booleans included, which YAML and JSON may hand over for a number)."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    try:
        q = parse_quantity(value)
    except (ValueError, TypeError, ArithmeticError):
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from None
    if not q.is_finite() or abs(q) >= LIMIT:  # parse_quantity takes `inf`, `NaN` and `1e400000`
        raise ValueError(f"{value!r} is not a Kubernetes quantity (out of range)")
    return q


def parse_or_none(value: Any) -> Decimal | None:
    """`parse`, or None when the value is not a quantity (what a live object may carry)."""
    try:
        return parse(value)
    except ValueError:
        return None


def cpu(cores: Decimal | float | int) -> str:
    """CPU for a manifest: whole cores as `2`, else millicores `500m` (rounded down to 1m)."""
    millis = int(Decimal(str(cores)) * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def memory(num_bytes: Decimal | float | int) -> str:
    """Bytes (memory, storage) for a manifest: rounded down to whole MiB, written `8Gi` when whole GiB,
    else `512Mi`."""
    mib = int(Decimal(str(num_bytes)) // MI)
    return f"{mib // 1024}Gi" if mib and mib % 1024 == 0 else f"{mib}Mi"


def human_bytes(num_bytes: Decimal | float | int) -> str:
    """Bytes for people: `8 GiB`, `8.5 GiB`, `512 MiB` (rounded to one decimal at most)."""
    value = Decimal(str(num_bytes))
    unit, name = (GI, "GiB") if value >= GI else (MI, "MiB")
    tenths = (value / unit * 10).to_integral_value(rounding=ROUND_HALF_UP) / 10
    return f"{tenths.normalize():f} {name}"
