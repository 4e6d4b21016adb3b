"""A stop that always completes, for the commands that start processes (`gpuhub dev`, `gpuhub cluster`).

The first SIGINT, SIGTERM or SIGHUP raises KeyboardInterrupt once, which ends whatever was starting
or running and sends the command into its cleanup. Every later signal only sets `hurry` (cleanup
steps then stop waiting for an orderly exit and kill) and never raises, so a second Ctrl-C cannot
abort the cleanup half-way and orphan what is left. `critical()` holds the first signal back until a
block ends, so a process is never started without being recorded.
"""
from __future__ import annotations

import ctypes
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: Set by the first signal (or `begin()`): the command is stopping.
stopping = threading.Event()
#: Set by every later signal: stop steps wait no longer for an orderly exit.
hurry = threading.Event()

_state = {"depth": 0, "deferred": False}
_say: list[Callable[[str], None]] = [lambda msg: print(msg, file=sys.stderr, flush=True)]


def _handler(signum: int, frame) -> None:
    name = signal.Signals(signum).name
    if stopping.is_set():
        if hurry.is_set():
            _say[0](f"{name}: still stopping; it finishes on its own (nothing is left running)")
        else:
            hurry.set()
            _say[0](f"{name} again: stopping faster (not waiting for orderly exits, killing what is left)")
        return
    stopping.set()
    _say[0](f"{name}: stopping everything this command started (press Ctrl-C again to stop faster)")
    if _state["depth"]:
        _state["deferred"] = True
        return
    raise KeyboardInterrupt(name)


def install(say: Callable[[str], None]) -> dict:
    """Take over SIGINT, SIGTERM and SIGHUP in this (main) thread; returns the old handlers for `restore`."""
    _say[0] = say
    stopping.clear()
    hurry.clear()
    _state.update(depth=0, deferred=False)
    return {sig: signal.signal(sig, _handler) for sig in SIGNALS}


def restore(saved: dict) -> None:
    """The handlers `install` replaced (a command run in-process, e.g. from a test, leaves no trace)."""
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def begin() -> None:
    """The command stops on its own (a child exited): from now on a signal only hurries."""
    stopping.set()


@contextmanager
def critical() -> Iterator[None]:
    """A first signal inside the block raises when the block ends (e.g. between spawn and record)."""
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        if not _state["depth"] and _state["deferred"]:
            _state["deferred"] = False
            raise KeyboardInterrupt("deferred")


def become_subreaper() -> bool:
    """Orphaned descendants (a proxy whose hub was killed, a pod whose agent was) become our children
    instead of init's, so the final sweep still finds them. Linux only; False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    pr_set_child_subreaper = 36
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0) == 0
