"""The console's chart of GPU slots in use per pool over the last day: the samples kept in memory (`SlotHistory`)
and each pool drawn as a small inline SVG (`slots_svg`, pure).

Constant memory: each background read folds into its 5-minute bucket (the highest count read in it), and a pool
keeps at most a day of buckets. Not persisted: the history covers the time since the console started. The SVG is
elements with attributes only (no script, no style sheet, nothing fetched), every text escaped, named for screen
readers by its <title> and aria-label, and a text summary says what a person would read off it.
"""
from __future__ import annotations

import html
import math
import re
import time
from collections import deque
from dataclasses import dataclass
from typing import Mapping, Sequence

BUCKET_S = 300
SPAN_S = 24 * 3600
MAX_BUCKETS = SPAN_S // BUCKET_S + 1
#: Counts are clamped to this (no pool has more slots; keeps the arithmetic finite for any input).
MAX_COUNT = 10**6
W, H = 480, 100                    # the SVG's size in px
LEFT, RIGHT, TOP, BOTTOM = 40, 8, 8, 20  # the plot's margins (axis labels)
FILL, LINE, INK = "#9cc3e6", "#1f4e79", "#333333"  # in use; slots; text (4.5:1 and more on white)


@dataclass(frozen=True)
class Bucket:
    start: float            # a multiple of the bucket size, seconds since the epoch
    used: int               # the highest count of slots in use read in this bucket
    total: int | None       # the highest count of slots read in it (None: not read)


def _clamp(value: int | None) -> int | None:
    return None if value is None else max(0, min(int(value), MAX_COUNT))


