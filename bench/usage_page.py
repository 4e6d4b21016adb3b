"""The showback page's view cost at a big store (issue 25): ≈500 users × 400 days of finished lifetimes.

    .venv/bin/python bench/usage_page.py [--users 500 --days 400] [--views 20] [--concurrent-s 10]

`before`: each view reads the whole store (`UsageStore.finished()`) on the event loop, then filters it (the
page until issue 25, kept here as the baseline; it parsed finished.jsonl, now it reads every SQLite row).
`after`: `usage_view` over a `UsageReader` (services/usage/live.py): one range query per view, in a thread
(issue 30; bench/usage_scale.py measures it from 10 k to 2 M lifetimes). Both run in this
process on one asyncio loop, as the page's handler would (the HTTP and OAuth parts are the same for both and
left out). Figures: one user's view, the admins' view, a view after the collector appended a cycle, and
"noisy": one user keeping 4 views in flight while another user's views are timed, with the loop's longest
stall (a 5 ms ticker)."""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import write_result  # noqa: E402
from jupyterhub_gpu.services.usage import accounting as acc  # noqa: E402
from jupyterhub_gpu.services.usage.live import UsageReader  # noqa: E402
from jupyterhub_gpu.services.usage.store import UsageStore  # noqa: E402
from jupyterhub_gpu.services.usage.web import usage_view  # noqa: E402

PROFILES = (("h100-full", 1, 6.98), ("a100-mig-1g10gb", 1, 0.52), ("t4-shared", 1, 0.13))


def lifetimes(users: int, days: int, until: datetime, first_day: int = 0):
    """One two-hour session per user per day, ending `first_day`..`days` days before `until`."""
    for d in range(first_day, days):
        end = until - timedelta(days=d, hours=1)
        for u in range(users):
            slug, gpus, cost = PROFILES[u % len(PROFILES)]
            yield acc.Lifetime(f"d{d}-u{u}", "server", "jhub", f"jupyter-user{u}", f"user{u}", "", slug, "", gpus,
                               cost, end - timedelta(hours=2), end, node=f"node-{u % 40}")


def write_store(directory: Path, users: int, days: int, until: datetime) -> UsageStore:
    """A store of users × days finished lifetimes and one open lifetime per tenth user."""
    store = UsageStore(directory)
    store.append_finished(lifetimes(users, days, until, first_day=1))  # one transaction, streamed
    running = {f"open-{u}": acc.Lifetime(f"open-{u}", "server", "jhub", f"jupyter-user{u}", f"user{u}", "",
                                         "h100-full", "", 1, 6.98, until - timedelta(hours=3))
               for u in range(0, users, 10)}
    store.save_open(running, until)
    return store


def before_view(store: UsageStore, user: str | None, since: datetime, until: datetime) -> list:
    """The page's view before issue 25: the whole store parsed, then filtered, on the loop."""
    opened, _ = store.load_open()
    lts = [lt for lt in [*store.finished(), *opened.values()] if user is None or lt.user == user]
    return [r.as_dict() for r in acc.aggregate(lts, since, until, "profile" if user is not None else "user")]


async def timed(fn, n: int) -> float:
    """Median seconds of `n` calls of the coroutine function `fn`."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


async def noisy(view, seconds: float) -> dict:
    """user0 keeps 4 views in flight; user1's views are timed; the loop's longest stall meanwhile."""
    stop, stalls, waits = time.monotonic() + seconds, [0.0], []

    async def ticker():
        last = time.perf_counter()
        while time.monotonic() < stop:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            stalls[0] = max(stalls[0], now - last - 0.005)
            last = now

    async def reloads():
        while time.monotonic() < stop:
            await view("user0")
            await asyncio.sleep(0)  # the next reload is a new request

    async def other():
        while time.monotonic() < stop:
            t = time.perf_counter()
            await view("user1")
            waits.append(time.perf_counter() - t)
            await asyncio.sleep(0.05)

    await asyncio.gather(ticker(), other(), *(reloads() for _ in range(4)))
    return {"other_user_wait_median_s": round(statistics.median(waits), 4) if waits else None,
            "other_user_wait_max_s": round(max(waits), 4) if waits else None, "other_user_views": len(waits),
            "longest_loop_stall_s": round(stalls[0], 4)}


async def run(a) -> dict:
    until = datetime.now(timezone.utc)
    since = until - timedelta(days=7)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        store = write_store(Path(tmp), a.users, a.days, until)
        size = sum(p.stat().st_size for p in Path(tmp).glob("usage.sqlite*"))  # the WAL too
        out = {"users": a.users, "days": a.days, "lifetimes": a.users * (a.days - 1),
               "store_mib": round(size / 2**20, 1), "write_s": round(time.perf_counter() - t, 1)}

        async def old(user):
            before_view(store, user, since, until)

        out["before"] = {"user_view_s": round(await timed(lambda: old("user7"), 3), 3),
                         "admin_view_s": round(await timed(lambda: old(None), 3), 3),
                         **(await noisy(old, a.concurrent_s))}
        live = UsageReader(tmp)
        t = time.perf_counter()
        await usage_view(live, None, "user7", since, until)
        first = time.perf_counter() - t

        async def new(user):
            await usage_view(live, None, user, since, until)

        user_s = await timed(lambda: new("user7"), a.views)
        admin_s = await timed(lambda: new(None), a.views)
        store.append_finished(list(lifetimes(a.users, 1, until + timedelta(days=1))))  # one more day, all users
        t = time.perf_counter()
        await new("user7")
        appended = time.perf_counter() - t
        out["after"] = {"first_view_s": round(first, 4), "user_view_s": round(user_s, 5),
                        "admin_view_s": round(admin_s, 4), f"view_after_{a.users}_appended_s": round(appended, 4),
                        **(await noisy(new, a.concurrent_s))}
        live.close()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=500)
    p.add_argument("--days", type=int, default=401, help="days of history (one day fewer are stored)")
    p.add_argument("--views", type=int, default=20)
    p.add_argument("--concurrent-s", type=float, default=10.0)
    return write_result("usage_page", asyncio.run(run(p.parse_args())))


if __name__ == "__main__":
    raise SystemExit(main())
