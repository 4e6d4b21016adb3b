"""Delivery: each event to each channel its user opted into, in the background, retried with exponential
backoff (a mail server or webhook that is down for a while loses nothing; one that refuses is not
hammered). Bounded: at most `max_pending` deliveries wait at once, and an event key is delivered once; with
an `Outbox` (outbox.py) also across restarts: what was queued and not delivered is delivered after one (and
what is over `max_pending` stays queued for then). The outbox's SQLite work runs in worker threads.
"""
from __future__ import annotations

import asyncio
import logging
import random
import sqlite3
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass
from typing import Awaitable, Callable

import aiohttp
import aiosmtplib

from jupyterhub_gpu.contract import NOTIFY_EMAIL
from jupyterhub_gpu.services.notify.events import Event, confirmation_event
from jupyterhub_gpu.services.notify.outbox import DROPPED, FAILED, SENT, Outbox, outbox_id
from jupyterhub_gpu.services.notify.payloads import email_message, webhook_payload
from jupyterhub_gpu.services.notify.prefs import Channels, PreferenceStore

log = logging.getLogger("gpuhub.notify")


class Permanent(Exception):
    """A refusal that retrying will not change (a 4xx from a webhook, a 5xx from the mail server)."""


def backoff_delays(retries: int, base: float, cap: float, jitter: float = 0.1,
                   rand: Callable[[], float] = random.random) -> list[float]:
    """Seconds to wait before each of `retries` retries: base, 2·base, 4·base, … at most `cap`, each
    spread by ±`jitter` (a fraction) so that many deliveries do not retry in step."""
    return [min(cap, base * 2 ** i) * (1 + jitter * (2 * rand() - 1)) for i in range(max(0, retries))]


@dataclass(frozen=True)
class Smtp:
    host: str
    port: int = 587
    security: str = "starttls"  # "starttls", "tls" (implicit TLS, port 465) or "none"
    username: str = ""
    password: str = ""
    sender: str = ""
    timeout: float = 20.0


async def send_email(smtp: Smtp, event: Event, to: str) -> None:
    try:
        await aiosmtplib.send(email_message(event, to, smtp.sender), hostname=smtp.host, port=smtp.port,
                              username=smtp.username or None, password=smtp.password or None,
                              use_tls=smtp.security == "tls", start_tls=True if smtp.security == "starttls" else False,
                              timeout=smtp.timeout)
    except aiosmtplib.SMTPRecipientsRefused as e:
        if all(r.code >= 500 for r in e.recipients):
            raise Permanent(f"the mail server refused {to}") from e
        raise
    except aiosmtplib.SMTPResponseException as e:
        if e.code >= 500:
            raise Permanent(f"the mail server answered {e.code} {e.message}") from e
        raise


class Transient(Exception):
    """A failed attempt worth retrying. Its text never carries the webhook's URL: that URL is the channel's
    credential (Slack and Teams put the secret in its path), and aiohttp's errors print it."""


