"""What happened, for whom (pure): job state changes and cull warnings as `Event`s.

A job's events come from comparing two of its statuses (services/jobs/status.py) seen one after the
other; the event's user is always the job's owner (its username annotation), never the caller.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote

from jupyterhub_gpu.contract import (
    ADMITTED,
    FINISHED,
    LAB_API_PREFIX,
    NOTIFY_ADMITTED,
    NOTIFY_CULL_WARNING,
    NOTIFY_FAILED,
    NOTIFY_PREEMPTED,
    NOTIFY_RESUMED,
    NOTIFY_SUCCEEDED,
    QUEUED,
    RESUMED,
    RUNNING,
    SUCCEEDED,
    output_notebook_path,
)

#: Longest text taken from a status or warning into a message (they come from Kubernetes and the culler).
MAX_TEXT = 500


@dataclass(frozen=True)
class Event:
    """One notification: `kind` from contract.NOTIFY_EVENTS, for `user`; `key` identifies it (de-duplication)."""
    user: str
    kind: str
    key: str
    title: str
    text: str
    link: str | None = None
    link_text: str = ""
    facts: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    to: str | None = None  # an explicit address: a confirmation goes to the address it confirms, nothing else


def _clip(s: object) -> str:
    s = " ".join(str(s or "").split())
    return s if len(s) <= MAX_TEXT else s[: MAX_TEXT - 1] + "…"


def lab_link(hub_url: str, path: str) -> str | None:
    """`path` (relative to the home) opened in the user's own JupyterLab, via the hub's user-redirect."""
    if not hub_url:
        return None
    return f"{hub_url.rstrip('/')}/hub/user-redirect/lab/tree/{quote(path, safe='/')}"


def job_kinds(before: dict | None, after: dict) -> list[str]:
    """The events between two statuses of one job (`before` None: first seen, i.e. just submitted).
    Admitted only for the first admission (also when only what followed it was seen); preempted when the
    preemption count grows; resumed when it runs again after one; succeeded / failed when it finishes."""
    was = before or {"state": QUEUED, "preempted": 0}
    state, preempted = after.get("state"), after.get("preempted") or 0
    if was.get("state") in FINISHED:
        return []
    kinds = []
    never_admitted = was.get("state") == QUEUED and not (was.get("preempted") or 0)
    # a job preempted, resumed or succeeded since the last look was admitted in between (while gpu-jobs was
    # away, say): its first admission is still news to whoever asked for it
    if never_admitted and (state in (ADMITTED, RUNNING, RESUMED, SUCCEEDED) or preempted > 0):
        kinds.append(NOTIFY_ADMITTED)
    if preempted > (was.get("preempted") or 0) and state not in FINISHED:
        kinds.append(NOTIFY_PREEMPTED)
    if state == RESUMED and was.get("state") != RESUMED:
        kinds.append(NOTIFY_RESUMED)
    if state in FINISHED:
        kinds.append(NOTIFY_SUCCEEDED if state == SUCCEEDED else NOTIFY_FAILED)
    return kinds


_TITLES = {NOTIFY_ADMITTED: "GPU job {name} started", NOTIFY_PREEMPTED: "GPU job {name} was preempted",
           NOTIFY_RESUMED: "GPU job {name} resumed", NOTIFY_SUCCEEDED: "GPU job {name} succeeded",
           NOTIFY_FAILED: "GPU job {name} failed"}
_TEXTS = {NOTIFY_ADMITTED: "Kueue admitted it; it runs on {where}.",
          NOTIFY_PREEMPTED: "Its pod was stopped to make room for higher-priority work; it waits to resume "
                            "from its last checkpoint.",
          NOTIFY_RESUMED: "It runs again after being preempted ({count} interruption(s) so far).",
          NOTIFY_SUCCEEDED: "The notebook ran to the end.",
          NOTIFY_FAILED: "It stopped: {message}."}


def job_event(kind: str, status: dict, hub_url: str = "") -> Event:
    """The message for one job event (`status`: the job's status after it)."""
    name = _clip(status.get("name"))
    where = status.get("cluster_queue") or status.get("queue") or "its team's quota"
    text = _TEXTS[kind].format(where=_clip(where), count=status.get("preempted") or 0,
                               message=_clip(status.get("message") or "see its logs").rstrip("."))
    out = output_notebook_path(str(status.get("name")), status.get("notebook"))
    facts = tuple((k, _clip(v)) for k, v in (("Notebook", status.get("notebook")), ("Profile", status.get("profile")),
                                             ("State", status.get("state")), ("Output", f"~/{out}")) if v)
    uid = f"/{status['uid']}" if status.get("uid") else ""  # a job of a reused name is another job
    return Event(user=str(status.get("user")), kind=kind, key=f"job/{status.get('namespace')}/{name}/{kind}/"
                 f"{status.get('preempted') or 0}{uid}", title=_TITLES[kind].format(name=name), text=text,
                 link=lab_link(hub_url, out), link_text="Open the output notebook", facts=facts)


def job_events(before: dict | None, after: dict, hub_url: str = "") -> list[Event]:
    if not after.get("user"):
        return []
    return [job_event(k, after, hub_url) for k in job_kinds(before, after)]


def cull_event(user: str, warning: dict, hub_url: str = "") -> Event:
    """A cull warning of the culler (services/culler: server, profile, cull_in_s, cull_at, message)."""
    server = _clip(warning.get("server"))
    try:
        minutes = max(1, round(float(warning.get("cull_in_s") or 0) / 60))
    except (TypeError, ValueError, OverflowError):
        minutes = 1
    facts = tuple((k, _clip(v)) for k, v in (("Server", server or "default"), ("Profile", warning.get("profile")),
                                             ("Stopped at", warning.get("cull_at"))) if v)
    link = f"{hub_url.rstrip('/')}/hub/home" if hub_url else None
    return Event(user=user, kind=NOTIFY_CULL_WARNING, key=f"cull/{server}/{_clip(warning.get('cull_at'))}",
                 title=f"Your server will be stopped in about {minutes} min",
                 text=_clip(warning.get("message")) or "It has been idle; any activity keeps it.",
                 link=link, link_text="Open JupyterHub", facts=facts)


#: The kind of a confirmation mail (not an event users choose: it goes once, to the address being confirmed).
CONFIRM_EMAIL = "confirm-email"


def confirmation_event(user: str, address: str, code: str, hub_url: str = "") -> Event:
    """The mail that asks `address` to confirm it is `user`'s: the link opens the user's own JupyterLab, which
    hands the code back to gpu-jobs with the user's token (whoever else opens it gets a refusal)."""
    link = f"{hub_url.rstrip('/')}/hub/user-redirect/{LAB_API_PREFIX}/confirm-email?code={quote(code, safe='')}" \
        if hub_url else None
    return Event(user=user, kind=CONFIRM_EMAIL, key=f"confirm/{code[:12]}", to=address,
                 title="Confirm your address for GPU job notifications",
                 text=f"JupyterHub user {_clip(user)} asked to get GPU job notifications at {address}. If that is "
                      "you, open the link below while logged in to JupyterHub as that user (or send the code back "
                      "from a notebook: POST <gpu-jobs>/notifications/confirm {\"code\": \"...\"}). If it is not "
                      "you, ignore this mail: nothing will be sent here. The code works once, for 24 hours.",
                 link=link, link_text="Confirm the address", facts=(("Code", code),))


def is_failure(kind: str) -> bool:
    return kind in (NOTIFY_FAILED, NOTIFY_PREEMPTED, NOTIFY_CULL_WARNING)

