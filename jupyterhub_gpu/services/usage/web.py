"""The showback page, a hub service (`/services/gpu-usage/`): admins see every user's GPU-hours and $, each
user sees their own (another user's page is a 403). Logged in through the hub (OAuth); the chart is SVG
drawn here, so the page needs no script and no CDN. Data: the usage collector's store (store.py).

    python -m jupyterhub_gpu.services.usage.web --store DIR [--since 7d]
        [--profiles-file FILE --prometheus-url URL [--scrape-interval 30]]   # right-sizing hints too
"""
from __future__ import annotations

import argparse
import asyncio
import html
import os
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable
from urllib.parse import urlparse

from cachetools import TTLCache
from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from tornado import ioloop, web

from jupyterhub_gpu.contract import adopt_hub_api_url
from jupyterhub_gpu.model.durations import parse
from jupyterhub_gpu.model.profiles_file import load_profiles
from jupyterhub_gpu.services.hub_entry import listen_address
from jupyterhub_gpu.services.loopguard import LoopGuard
from jupyterhub_gpu.services.usage import accounting as acc
from jupyterhub_gpu.services.usage import collect
from jupyterhub_gpu.services.usage.live import UsageReader
from jupyterhub_gpu.services.usage.rightsize import hints

BAR_H, LABEL_W, CHART_W = 22, 160, 420


def bar_chart_svg(rows: list[dict[str, Any]], value: str = "gpu_hours_held", unit: str = "GPU-h") -> str:
    """A horizontal bar chart of `rows[i][value]` labelled by `rows[i]["key"]` (pure, escaped)."""
    top = max((float(r[value]) for r in rows), default=0.0) or 1.0
    height = BAR_H * max(len(rows), 1) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{LABEL_W + CHART_W + 90}" '
             f'height="{height}" aria-label="{html.escape(unit)} held">']
    for i, r in enumerate(rows):
        y = 5 + i * BAR_H
        w = round(CHART_W * float(r[value]) / top, 1)
        parts.append(f'<text x="{LABEL_W - 6}" y="{y + 15}" text-anchor="end" font-size="13">'
                     f'{html.escape(str(r["key"]))}</text>'
                     f'<rect class="bar" x="{LABEL_W}" y="{y + 3}" width="{w}" height="{BAR_H - 6}" fill="#2f81f7"/>'
                     f'<text x="{LABEL_W + w + 6}" y="{y + 15}" font-size="12">'
                     f'{float(r[value]):.2f} {html.escape(unit)}</text>')
    if not rows:
        parts.append('<text x="10" y="20" font-size="13">no GPU usage in this range</text>')
    parts.append("</svg>")
    return "".join(parts)


def page(title: str, rows: list[dict[str, Any]], since: datetime, until: datetime,
         hints: list[str] = (), note: str = "") -> str:
    """The whole HTML page (pure)."""
    extra = "".join(f"<li>{html.escape(h)}</li>" for h in hints)
    extra = (f"<h2>Right-sizing</h2><ul class='hints'>{extra}</ul>" if extra else "") + \
        (f"<p class='note'>{html.escape(note)}</p>" if note else "")
    cells = "".join(
        f"<tr><td>{html.escape(str(r['key']))}</td><td>{r['gpu_hours_held']:.2f}</td><td>{r['cost']:.2f}</td>"
        f"<td>{r['pods']}</td></tr>" for r in rows)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 10px;text-align:right}"
            "td:first-child,th:first-child{text-align:left}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{since:%Y-%m-%d %H:%M} → {until:%Y-%m-%d %H:%M} UTC · GPU-hours held "
            "(GPUs, MIG slices or time-sliced or MPS shares × hours) and their $ from the profiles file's prices</p>"
            f"{bar_chart_svg(rows)}<table><tr><th>who / what</th><th>GPU-h held</th><th>$</th><th>pods</th></tr>"
            f"{cells}</table>{extra}</body></html>")


Hinter = Callable[[list[acc.Lifetime], datetime, datetime], list]


def make_hinter(cfg, prometheus_url: str, scrape_interval: float) -> Hinter:
    """Right-sizing hints (rightsize.py) from DCGM use in Prometheus over the page's range (blocking I/O)."""

    costs = {slug: r.hourly_cost for slug, r in acc.rules_and_teams(cfg)[0].items()}

    def hinter(lifetimes, since, until):
        used = collect.used_from_prometheus(prometheus_url, since, until, scrape_interval)
        return hints(lifetimes, used, cfg, costs, since, until)

    return hinter