async def send_webhook(session: aiohttp.ClientSession, url: str, payload: dict, timeout: float) -> None:
    """POST the payload; 2xx is done, 408/429/5xx or no answer is tried again, other answers are final.
    Redirects are not followed (the admin's URL is the only place the service posts to); at most 200 bytes
    of an answer are read."""
    try:
        async with session.post(url, json=payload, allow_redirects=False,
                                timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            if 200 <= r.status < 300:
                return
            body = (await r.content.read(200)).decode("utf-8", "replace")
            if r.status in (408, 429) or r.status >= 500:
                raise Transient(f"the webhook answered {r.status}: {body}")
            raise Permanent(f"the webhook answered {r.status}: {body}")
    except aiohttp.ClientConnectorError as e:
        raise Transient(f"cannot connect to {e.host}:{e.port}") from None
    except aiohttp.ClientError as e:
        raise Transient(type(e).__name__) from None
    except asyncio.TimeoutError:
        raise Transient(f"no answer in {timeout:g} s") from None


TRANSIENT = (Transient, aiohttp.ClientError, asyncio.TimeoutError, OSError, aiosmtplib.SMTPException)


class Notifier:
    """Events in, deliveries out; `stats` counts queued / sent / retried / failed / dropped / deferred (over
    `max_pending`, left in the outbox) / rate_limited (at most `max_per_user_hour` deliveries per user per
    hour: one user's flood of events never mails on and on)."""

    def __init__(self, channels: Channels, store: PreferenceStore, smtp: Smtp | None = None, retries: int = 5,
                 backoff: float = 2.0, backoff_max: float = 300.0, timeout: float = 20.0, max_pending: int = 1000,
                 max_per_user_hour: int = 30, max_confirmations_hour: int = 3, hub_url: str = "",
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 clock: Callable[[], float] = time.monotonic, outbox: Outbox | None = None):
        self.channels, self.store, self.smtp, self.outbox = channels, store, smtp, outbox
        self.retries, self.backoff, self.backoff_max, self.timeout = retries, backoff, backoff_max, timeout
        self.max_pending, self._sleep = max_pending, sleep
        self.max_per_user_hour, self._clock = max_per_user_hour, clock
        self._sent: dict[str, deque] = {}  # user → when their last deliveries were queued (within the hour)
        self._confirms: dict[str, deque] = {}  # user → when their last confirmation mails were sent
        self.max_confirmations_hour, self.hub_url = max_confirmations_hour, hub_url
        self.stats: Counter = Counter()
        self._tasks: set[asyncio.Task] = set()
        self._seen: OrderedDict[str, None] = OrderedDict()  # outbox ids this process queued
        self._session: aiohttp.ClientSession | None = None

    def allow(self, user: str) -> bool:
        """One more delivery for `user` within `max_per_user_hour` per hour (0: no limit)? Counts it if so."""
        return self._within_hour(self._sent, user, self.max_per_user_hour)

    def _within_hour(self, sent_by_user: dict[str, deque], user: str, limit: int) -> bool:
        if not limit:
            return True
        now, sent = self._clock(), sent_by_user.setdefault(user, deque())
        while sent and now - sent[0] > 3600:
            sent.popleft()
        if len(sent) >= limit:
            return False
        sent.append(now)
        if len(sent_by_user) > 10_000:  # bounded: forget the users with nothing in the last hour
            for u in [u for u, q in sent_by_user.items() if not q or now - q[-1] > 3600]:
                del sent_by_user[u]
        return True

    async def confirm_address(self, user: str, address: str) -> bool:
        """Mail `address` a one-time code that makes it `user`'s (delivered like any event, with backoff); at
        most `max_confirmations_hour` per user per hour, so an address cannot be flooded through the hub's
        sender. False (nothing sent, no code made) when over that or no mail server is set."""
        if self.smtp is None:
            return False
        if not self._within_hour(self._confirms, user, self.max_confirmations_hour):
            self.stats["rate_limited"] += 1
            return False
        code = await self.store.new_confirmation_async(user, address)
        task = asyncio.ensure_future(self.deliver(NOTIFY_EMAIL, confirmation_event(user, address, code, self.hub_url)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def notify(self, event: Event) -> int:
        """Queue `event` for each channel its user chose for its kind; returns how many were queued."""
        return await self.notify_many([event])

    async def notify_many(self, events: list[Event], changed: dict | None = None) -> int:
        """`notify` for each event; with an outbox, durably and in one transaction with the job statuses
        `changed` (outbox.Outbox.record), so an event is neither lost nor queued twice across a restart. The
        outbox's SQLite work runs in a worker thread: the event loop (every gpu-jobs request) never waits on it."""
        rows = [(outbox_id(name, ev), name, ev) for ev in events
                for name in self.store.wants(ev.user, ev.kind, self.channels)]
        if self.outbox is not None:
            if not rows and changed is None:
                return 0
            rows = await asyncio.to_thread(self.outbox.record, rows, changed)
        dropped: list[str] = []
        queued = sum(self._dispatch(row, dropped) for row in rows if self._first(row[0]))
        await self._end(dropped, DROPPED)
        return queued

    async def resume(self) -> int:
        """Deliver what the outbox holds as pending (queued before a restart, not delivered); returns how many.
        A row whose channel its user no longer wants (opted out, or the admin removed the webhook) is ended
        DROPPED, not sent: the channel's name may since stand for another team's URL."""
        if self.outbox is None:
            return 0
        dropped: list[str] = []
        resumed = 0
        for row in await asyncio.to_thread(self.outbox.pending):
            row_id, name, event = row
            if not self._first(row_id):
                continue
            if name not in self.store.wants(event.user, event.kind, self.channels):
                self.stats["dropped"] += 1
                log.info("%r notification for %s to %s queued before a restart: dropped, that channel is no "
                         "longer wanted or configured", event.kind, event.user, name)
                dropped.append(row_id)
                continue
            resumed += self._dispatch(row, dropped, limited=False)
        await self._end(dropped, DROPPED)
        if resumed:
            log.info("%d notification(s) queued before a restart: delivering them now", resumed)
        return resumed

    def _first(self, row_id: str) -> bool:
        """Not seen by this process yet (the outbox de-duplicates across processes)."""
        if row_id in self._seen:
            return False
        self._seen[row_id] = None
        while len(self._seen) > 10_000:
            self._seen.popitem(last=False)
        return True

    def _dispatch(self, row: tuple[str, str, Event], dropped: list[str], limited: bool = True) -> int:
        """Start one delivery (1) or not (0); a row to end DROPPED is added to `dropped`, for the caller to
        mark in one transaction."""
        row_id, name, event = row
        if limited and not self.allow(event.user):
            self.stats["rate_limited"] += 1
            log.warning("%r notification for %s to %s dropped: over %d per hour", event.kind, event.user, name,
                        self.max_per_user_hour)
            dropped.append(row_id)
            return 0
        if len(self._tasks) >= self.max_pending:
            if self.outbox is not None:  # kept: delivered after the next start, not lost
                self.stats["deferred"] += 1
                log.warning("%r notification for %s to %s left pending for the next start: %d deliveries "
                            "already wait", event.kind, event.user, name, len(self._tasks))
                return 0
            self.stats["dropped"] += 1
            log.error("%r notification for %s to %s dropped: %d deliveries already wait", event.kind,
                      event.user, name, len(self._tasks))
            return 0
        task = asyncio.ensure_future(self._deliver_row(row_id, name, event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self.stats["queued"] += 1
        return 1

    async def _deliver_row(self, row_id: str, name: str, event: Event) -> None:
        """One outbox row delivered and marked (cancelled at shutdown: it stays pending for the next start)."""
        await self._end([row_id], SENT if await self.deliver(name, event) else FAILED)

    async def _end(self, row_ids: list[str], state: str) -> None:
        """Mark outbox rows ended, in one transaction in a worker thread (nothing without an outbox)."""
        if self.outbox is None or not row_ids:
            return
        try:
            await asyncio.to_thread(self.outbox.end, row_ids, state)
        except sqlite3.Error as e:  # the delivery happened; a resend after a restart is the worst case
            log.error("notification outbox: could not mark %d row(s) %s (%s): %s", len(row_ids), state,
                      row_ids[0], e)

    async def _once(self, name: str, event: Event) -> None:
        if name == NOTIFY_EMAIL:
            to = event.to or self.channels.address(event.user, self.store.get(event.user))
            if to is None or self.smtp is None:
                raise Permanent("no e-mail address or mail server")
            await send_email(self.smtp, event, to)
            return
        hook = self.channels.webhooks.get(name)
        if hook is None:  # removed by the admin since it was queued
            raise Permanent("the channel is no longer configured")
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        await send_webhook(self._session, hook.url, webhook_payload(hook.kind, event), self.timeout)

    async def deliver(self, name: str, event: Event) -> bool:
        """One event to one channel, retried with backoff; True when it was delivered."""
        delays = backoff_delays(self.retries, self.backoff, self.backoff_max)
        for attempt in range(len(delays) + 1):
            if attempt:
                self.stats["retried"] += 1
                await self._sleep(delays[attempt - 1])
            try:
                await self._once(name, event)
            except Permanent as e:
                log.error("%r notification for %s to %s not delivered: %s", event.kind, event.user, name, e)
                break
            except TRANSIENT as e:
                log.warning("%r notification for %s to %s: attempt %d failed (%s: %s)", event.kind, event.user,
                            name, attempt + 1, type(e).__name__, e)
                continue
            self.stats["sent"] += 1
            log.info("%r notification for %s sent to %s", event.kind, event.user, name)
            return True
        self.stats["failed"] += 1
        return False

    async def drain(self) -> None:
        """Until every queued delivery has ended (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._session is not None:
            await self._session.close()
