"""A preemptible server's last seconds, on the server's side (the jupyter_server extension; JupyterLab's side is
the labextension's `watchStopping`).

Kueue gives no notice before it preempts a server: the pod is deleted, and the kubelet sends SIGTERM, then
SIGKILL after the pod's grace period ($GPUHUB_PREEMPTION_GRACE_S, hub/preemption.py). jupyter_server would stop
at once on SIGTERM; on a preemptible server this handler first tells every open JupyterLab: at once, as an event
on jupyter_server's event bus (`STOPPING_SCHEMA`, which JupyterLab receives on its event websocket, even in a
background tab whose timers the browser slows down), and at GET <base>/gpuhub/stopping, which JupyterLab also
polls every `POLL_S` seconds (where the event stream is not available). JupyterLab warns the user and saves every
unsaved document (the unsaved edits live only in the browser, so the browser must save them). The server stops
itself `SAVE_WINDOW_S` later (always before the grace period ends), or at once when no JupyterLab has asked within
`OPEN_S` (none is open: nothing to save).
"""
from __future__ import annotations

import os
import signal
import time
from typing import Callable

from jupyter_server.base.handlers import APIHandler
from tornado import web

from jupyterhub_gpu.contract import ENV_PREEMPTION_GRACE

#: How often JupyterLab asks (stopping.ts: STOPPING_POLL_MS).
POLL_S = 5
#: A JupyterLab that asked this recently is open (a background tab's timers may run only once a minute).
OPEN_S = 90
#: Time for every open JupyterLab to hear the news (the event at once; a poll within POLL_S) and save (a second
#: or two normally).
SAVE_WINDOW_S = 15
#: The event JupyterLab hears on jupyter_server's event bus (registered by `install`).
STOPPING_SCHEMA = "https://events.jupyter.org/jupyterhub-gpu/stopping/v1"
SCHEMA = {"$id": STOPPING_SCHEMA, "version": "1", "title": "jupyterhub-gpu: this server is stopping",
          "personal-data": False, "description": "A preemptible server got SIGTERM: save open documents now.",
          "type": "object", "required": ["message", "seconds_left"],
          "properties": {"message": {"type": "string"}, "seconds_left": {"type": "integer"}}}
#: Kept free before SIGKILL, for jupyter_server's own shutdown (kernels).
MARGIN_S = 5


def grace_from_env(env: dict | None = None) -> int | None:
    """The grace period of a preemptible server, else None (not preemptible, or a value that is no number)."""
    value = (os.environ if env is None else env).get(ENV_PREEMPTION_GRACE, "")
    return int(value) if value.isdigit() and int(value) > 0 else None


class Stopping:
    """What this server says about its own end (pure, with a clock)."""

    def __init__(self, grace_s: int | None, clock: Callable[[], float] = time.monotonic):
        self.grace_s, self.clock = grace_s, clock
        self.since: float | None = None
        self.last_asked: float | None = None

    def asked(self) -> None:
        self.last_asked = self.clock()

    def begin(self) -> float:
        """SIGTERM came: seconds until the server stops itself (0: no JupyterLab open, nothing to wait for)."""
        now = self.clock()
        if self.since is None:
            self.since = now
        if self.last_asked is None or now - self.last_asked > OPEN_S:
            return 0.0
        return float(max(0, min(SAVE_WINDOW_S, (self.grace_s or 0) - MARGIN_S)))

    def answer(self) -> dict:
        """GET <base>/gpuhub/stopping's answer."""
        if self.grace_s is None:
            return {"preemptible": False, "stopping": False}
        if self.since is None:
            return {"preemptible": True, "stopping": False, "grace_s": self.grace_s}
        left = max(0, round(self.grace_s - (self.clock() - self.since)))
        return {"preemptible": True, "stopping": True, "grace_s": self.grace_s, "seconds_left": left,
                "message": ("This server is stopping, most likely preempted: it runs a preemptible profile and a "
                            "training job of your team needs its GPU. Your open notebooks are being saved; "
                            "variables in running kernels will be lost. Afterwards, start the server again from the "
                            "hub's home page, or send the notebook to the GPU queue with %gpu_submit.")}


class StoppingHandler(APIHandler):
    @web.authenticated
    def get(self):
        stopping: Stopping = self.settings["gpuhub_stopping"]
        stopping.asked()
        self.finish(stopping.answer())


def install(server_app, env: dict | None = None) -> Stopping:
    """Keep the server's end in `server_app.web_app.settings`; on a preemptible server, take over SIGTERM (called
    from the extension's load, after jupyter_server set its own handler) and stop after the save window."""
    stopping = Stopping(grace_from_env(env))
    server_app.web_app.settings["gpuhub_stopping"] = stopping
    if stopping.grace_s is None:
        return stopping

    try:
        server_app.event_logger.register_event_schema(SCHEMA)
    except Exception as e:  # noqa: BLE001 - no event bus (an old jupyter_server): JupyterLab's poll still hears it
        server_app.log.warning("jupyterhub-gpu: no stopping event (%s); JupyterLab polls instead", e)

    def stop_later():
        wait = stopping.begin()
        answer = stopping.answer()
        try:
            server_app.event_logger.emit(schema_id=STOPPING_SCHEMA, data={
                "message": answer["message"], "seconds_left": answer["seconds_left"]})
        except Exception as e:  # noqa: BLE001 - the poll still says it
            server_app.log.warning("jupyterhub-gpu: the stopping event failed: %s", e)
        server_app.log.warning("jupyterhub-gpu: SIGTERM on a preemptible server: JupyterLab told, saving; stopping "
                               "in %.0f s (grace period %s s)", wait, stopping.grace_s)
        server_app.io_loop.call_later(wait, server_app.stop)

    def on_sigterm(sig, frame):  # noqa: ARG001 - a signal handler: hand over to the event loop
        if stopping.since is not None:  # a second SIGTERM: stop now
            server_app.stop(from_signal=True)
            return
        stopping.since = stopping.clock()
        server_app.io_loop.add_callback_from_signal(stop_later)

    signal.signal(signal.SIGTERM, on_sigterm)
    return stopping
