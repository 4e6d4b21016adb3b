"""An object's status conditions (pure), read one way: a Pod's, a Job's, a JobSet's, a Kueue Workload's."""
from __future__ import annotations


def condition(obj: dict | None, kind: str) -> dict | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def is_true(obj: dict | None, kind: str) -> bool:
    c = condition(obj, kind)
    return bool(c) and c.get("status") == "True"