class SlotHistory:
    """Per GPU pool, its buckets of the last `span` seconds (at most `span // bucket + 1` of them)."""

    def __init__(self, bucket: float = BUCKET_S, span: float = SPAN_S):
        self.bucket, self.span = bucket, span
        self.pools: dict[str, deque[Bucket]] = {}

    def record(self, at: float, counts: Mapping[str, tuple[int | None, int | None]]) -> None:
        """One read: pool -> (slots in use, slots); a pool whose use is unknown adds nothing (a gap on the
        chart), a pool no longer in `counts` (gone from the file) is forgotten."""
        for gone in [p for p in self.pools if p not in counts]:
            del self.pools[gone]
        start = at - at % self.bucket if math.isfinite(at) else None
        for pool, (used, total) in counts.items():
            kept = self.pools.setdefault(pool, deque(maxlen=int(self.span // self.bucket) + 1))
            if start is None:  # no time (a clock gone wrong): nothing to place
                continue
            while kept and kept[-1].start > start:  # the clock went back: what is "later" is dropped
                kept.pop()
            while kept and kept[0].start <= at - self.span:
                kept.popleft()
            if used is None:
                continue
            used, total = _clamp(used), _clamp(total)
            if kept and kept[-1].start == start:
                last = kept.pop()
                used = max(used, last.used)
                total = total if last.total is None else last.total if total is None else max(total, last.total)
            kept.append(Bucket(start, used, total))

    def snapshot(self) -> dict[str, tuple[Bucket, ...]]:
        return {pool: tuple(kept) for pool, kept in self.pools.items()}


def _hhmm(t: float) -> str:
    try:
        return time.strftime("%H:%M UTC", time.gmtime(t))
    except (ValueError, OverflowError, OSError):  # no such time (a clock gone wrong): the chart still draws
        return "?"


def _ago(seconds: float) -> str:
    return f"{seconds / 3600:g} h ago"


def _text(value: str) -> str:
    """Escaped, without the control characters XML cannot hold (a name is text, never markup)."""
    return html.escape(re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]", "", value), quote=True)


def _usable(buckets: Sequence[Bucket], now: float, span: float) -> list[Bucket]:
    """The buckets inside the window, in time order, counts clamped (any input: the chart never fails)."""
    if not math.isfinite(now):
        return []
    out = [Bucket(b.start, _clamp(b.used) or 0, _clamp(b.total)) for b in buckets
           if math.isfinite(b.start) and now - span < b.start <= now]
    return sorted(out, key=lambda b: b.start)


def summary(buckets: Sequence[Bucket], now: float, span: float = SPAN_S) -> str:
    """'peak 6 of 8 at 10:35 UTC; latest 3 of 8 at 14:05 UTC' (the latest peak), 'none in use; latest 0 of 4 at
    14:05 UTC', or 'no reading yet'."""
    kept = _usable(buckets, now, span)
    if not kept:
        return "no reading yet"
    peak = max(reversed(kept), key=lambda b: b.used)

    def of(b: Bucket) -> str:
        return f"{b.used}" + ("" if b.total is None else f" of {b.total}") + f" at {_hhmm(b.start)}"
    return f"{'none in use' if peak.used == 0 else f'peak {of(peak)}'}; latest {of(kept[-1])}"


def slots_svg(pool: str, buckets: Sequence[Bucket], now: float, span: float = SPAN_S,
              bucket: float = BUCKET_S) -> str:
    """The pool's slots in use (filled steps) under its slots (a line) over the `span` up to `now` (pure)."""
    kept = _usable(buckets, now, span)
    top = max([1] + [b.used for b in kept] + [b.total or 0 for b in kept])
    x0, x1, y0, y1 = LEFT, W - RIGHT, H - BOTTOM, TOP

    def x(t: float) -> str:
        return f"{x0 + (min(max(t, now - span), now) - (now - span)) / span * (x1 - x0):.1f}"

    def y(v: int) -> str:
        return f"{y0 - v / top * (y0 - y1):.1f}"

    used: list[str] = []
    slots: list[str] = []
    for i, b in enumerate(kept):
        prev = kept[i - 1] if i else None
        joined = prev is not None and b.start - prev.start <= bucket
        end = x(b.start + bucket)
        used.append((f"V{y(b.used)}" if joined else f"M{x(b.start)},{y0}V{y(b.used)}") + f"H{end}")
        if b.total is not None:
            slots.append((f"V{y(b.total)}" if joined and prev.total is not None
                          else f"M{x(b.start)},{y(b.total)}") + f"H{end}")
        if i == len(kept) - 1 or kept[i + 1].start - b.start > bucket:  # the end of a run: close its area
            used.append(f"V{y0}Z")
    name = f"GPU slots in use in pool {pool}, last 24 h: {summary(kept, now, span)}"
    label = _text(name)
    return (f"<svg xmlns='http://www.w3.org/2000/svg' role='img' aria-label='{label}' width='{W}' height='{H}' "
            f"viewBox='0 0 {W} {H}'><title>{label}</title>"
            f"<line x1='{x0}' y1='{y0}' x2='{x1}' y2='{y0}' stroke='{INK}' stroke-width='1'/>"
            f"<line x1='{x0}' y1='{y1}' x2='{x0}' y2='{y0}' stroke='{INK}' stroke-width='1'/>"
            + (f"<path d='{''.join(used)}' fill='{FILL}' stroke='none'/>" if used else "")
            + (f"<path d='{''.join(slots)}' fill='none' stroke='{LINE}' stroke-width='1.5'/>" if slots else "")
            + f"<text x='{x0 - 4}' y='{y0}' text-anchor='end' font-size='11' fill='{INK}'>0</text>"
            f"<text x='{x0 - 4}' y='{y1 + 9}' text-anchor='end' font-size='11' fill='{INK}'>{top}</text>"
            f"<text x='{x0}' y='{H - 4}' font-size='11' fill='{INK}'>{_ago(span)}</text>"
            f"<text x='{(x0 + x1) / 2:.1f}' y='{H - 4}' text-anchor='middle' font-size='11' fill='{INK}'>"
            f"{_ago(span / 2)}</text>"
            f"<text x='{x1}' y='{H - 4}' text-anchor='end' font-size='11' fill='{INK}'>"
            f"now, {_text(_hhmm(now))}</text></svg>")
