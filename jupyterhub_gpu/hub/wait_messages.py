"""What a waiting server's user is told (pure): its place in the team's Kueue queue, the spawn page's
sentences while it waits, and, when it gives up, the reason in plain words with what to do next (kept as a
record the home page shows after a reload).

A user who waits without knowing why or for how long gives up or retries, and a retry loses the place;
so every sentence names what the server waits for (from the resource Kueue names), where it stands, an
estimate once there is history, and the alternatives to waiting.

The queue is the team's ClusterQueue, fed by two LocalQueues of the same name: its Jobs' in the team
namespace and its servers' in the hub namespace. The hub has no rights in team namespaces, so a server's
place is counted among the team's waiting servers only (the Workloads in the hub namespace), in Kueue's
BestEffortFIFO order (priority, then queue time; a job's place is counted the same way), and the
ClusterQueue's pending count says how many servers and jobs wait in all.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Iterable

from jupyterhub_gpu.cluster.workloads import admissions, is_pending, queue_key
from jupyterhub_gpu.contract import KUEUE_ADMISSION_GATE
from jupyterhub_gpu.model.kueue_words import QueueContext, flavor_usage, quota_limit
from jupyterhub_gpu.model.wait_estimate import ETA, estimate

#: What a user can do instead of waiting, said once in every queue and timeout message.
ALTERNATIVES = ("pick a profile the picker shows as free, run the notebook as a job with %gpu_submit "
                "(a job keeps its place in the queue without a browser tab open), or ask your team's admin "
                "about its quota")


def gated(pod: dict[str, Any] | None) -> bool:
    """Is this pod held by Kueue's admission gate (still queued)?"""
    gates = ((pod or {}).get("spec") or {}).get("schedulingGates") or []
    return any(g.get("name") == KUEUE_ADMISSION_GATE for g in gates)


def duration(seconds: float) -> str:
    """'45 s', '3 min', '1 h 5 min'."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h" + (f" {minutes % 60} min" if minutes % 60 else "")


@dataclass(frozen=True)
class QueuePlace:
    """Where a server's Workload stands in its team's queue."""

    position: int | None          # 1-based among the team's waiting servers; None: not found (yet)
    servers_waiting: int          # the team's waiting servers, this one included
    in_queue: int | None          # servers and jobs pending in the team's ClusterQueue (None: unknown)
    eta: ETA
    never: str | None = None      # Kueue's word that it can never admit it (more than the whole quota)
    kueue_says: str | None = None  # why Kueue has not admitted it yet, in its own words
    usage: dict[str, tuple[Decimal, Decimal]] = field(default_factory=dict)  # the pool's flavor: in use, quota


def _owned_by_pod(workload: dict[str, Any], pod_name: str) -> bool:
    return any(r.get("kind") == "Pod" and r.get("name") == pod_name
               for r in workload.get("metadata", {}).get("ownerReferences") or [])


def queue_place(workloads: Iterable[dict[str, Any]], namespace: str, queue: str, pod_name: str,
                cluster_queue: dict[str, Any] | None = None, now: datetime | None = None,
                flavor: str | None = None) -> QueuePlace:
    """The place of `pod_name`'s Workload among the team's waiting servers (LocalQueue `queue` in the hub
    `namespace`), the ClusterQueue's pending count and its use of the pool's `flavor`, Kueue's reason, and
    the ETA from the servers' admission history."""
    mine = [wl for wl in workloads if wl["metadata"].get("namespace", "") == namespace
            and (wl.get("spec") or {}).get("queueName", "") == queue]
    history = admissions(mine).get((namespace, queue), [])
    waiting = sorted((wl for wl in mine if is_pending(wl)), key=queue_key)
    in_queue = ((cluster_queue or {}).get("status") or {}).get("pendingWorkloads")
    in_queue = in_queue if isinstance(in_queue, int) else None
    usage = flavor_usage(cluster_queue, flavor)
    for i, wl in enumerate(waiting, 1):
        if _owned_by_pod(wl, pod_name):
            says = _pending_message(wl)
            never = says if says and "> maximum capacity" in says else None
            return QueuePlace(i, len(waiting), in_queue, estimate(history, i, now), never, says, usage)
    return QueuePlace(None, len(waiting), in_queue, ETA(None, None, 0), usage=usage)


def _pending_message(workload: dict[str, Any]) -> str | None:
    """Kueue's message on a Workload it has not reserved quota for: which resource is short, or (with
    "> maximum capacity") that the request exceeds all the queue could ever have, so waiting cannot help."""
    for c in (workload.get("status") or {}).get("conditions") or []:
        if c.get("type") == "QuotaReserved" and c.get("status") == "False" and c.get("message"):
            return c["message"]
    return None


