"""The one duration parser for every duration a user or an admin writes (pure): `90`, `30m`, `2h`,
`1h30m`, `1 day 2 hours`, `1.5h`.

Bounded and linear by construction, because its input is hostile: a job's `timeout` comes straight
from a request body. The text is at most MAX_CHARS long (checked first), each number at most 9 digits
(with at most 6 decimals), and it is read left to right one `<number> <unit>` at a time by a pattern
whose parts never overlap (digits, then spaces, then letters), so nothing backtracks. pytimeparse2,
used before, backtracked on `1d` + spaces + `x` (about N^5: 100 spaces took 92 s on the service's loop).
"""
from __future__ import annotations

import re

#: Longer than any duration anyone writes (`1 week 6 days 23 hours 59 minutes 59 seconds` is 45).
MAX_CHARS = 64
EXAMPLES = "write e.g. 90 (seconds), 30m, 2h, 1h30m or 7d"

_UNITS = {
    "w": 604800, "wk": 604800, "wks": 604800, "week": 604800, "weeks": 604800,
    "d": 86400, "day": 86400, "days": 86400,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
}
#: One `<number> <unit>` part: digits, optional spaces, letters (disjoint classes: no backtracking).
_PART = re.compile(r"[ \t]*([0-9]{1,9}(?:\.[0-9]{1,6})?)[ \t]*([A-Za-z]{0,7})")


def parse(text: str) -> float:
    """Seconds from `text`; ValueError saying what is wrong and what to write otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a duration; {EXAMPLES}")
    if len(text) > MAX_CHARS:
        raise ValueError(f"{text[:20]!r}... is {len(text)} characters; a duration is at most {MAX_CHARS}")
    body = text.strip()
    if body.startswith("-"):
        raise ValueError(f"{text!r} must be longer than zero; write e.g. 30m or 2h")
    if re.fullmatch(r"[0-9]{1,9}(?:\.[0-9]{1,6})?", body):
        return float(body)
    total, pos, last = 0.0, 0, None
    while pos < len(body):
        m = _PART.match(body, pos)
        unit = _UNITS.get(m.group(2).lower()) if m else None
        if unit is None:
            raise ValueError(f"{text!r} is not a duration; {EXAMPLES}")
        if last is not None and unit >= last:  # `1h1h`, `30m2h`: largest unit first, each once
            raise ValueError(f"{text!r}: write each unit once, the largest first (e.g. 1h30m)")
        total, pos, last = total + float(m.group(1)) * unit, m.end(), unit
    if last is None:
        raise ValueError(f"{text!r} is not a duration; {EXAMPLES}")
    return total
