"""What a notebook imports to tell its `%gpu_submit` job's progress: `gpuhub.report(step=..., samples=..., loss=...)`
or a logging handler. The status widget, the jobs panel and Prometheus then show samples/s, step time and the
job's ETA (docs/user-guide.md).

Outside a job (no $GPUHUB_PROGRESS_FILE: an interactive server) a report does nothing, so the same notebook runs
in both places. A bad number raises ValueError in the notebook (a typo should say so); writing never does.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from jupyterhub_gpu.reports import ENV_PROGRESS_FILE, FIELDS, encode, validate

__all__ = ["report", "ProgressHandler"]

#: At most one write per this many seconds (a loop may report every step); the runner reads every few seconds.
MIN_INTERVAL_S = 1.0
_lock = threading.Lock()
_last_write = 0.0


def report(step: int | None = None, samples: int | None = None, loss: float | None = None,
           total_steps: int | None = None, *, force: bool = False) -> bool:
    """Record the job's progress: the step reached, the samples processed so far (cumulative, not per step), the
    loss, and the step the run ends at (for the ETA). True when written; False outside a job, or when the last
    write was under a second ago (the next report carries the news; `force=True` writes anyway, and a report
    that reaches `total_steps` always does)."""
    global _last_write
    data = validate({"t": time.time(), "step": step, "samples": samples, "total_steps": total_steps, "loss": loss})
    path = os.environ.get(ENV_PROGRESS_FILE)
    if not path:
        return False
    with _lock:
        now = time.monotonic()
        final = step is not None and total_steps is not None and step >= total_steps
        if not (force or final) and now - _last_write < MIN_INTERVAL_S:
            return False
        tmp = f"{path}.tmp"
        try:  # whole or not at all: the runner never reads half a report
            with open(tmp, "w") as f:
                f.write(encode(data))
            os.replace(tmp, path)
        except OSError:
            return False
        _last_write = now
        return True


class ProgressHandler(logging.Handler):
    """A logging handler that reports the progress fields a record carries (`extra={"step": ..., "loss": ...}`);
    records without any are ignored, so it can sit on a training library's logger as it is."""

    def emit(self, record: logging.LogRecord) -> None:
        fields = {k: getattr(record, k) for k in FIELDS if k != "t" and getattr(record, k, None) is not None}
        if not fields:
            return
        try:
            report(**fields)
        except ValueError:
            self.handleError(record)
