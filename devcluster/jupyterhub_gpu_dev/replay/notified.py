"""Notifications in the day replay: every user who submits a job opts in to all of its events on one admin
webhook (Slack-shaped, received on loopback by `jupyterhub_gpu_dev.webhook_sink`), and at the end each event the jobs'
final statuses imply must have arrived at least once, and none twice.

Pure but for `opt_in` (one PUT per user through gpu-jobs' own API, as the JupyterLab panel does it).
"""
from __future__ import annotations

import re
import time
from typing import Any, Callable, Iterable

import requests

from jupyterhub_gpu.contract import (
    FAILED,
    NOTIFY_ADMITTED,
    NOTIFY_FAILED,
    NOTIFY_PREEMPTED,
    NOTIFY_RESUMED,
    NOTIFY_SUCCEEDED,
    SUCCEEDED,
)

#: The admin's webhook the replay's users opt in to (its name in GPUHUB_NOTIFY_WEBHOOKS) and its receiver path.
HOOK, HOOK_PATH = "replay-hook", "/replay"
JOB_EVENTS = [NOTIFY_ADMITTED, NOTIFY_PREEMPTED, NOTIFY_RESUMED, NOTIFY_SUCCEEDED, NOTIFY_FAILED]
#: A job's events that happen once in its life: a second delivery of one is a duplicate (preempted and resumed
#: may repeat, once per preemption).
ONCE = (NOTIFY_ADMITTED, NOTIFY_SUCCEEDED, NOTIFY_FAILED)
#: The title words of each kind (services/notify/events.py's titles, "GPU job NAME started", ...).
_WORDS = {"started": NOTIFY_ADMITTED, "was preempted": NOTIFY_PREEMPTED, "resumed": NOTIFY_RESUMED,
          "succeeded": NOTIFY_SUCCEEDED, "failed": NOTIFY_FAILED}
_TITLE = re.compile(r"^GPU job (?P<job>[a-z0-9-]+) (?P<words>started|was preempted|resumed|succeeded|failed) "
                    r"\(for (?P<user>[^)]+)\)")


def webhooks(url: str) -> dict[str, str]:
    """GPUHUB_NOTIFY_WEBHOOKS for the replay's gpu-jobs: the one Slack-shaped hook on the receiver."""
    return {HOOK: f"slack:{url}{HOOK_PATH}"}


def opt_in(jobs_url: str, token: str) -> None:
    """The token's user asks for every job event on the replay's hook (raises on a refusal)."""
    r = requests.put(f"{jobs_url}/notifications", json={"channels": {HOOK: JOB_EVENTS}}, timeout=30,
                     headers={"Authorization": f"token {token}"})
    r.raise_for_status()


def parse(received: Iterable[tuple[str, dict]]) -> list[tuple[str, str, str]]:
    """(job, kind, user) of each Slack-shaped post to the replay's hook; posts of another shape are skipped."""
    out = []
    for path, body in received:
        m = _TITLE.match(str((body or {}).get("text") or "")) if path == HOOK_PATH else None
        if m:
            out.append((m["job"], _WORDS[m["words"]], m["user"]))
    return out


def expected(jobs: Iterable[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(job, kind, user) each job's last status implies: admitted once it ran (a failed job may never have), preempted
    if it was, and its end."""
    out = set()
    for rec in jobs:
        name, user, state = rec.get("name"), rec.get("user"), rec.get("state")
        if not name or not user:
            continue
        if state == SUCCEEDED or rec.get("bound") is not None or rec.get("preempted"):  # it was admitted
            out.add((name, NOTIFY_ADMITTED, user))
        if rec.get("preempted"):
            out.add((name, NOTIFY_PREEMPTED, user))
        if state == SUCCEEDED:
            out.add((name, NOTIFY_SUCCEEDED, user))
        elif state == FAILED:
            out.add((name, NOTIFY_FAILED, user))
    return out


def check(jobs: Iterable[dict[str, Any]], received: Iterable[tuple[str, dict]]) -> dict[str, Any]:
    """What was expected, delivered, missing and doubled (an ONCE kind of a job more than once)."""
    want, got = expected(jobs), parse(received)
    counts: dict[tuple[str, str, str], int] = {}
    for event in got:
        counts[event] = counts.get(event, 0) + 1
    return {"expected": len(want), "delivered": len(got),
            "missing": sorted(f"{job} {kind} (for {user})" for job, kind, user in want - set(counts)),
            "twice": sorted(f"{job} {kind} x{n}" for (job, kind, _), n in counts.items() if kind in ONCE and n > 1)}


def await_delivered(records: Callable[[], list[dict[str, Any]]], sink: Any, timeout: float) -> None:
    """The last events' deliveries may still be on their way (gpu-jobs' watch and its backoff): wait until
    what the jobs' statuses imply has arrived, bounded, before the check reads the receiver."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and check(records(), sink.received)["missing"]:
        time.sleep(0.5)
