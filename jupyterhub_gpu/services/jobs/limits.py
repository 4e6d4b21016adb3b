"""Bounds on what one request to gpu-jobs may carry, checked before anything else happens (pure).

Hostile input is normal: every malformed or oversized request becomes a `JobRequestError` (400) or
`TooLarge` (413) whose message names the limit, never a 500 and never a created object.
"""
from __future__ import annotations

import json
import re
from typing import Any

from jupyterhub_gpu.builders.jobs import JobRequestError

#: A request body: what a snapshot can be. The client sends the notebook without outputs (the snapshot
#: drops them anyway), and a snapshot is at most 900 KiB gzipped (builders.jobs.MAX_SNAPSHOT_BYTES), which
#: code and markdown reach at about 4 MiB; a bigger body could never become a job.
MAX_BODY_BYTES = 4 * 2**20
#: Tornado stops reading beyond this (a bare 400); between the two a body is read, dropped and answered 413.
HARD_BODY_BYTES = 4 * MAX_BODY_BYTES
#: JSON values in a body (objects, arrays, strings, numbers...): a notebook of 4 MiB holds ~100 k lines.
MAX_JSON_VALUES = 250_000
#: Nesting of the JSON body (a notebook is ~6 deep; cell metadata adds a few).
MAX_DEPTH = 64
MAX_PARAMETERS = 64
#: One parameter value as JSON; all of them travel in one environment variable, which Linux caps at 128 KiB.
MAX_PARAMETER_BYTES = 16 * 1024
MAX_PARAMETERS_BYTES = 96 * 1024
MAX_PARAMETER_NAME = 100
MAX_NOTEBOOK_PATH = 1024
MAX_LOG_TAIL = 2**20
DEFAULT_LOG_TAIL = 64 * 1024
JOB_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
CELL_TYPES = ("code", "markdown", "raw")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class TooLarge(JobRequestError):
    """The request is bigger than a limit (413)."""


def _reject_constant(name: str):
    raise JobRequestError(f"the request body contains {name}; JSON numbers must be finite")


def too_large(size: int) -> TooLarge:
    return TooLarge(f"the request body is {size / 2**20:.1f} MiB; the limit is {MAX_BODY_BYTES // 2**20} MiB. "
                    "Move data out of the notebook (read it from a file) and submit again.")


def parse_body(raw: bytes) -> Any:
    """The JSON body: finite numbers only, at most MAX_DEPTH deep and MAX_JSON_VALUES values, valid Unicode,
    at most MAX_BODY_BYTES. CPU-bound on big bodies: gpu-jobs runs it off its event loop (planner.py)."""
    if len(raw) > MAX_BODY_BYTES:
        raise too_large(len(raw))
    try:
        data = json.loads(raw or b"{}", parse_constant=_reject_constant)
    except JobRequestError:
        raise
    except RecursionError:
        raise JobRequestError(f"the request body is nested too deeply; the limit is {MAX_DEPTH} levels") from None
    except ValueError as e:  # also UnicodeDecodeError
        raise JobRequestError(f"the request body is not JSON: {str(e)[:200]}") from None
    check_structure(data)
    return data


