"""The end of a pod's log through the kubelet's log API (pure logic over one fetch call).

The kubelet's `limitBytes` keeps the FIRST bytes of what it selects: asked only for `limitBytes=16384`, a job that
has logged more answers with its first 16 KiB for ever, and its status, throughput and `%gpu_logs` freeze. The end is
`tailLines` (select the last N lines), then `limitBytes` (cap what that selection sends, from its start): so ask for
a generous number of lines under a cap a few times the wanted size, keep the last bytes, and when the cap cut the
selection (long lines), ask again for fewer lines.
"""
from __future__ import annotations

from typing import Awaitable, Callable

#: Lines first asked for per byte wanted (log lines of a notebook run are rarely under 40 bytes).
BYTES_PER_LINE = 40
#: The cap of each answer, in wanted sizes: room for lines longer than BYTES_PER_LINE without a second call.
CAP_FACTOR = 4

#: Calls at most for one read (the first nearly always does: a second when lines are far longer or shorter).
MAX_CALLS = 6
#: The longest single line read whole to show its end (a line longer still shows its start).
LONGEST_LINE = 2**20

Fetch = Callable[[int, int], Awaitable[bytes]]  # (tailLines, limitBytes) → the log's bytes as the kubelet answers


async def read_tail(fetch: Fetch, tail_bytes: int) -> str:
    """At most the last `tail_bytes` of the log (whole lines unless one line alone is longer), newest included."""
    lines, cap = max(1, tail_bytes // BYTES_PER_LINE), tail_bytes * CAP_FACTOR
    few, many = 0, tail_bytes + 1  # asking `few` lines gave too little; `many` were cut short by the cap
    kept = b""
    for _ in range(MAX_CALLS):
        data = await fetch(lines, cap)
        got = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        if len(data) >= cap:  # cut: the newest lines never came; they are longer than guessed
            many = lines
            # the answer held `got` lines in CAP_FACTOR wanted sizes: half of them fit twice over
            lines = max(few + 1, min(lines // 2, got // 2))
        elif len(data) >= tail_bytes or got < lines or lines >= tail_bytes:  # enough, or the whole log
            return last_bytes(data, tail_bytes)
        else:  # short lines: more of them fit
            few, kept = lines, data
            lines = min(lines * 8, many - 1)
        if lines <= few or lines >= many:  # one more line would be over the cap: the lines that fit
            if few:
                return last_bytes(kept, tail_bytes)
            # the newest line alone is over the cap: its end, when it is not absurdly long (else its start)
            return last_bytes(await fetch(1, LONGEST_LINE), tail_bytes)
    return last_bytes(kept or data, tail_bytes)  # lines of very mixed lengths: the whole lines that fit, newest last


def last_bytes(data: bytes, n: int) -> str:
    """The last `n` bytes, from the first line that starts inside them (a cut line is dropped; a lone line kept)."""
    if len(data) <= n:
        return data.decode("utf-8", errors="ignore")  # a character limitBytes cut: dropped, never an error
    tail = data[-n:]
    start = 0 if data[-n - 1:-n] == b"\n" else tail.find(b"\n") + 1  # the window may begin on a line's start
    return (tail[start:] if 0 < start < len(tail) else tail).decode("utf-8", errors="ignore")