def over_quota_message(team: str, profile: str, kueue_says: str) -> str:
    """The failure when a server asks for more than its team's whole quota, borrowing included."""
    return (f"'{profile}' needs more than the {team} team's whole quota (borrowing included), so it can never "
            f"start from your team's queue. What next: pick a smaller profile, or ask your team's admin to raise "
            f"the quota. (Kueue: {kueue_says[:300]})")


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _why(place: QueuePlace, ctx: QueueContext) -> str:
    """What the server waits for, from the resource Kueue names (CPU, memory or the GPUs), never assumed."""
    said = quota_limit(place.kueue_says, replace(ctx, usage=place.usage or ctx.usage))
    if said is None:
        where = f" on the {ctx.pool_label} pool" if ctx.pool_label else ""
        said = f"your team's quota{where} is in use"
    return said[0].upper() + said[1:]


def queue_message(team: str, place: QueuePlace | None, ctx: QueueContext = QueueContext()) -> str:
    """The spawn page's headline while the server is queued. `place` None: the queue could not be read."""
    head = f"Waiting in the {team} team's queue"
    if place is None:
        return (f"{head}; your place is kept, but the queue cannot be read right now (the cluster is not "
                "answering), so no position is shown.")
    if place.position is None:
        return f"{head}: your server is being added to it."
    ahead = place.position - 1
    n = place.servers_waiting
    if n == 1:
        where = "yours is the team's only waiting server"
    elif ahead == 0:
        where = f"yours is the first of the team's {n} waiting servers"
    else:
        where = f"yours is the {_ordinal(place.position)} of the team's {n} waiting servers ({ahead} ahead of you)"
    if place.in_queue is not None and place.in_queue > place.servers_waiting:
        where += f"; {place.in_queue} servers and jobs wait in the queue in all"
    when = (f"Estimated wait: about {duration(place.eta.p50_s)} (at most {duration(place.eta.p90_s)} in 9 of "
            "10 past waits)." if place.eta.known else "No wait estimate yet (too few past waits).")
    return (f"{head}: {where}. {_why(place, ctx)}; you start as soon as one of the team's servers or jobs "
            f"there stops. {when} Keep this page open or come back: your place is kept until you stop the server.")


def admitted_message(team: str) -> str:
    return f"Your turn in the {team} team's queue: a GPU is reserved for you; placing your server on a node."


def queue_limit_message(team: str, waited_s: float, profile: str) -> str:
    """The failure when the admin's queue wait limit runs out."""
    return (f"Your '{profile}' server waited {duration(waited_s)} in the {team} team's queue, the longest this "
            f"hub lets a server wait, and was not started; nothing is left running or queued. What next: "
            f"{ALTERNATIVES}.")


def start_timeout_message(waited_s: float, profile: str, last: str | None) -> str:
    """The failure when a server (past any queue) does not become ready in time."""
    why = f" The last thing that happened: {last.rstrip('.')}." if last else ""
    return (f"Your '{profile}' server did not become ready within {duration(waited_s)} and was stopped.{why} "
            f"What next: start it again, or {ALTERNATIVES}.")


def unexplained_message(error: BaseException) -> str:
    """A failure that came with no plain reason of ours (an API error, a bug): never an empty message."""
    text = str(error).strip() or type(error).__name__
    return (f"Your server did not start: {text}. What next: start it again; if it fails the same way, tell "
            "an admin the time shown here.")


#: A record's kind: a start that did not work, or a running server that was stopped (hub/preemption.py).
FAILED, STOPPED = "failed", "stopped"


def failure_record(message: str, profile: str | None, when: datetime | None = None,
                   kind: str = FAILED) -> dict[str, str]:
    """What the spawner keeps (in its saved state) so the home page can show the reason after a reload."""
    when = when or datetime.now(timezone.utc)
    return {"message": message[:2000], "profile": (profile or "")[:200],
            "when": when.strftime("%Y-%m-%d %H:%M UTC"), "kind": kind}


def valid_record(value: Any) -> dict[str, str] | None:
    """A saved failure record as failure_record wrote it, else None (old or hand-edited state)."""
    if not isinstance(value, dict) or not isinstance(value.get("message"), str) or not value["message"]:
        return None
    record = {k: str(value.get(k, ""))[:2000] for k in ("message", "profile", "when")}
    return {**record, "kind": STOPPED if value.get("kind") == STOPPED else FAILED}
