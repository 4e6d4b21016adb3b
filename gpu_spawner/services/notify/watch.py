"""gpu-jobs' loop that turns job state changes into notifications.

It reads the service's watch-fed cache (no extra API calls): after each change it derives every job's
status and compares it with the one seen before. Jobs present when the service starts are its baseline
(changes while it was down are not reported); while the cache is stale nothing is compared.
"""
from __future__ import annotations

import asyncio
import logging

from gpu_spawner.services.notify.events import job_events
from gpu_spawner.services.notify.send import Notifier

log = logging.getLogger("gpuhub.notify")


async def watch_jobs(kube, notifier: Notifier, hub_url: str = "", settle: float = 0.5, every: float = 30.0) -> None:
    seen: dict[tuple[str, str], dict] | None = None
    cache = kube.cache
    while True:
        signal = cache.change_signal
        try:
            if cache.synced and not cache.stale:
                statuses = await kube.statuses(await kube.jobs(None), with_logs=False)
                if seen is not None:
                    for s in statuses:
                        for event in job_events(seen.get((s["namespace"], s["name"])), s, hub_url):
                            notifier.notify(event)
                seen = {(s["namespace"], s["name"]): {"state": s["state"], "preempted": s["preempted"]}
                        for s in statuses}
        except asyncio.CancelledError:
            raise
        except Exception:  # the loop outlives any one bad cycle (it is re-run on the next change)
            log.exception("comparing job states for notifications failed")
        try:
            await asyncio.wait_for(signal.wait(), every)
        except asyncio.TimeoutError:
            pass
        await asyncio.sleep(settle)  # one comparison for a burst of watch events