def check_structure(data: Any) -> None:
    """At most MAX_DEPTH levels and MAX_JSON_VALUES values; every string valid Unicode (no lone surrogates:
    they cannot be sent on)."""
    stack, seen = [(data, 1)], 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if seen > MAX_JSON_VALUES:
            raise TooLarge(f"the request body holds more than {MAX_JSON_VALUES} JSON values; the limit is "
                           f"{MAX_JSON_VALUES}. Move data out of the notebook (read it from a file).")
        if depth > MAX_DEPTH:
            raise JobRequestError(f"the request body is nested too deeply; the limit is {MAX_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((k, depth) for k in value)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise JobRequestError("the request body contains invalid Unicode (a lone surrogate)") from None


def log_tail(value: str | None) -> int:
    """`?tail=BYTES`: a whole number from 1 to MAX_LOG_TAIL (default DEFAULT_LOG_TAIL)."""
    if value is None or value == "":
        return DEFAULT_LOG_TAIL
    if not re.fullmatch(r"[0-9]{1,8}", value) or not 1 <= int(value) <= MAX_LOG_TAIL:
        raise JobRequestError(f"tail must be a whole number of bytes from 1 to {MAX_LOG_TAIL}; got {value[:40]!r}")
    return int(value)


def job_name(value: str) -> str:
    if not JOB_NAME.fullmatch(value):
        raise JobRequestError(f"{value[:80]!r} is not a job name: lowercase letters, digits and '-', "
                              "at most 63 characters")
    return value


def check_notebook_path(path: Any) -> str:
    """Relative to the user's home, inside it: no absolute path, no `..`, no NUL or control characters."""
    if not isinstance(path, str) or not path.endswith(".ipynb"):
        raise JobRequestError("notebook_path must be the notebook's path ending in .ipynb")
    if len(path) > MAX_NOTEBOOK_PATH:
        raise TooLarge(f"notebook_path is {len(path)} characters; the limit is {MAX_NOTEBOOK_PATH}")
    if _CONTROL.search(path):
        raise JobRequestError("notebook_path must not contain NUL or control characters")
    parts = path.replace("\\", "/").split("/")
    if path.startswith(("/", "\\", "~")) or re.match(r"[A-Za-z]:", path):
        raise JobRequestError(f"notebook_path {path[:80]!r} must be relative to your home folder, not absolute")
    if ".." in parts:
        raise JobRequestError(f"notebook_path {path[:80]!r} must be relative to your home folder, inside it (no '..')")
    return path


def check_notebook(nb: Any) -> None:
    """Enough of nbformat 4 for the runner: a `cells` list of cell objects with text sources."""
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise JobRequestError("notebook must be the notebook's JSON content (nbformat 4)")
    if not isinstance(nb.get("metadata", {}), dict):
        raise JobRequestError("notebook.metadata must be an object")
    for i, cell in enumerate(nb["cells"]):
        where = f"notebook.cells[{i}]"
        if not isinstance(cell, dict):
            raise JobRequestError(f"{where} must be a cell object; got {type(cell).__name__}")
        if cell.get("cell_type") not in CELL_TYPES:
            raise JobRequestError(f"{where}.cell_type must be one of {', '.join(CELL_TYPES)}")
        source = cell.get("source", "")
        if not (isinstance(source, str) or isinstance(source, list) and all(isinstance(s, str) for s in source)):
            raise JobRequestError(f"{where}.source must be text or a list of lines")
        if not isinstance(cell.get("metadata", {}), dict):
            raise JobRequestError(f"{where}.metadata must be an object")
        if not isinstance(cell.get("outputs", []), list):
            raise JobRequestError(f"{where}.outputs must be a list")


def check_parameters(params: Any) -> dict[str, Any]:
    """An object of at most MAX_PARAMETERS names → JSON values, each and all within their size limits."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise JobRequestError("parameters must be an object of name: value")
    if len(params) > MAX_PARAMETERS:
        raise TooLarge(f"{len(params)} parameters; the limit is {MAX_PARAMETERS}")
    long = [k for k in params if len(k) > MAX_PARAMETER_NAME]
    if long:
        raise TooLarge(f"parameter name {long[0][:40]!r}... is too long; the limit is {MAX_PARAMETER_NAME} characters")
    for k, v in params.items():
        size = len(json.dumps(v))
        if size > MAX_PARAMETER_BYTES:
            raise TooLarge(f"parameter {k!r} is {size} bytes as JSON; the limit is {MAX_PARAMETER_BYTES} bytes "
                           "per value. Pass large inputs as files.")
    total = len(json.dumps(params))
    if total > MAX_PARAMETERS_BYTES:
        raise TooLarge(f"the parameters are {total} bytes as JSON; the limit is {MAX_PARAMETERS_BYTES} bytes. "
                       "Pass large inputs as files.")
    return params
