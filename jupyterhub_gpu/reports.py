"""A notebook's own training progress (`gpuhub.report(step=..., samples=..., loss=...)`): the one rule for what a
report may hold, how it travels and how it is read back (standard library only: the kernel and the runner import it).

How it travels: the kernel writes its latest report to the file named by $GPUHUB_PROGRESS_FILE (a private file
of the runner's, never in the user's home); the runner reads it every few seconds and prints it into the
job's log as a `[gpuhub-runner] HH:MM:SS report {...}` line; gpu-jobs, which already reads a running job's
log tail, finds those lines (`reports_in`) and computes the rates (model/throughput.py). No credentials, no
new permission: the pod log is the channel the service reads anyway.

Everything here is hostile input (the notebook writes the file and can print any line into the log): a report
is at most REPORT_MAX_BYTES of JSON, its numbers finite, bounded and non-negative (loss may be negative),
anything else in it dropped, and a line that breaks a rule is ignored, never an error.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from jupyterhub_gpu.contract import ENV_PROGRESS_FILE, PROGRESS_TAG

__all__ = ["ENV_PROGRESS_FILE", "REPORT_MAX_BYTES", "FIELDS", "validate", "parse", "encode", "report_message",
           "reports_in"]

#: The longest report, as JSON: eight short numbers fit in a quarter of it.
REPORT_MAX_BYTES = 512
#: Counters: whole numbers from 0 up to this (a float's exact range, so JSON round-trips them).
MAX_COUNT = 2 ** 53
#: Any other number: finite and at most this in magnitude.
MAX_VALUE = 1e18
#: field → (whole number?, may be negative?). `t`: when the kernel reported (Unix seconds); `step`: the
#: training step reached; `samples`: samples processed so far (cumulative); `total_steps`: the step it ends at.
FIELDS: dict[str, tuple[bool, bool]] = {"t": (False, False), "step": (True, False), "samples": (True, False),
                                        "total_steps": (True, False), "loss": (False, True)}
#: What the runner prints, and what gpu-jobs finds in a log tail: bounded, anchored to a whole line.
REPORT_WORD = "report"
REPORT_RE = re.compile(r"^" + re.escape(PROGRESS_TAG) + r" [0-9]{2}:[0-9]{2}:[0-9]{2} " + REPORT_WORD
                       + r" (\{[^\n]{0,%d}\})[ \t\r]*$" % (REPORT_MAX_BYTES - 2), re.MULTILINE)


def _number(name: str, value: Any) -> float | int:
    whole, signed = FIELDS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, not {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite")
    if value < 0 and not signed:
        raise ValueError(f"{name} must not be negative")
    if whole:
        if value != int(value) or value > MAX_COUNT:
            raise ValueError(f"{name} must be a whole number up to 2**53")
        return int(value)
    if abs(value) > MAX_VALUE:
        raise ValueError(f"{name} is out of range")
    return float(value)


def validate(fields: dict[str, Any]) -> dict[str, float | int]:
    """The report these fields make (None values left out); ValueError naming the first bad field. Unknown
    names are an error here (the notebook's own call: a typo should say so), dropped by `parse`."""
    out: dict[str, float | int] = {}
    for name, value in fields.items():
        if name not in FIELDS:
            raise ValueError(f"unknown field {name!r}; known: {', '.join(FIELDS)}")
        if value is not None:
            out[name] = _number(name, value)
    return out


def parse(text: str | bytes) -> dict[str, float | int] | None:
    """A report from one hostile JSON object (the progress file, a log line): its valid known fields, or None
    when it is too long, not a JSON object, or has no valid `t` (a report without a time says nothing)."""
    if len(text) > REPORT_MAX_BYTES:
        return None
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, dict):
        return None
    out: dict[str, float | int] = {}
    for name in FIELDS:
        if name in raw:
            try:
                out[name] = _number(name, raw[name])
            except (ValueError, OverflowError):
                continue
    return out if "t" in out else None


def encode(report: dict[str, float | int]) -> str:
    """One line of compact JSON, fields in FIELDS' order (what `parse` reads back)."""
    return json.dumps({k: report[k] for k in FIELDS if k in report}, separators=(",", ":"), allow_nan=False)


def report_message(report: dict[str, float | int]) -> str:
    """The runner's progress message for a report (`progress_line` adds the tag and the clock)."""
    return f"{REPORT_WORD} {encode(report)}"


def reports_in(log: str) -> list[dict[str, float | int]]:
    """Every valid report line of a log (tail), oldest first; any other line, or a malformed one, ignored."""
    return [r for m in REPORT_RE.finditer(log or "") if (r := parse(m.group(1))) is not None]
