"""The value types of a profiles file: durations, CPU and memory quantities, MIG layouts, names (pure).

Each parser says what was wrong and what to write instead; pydantic fields in model/profiles.py use them.
"""
from __future__ import annotations

import math
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PlainSerializer

from jupyterhub_gpu.model import durations, quantities

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?){0,3}$"

def duration_seconds(value: Any) -> int:
    """Seconds from `30m`, `2h`, `1h30m`, `90` (model/durations.py: bounded, linear), for every duration
    an admin or a user writes."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; {durations.EXAMPLES}")
    if isinstance(value, str):
        seconds = durations.parse(value)
    elif isinstance(value, int) or isinstance(value, float) and math.isfinite(value):
        seconds = value
    else:
        raise ValueError(f"a {type(value).__name__} ({'not finite' if isinstance(value, float) else 'not text'}) "
                         f"is not a duration; {durations.EXAMPLES}")
    if seconds <= 0:
        raise ValueError(f"{value!r} must be longer than zero; write e.g. 30m or 2h")
    return int(seconds)


def _quantity(kind: str):
    def parse(value: Any) -> Decimal:
        try:
            q = quantities.parse(value)
        except (ValueError, ArithmeticError):  # ArithmeticError: decimal.Overflow of "1e999999999"
            example = "2, 500m" if kind == "CPU" else "8Gi, 512Mi"
            raise ValueError(f"{value!r} is not a Kubernetes {kind} quantity; write e.g. {example}") from None
        if q < 0:
            raise ValueError(f"{value!r} must not be negative")
        return q

    return parse


def mig_layout_value(value: Any) -> str | dict[str, int]:
    """`all-1g.10gb`, `all-balanced` or a mapping of slice → count per GPU."""
    if isinstance(value, str) and value.startswith("all-"):
        return value
    if isinstance(value, dict) and value and all(
        isinstance(k, str) and isinstance(n, int) and not isinstance(n, bool) and n >= 1 for k, n in value.items()
    ):
        return value
    raise ValueError(
        f"{value!r} is not a MIG layout; write all-<slice> (e.g. all-1g.10gb), all-balanced, "
        "or a mapping of slice to count per GPU (e.g. {1g.10gb: 3, 2g.20gb: 2})"
    )


Seconds = Annotated[int, BeforeValidator(duration_seconds)]
CPU = Annotated[Decimal, BeforeValidator(_quantity("CPU")), PlainSerializer(lambda q: str(q), return_type=str)]
Bytes = Annotated[Decimal, BeforeValidator(_quantity("memory")), PlainSerializer(lambda q: int(q), return_type=int)]
Slug = Annotated[str, Field(pattern=DNS_LABEL)]
