"""Timestamps as Kubernetes and the hub write them (pure): ISO 8601, read one way."""
from __future__ import annotations

from datetime import datetime, timezone


def parse_time(value: str | None) -> datetime | None:
    """The hub's and Kubernetes' ISO 8601 timestamps ('2026-01-01T12:00:00.123456Z'); naive ones are UTC."""
    if not value:
        return None
    try:
        dt = datetime.fromisoformat(value)  # fast; Python 3.11 reads the hub's format, 'Z' included
    except ValueError:
        from dateutil.parser import isoparse

        dt = isoparse(value)
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)