class SharedHints:
    """The hinter as the page's requests share it: its Prometheus read covers every pod over the whole
    range, so any user reloading their page must not multiply it. One read at a time (in a thread), and
    each page's answer (`key`: the user, None for the admins' view), a failure included, reused for
    `ttl` seconds; at most `size` answers kept."""

    def __init__(self, hinter: Hinter, ttl: float = 60.0, size: int = 1024,
                 clock: Callable[[], float] = time.monotonic):
        self.hinter = hinter
        self.cache: TTLCache = TTLCache(size, ttl, timer=clock)
        self._lock = asyncio.Lock()

    async def get(self, key: str | None, lifetimes: list, since: datetime, until: datetime) -> list:
        found = self.cache.get(key)
        if found is None:
            found = await self._read(key, lifetimes, since, until)
        if not found[0]:
            raise found[1]
        return found[1]

    async def _read(self, key: str | None, lifetimes: list, since: datetime, until: datetime) -> tuple:
        async with self._lock:  # the views waiting here take the answer the first one read
            if key not in self.cache:
                try:
                    self.cache[key] = (True, await ioloop.IOLoop.current().run_in_executor(
                        None, self.hinter, lifetimes, since, until))
                except Exception as e:  # Prometheus down: asked again after ttl, not on every view
                    self.cache[key] = (False, e)
            return self.cache[key]


async def usage_view(reader: UsageReader, hinter: SharedHints | None, user: str | None, since: datetime,
                     until: datetime) -> tuple[list[dict[str, Any]], list[str], str]:
    """(rows, hints, note) of one page: `user`'s own rows by profile, or (None) everyone's by user. One range
    query of the store (that user's rows of the range, or the range's rows for the admins' view: never the
    whole store), in a thread, so a bigger view never stalls the others on the loop."""
    lts = await asyncio.get_running_loop().run_in_executor(None, reader.lifetimes, user, since, until)
    rows = [r.as_dict() for r in acc.aggregate(lts, since, until, "profile" if user is not None else "user")]
    hints, note = [], ""
    if hinter is not None:
        try:
            hints = [h.text for h in await hinter.get(user, lts, since, until)]
        except Exception as e:  # Prometheus down: the usage still shows, the hints say why they are missing
            note = f"right-sizing hints unavailable: GPU use could not be read ({type(e).__name__})"
    return rows, hints, note


def make_app(store: str | os.PathLike, since: timedelta, prefix: str, hinter: Hinter | None = None) -> web.Application:
    """The page over the store folder `store` (read only: the collector writes it)."""
    args = {"reader": UsageReader(store), "since": since, "hinter": SharedHints(hinter) if hinter is not None else None}
    return web.Application([
        (prefix + r"oauth_callback", HubOAuthCallbackHandler),
        (prefix + r"users/([^/]+)/?", UsagePage, args),
        (prefix + r"?", UsagePage, args),
    ], cookie_secret=os.urandom(32))


class UsagePage(HubOAuthenticated, web.RequestHandler):
    """Who may see what: the caller's hub identity (OAuth cookie); `access:services!service=gpu-usage`."""

    def initialize(self, reader: UsageReader, since: timedelta, hinter: SharedHints | None) -> None:
        self.reader, self.since, self.hinter = reader, since, hinter

    @web.authenticated
    async def get(self, user: str | None = None):
        me = self.current_user
        name, admin = me.get("name"), bool(me.get("admin"))
        if user is None and not admin:
            user = name
        if user is not None and user != name and not admin:
            raise web.HTTPError(403, "you may only see your own usage")
        until = datetime.now(timezone.utc)
        since = until - self.since
        rows, hints, note = await usage_view(self.reader, self.hinter, user, since, until)
        title = f"GPU usage of {user}" if user is not None else "GPU usage by user"
        self.set_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
        self.finish(page(title, rows, since, until, hints, note))


def main(argv: list[str] | None = None) -> int:
    adopt_hub_api_url()  # HubOAuth reads $JUPYTERHUB_API_URL
    p = argparse.ArgumentParser(prog="gpuhub-usage-web", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True)
    p.add_argument("--since", default="7d")
    p.add_argument("--profiles-file", help="with --prometheus-url: right-sizing hints")
    p.add_argument("--prometheus-url")
    p.add_argument("--scrape-interval", type=float, default=30.0, help="the DCGM exporter's, seconds")
    a = p.parse_args(argv)
    if bool(a.profiles_file) != bool(a.prometheus_url):
        p.error("--profiles-file and --prometheus-url go together (right-sizing hints need both)")

    try:
        seconds = parse(a.since)
    except ValueError as e:
        p.error(f"--since: {e}")
    if seconds <= 0:
        p.error(f"--since {a.since!r}: a duration such as 7d")
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:9403"))
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpu-usage/")
    hinter = None
    if a.prometheus_url:
        hinter = make_hinter(load_profiles(a.profiles_file), a.prometheus_url, a.scrape_interval)
    make_app(a.store, timedelta(seconds=seconds), prefix, hinter).listen(url.port or 80, listen_address(url))
    ioloop.IOLoop.current().add_callback(LoopGuard().start)  # its stalls: logged (services/loopguard.py)
    ioloop.IOLoop.current().start()
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # the hub stops its managed services with SIGINT: a stop, not a crash
        from jupyterhub_gpu.services.stopped import exit_now

        exit_now()
