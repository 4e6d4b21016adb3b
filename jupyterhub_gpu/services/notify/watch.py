"""gpu-jobs' loop that turns job state changes into notifications.

It reads the service's watch-fed cache (no extra API calls): after each change it derives every job's
status and compares it with the one seen before. With the notifier's outbox (outbox.py) the statuses seen
are kept with the events they made, so a restarted gpu-jobs compares with what it saw before it stopped:
a change while it was down is still sent, once. Without one (or on the very first run) the jobs present at
start are the baseline. While the cache is stale nothing is compared.
"""
from __future__ import annotations

import asyncio
import logging

from jupyterhub_gpu.services.notify.events import job_events
from jupyterhub_gpu.services.notify.send import Notifier

log = logging.getLogger("gpuhub.notify")


def compare(seen: dict | None, jobs: list[dict], statuses: list[dict], hub_url: str = "") -> tuple[list, dict, dict]:
    """(events, the statuses now, what changed: key → status or None when gone) (pure). `seen`: the statuses
    before (None: none yet, so this is the baseline and makes no events). A job of the same name with another
    uid is a new job."""
    now, events = {}, []
    for job, s in zip(jobs, statuses):
        key, uid = (s["namespace"], s["name"]), job["metadata"].get("uid") or ""
        now[key] = {"state": s["state"], "preempted": s["preempted"], "uid": uid}
        if seen is not None:
            before = seen.get(key)
            if before is not None and before.get("uid", uid) != uid:
                before = None
            events += job_events(before, {**s, "uid": uid}, hub_url)
    changed = {k: v for k, v in now.items() if (seen or {}).get(k) != v}
    changed.update({k: None for k in (seen or {}).keys() - now.keys()})
    return events, now, changed


async def watch_jobs(kube, notifier: Notifier, hub_url: str = "", settle: float = 0.5, every: float = 30.0) -> None:
    seen = await asyncio.to_thread(notifier.outbox.seen) if notifier.outbox is not None else None
    await notifier.resume()  # deliveries queued before a restart
    cache = kube.cache
    while True:
        signal = cache.change_signal
        try:
            if cache.synced and not cache.stale:
                jobs = await kube.jobs(None)
                events, now, changed = compare(seen, jobs, await kube.statuses(jobs, with_logs=False), hub_url)
                if events or changed or seen is None:
                    await notifier.notify_many(events, changed)
                seen = now
        except asyncio.CancelledError:
            raise
        except Exception:  # the loop outlives any one bad cycle (it is re-run on the next change)
            log.exception("comparing job states for notifications failed")
        try:
            await asyncio.wait_for(signal.wait(), every)
        except asyncio.TimeoutError:
            pass
        await asyncio.sleep(settle)  # one comparison for a burst of watch events
