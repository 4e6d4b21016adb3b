"""ipywidgets for `%gpu_submit`: the submit form and a status widget that updates itself.

`view(status)` is the status widget's state machine as a pure function (unit-tested with real job
status dicts from the service): what to show and whether to keep polling.
"""
from __future__ import annotations

import html
import os
import threading
import time
from typing import Any, Callable

from jupyterhub_gpu.contract import CLIENT_FINAL, HAS_RUN, JobState
from jupyterhub_gpu.parameters import format_value, parse_assignments, split_assignments

#: State → (JupyterLab theme colour of the widget's left border, icon). The colour marks the state beside
#: the words, never as text colour: every text uses the theme's font colours (readable in light and dark).
STYLE = {JobState.QUEUED: ("var(--jp-warn-color1, #f57c00)", "⏳"),
         JobState.ADMITTED: ("var(--jp-brand-color1, #1976d2)", "✅"),
         JobState.RUNNING: ("var(--jp-success-color1, #388e3c)", "▶"),
         JobState.RESUMED: ("var(--jp-warn-color1, #f57c00)", "↻"),
         JobState.SUCCEEDED: ("var(--jp-success-color1, #388e3c)", "✔"),
         JobState.FAILED: ("var(--jp-error-color1, #d32f2f)", "✖"),
         JobState.CANCELLED: ("var(--jp-border-color1, #bdbdbd)", "■"),
         JobState.UNKNOWN: ("var(--jp-border-color1, #bdbdbd)", "?")}
#: Text in the theme's own colours: primary and secondary (both at least 4.5:1 on the theme's background).
TEXT = "color: var(--jp-ui-font-color1, #000000de)"
MUTED = "color: var(--jp-ui-font-color1, #000000de); opacity: .85"
FINAL = CLIENT_FINAL
#: States whose pod has run: the log and the output notebook are worth showing.
_HAS_RUN = HAS_RUN


def output_link(status: dict, env: dict | None = None) -> str | None:
    """JupyterLab URL of the output notebook ~/gpu-jobs/<job>/<name>.ipynb (the server's root is home)."""
    env = os.environ if env is None else env
    nb = (status.get("notebook") or "notebook.ipynb").rsplit("/", 1)[-1]
    prefix = env.get("JUPYTERHUB_SERVICE_PREFIX", "/")
    return f"{prefix.rstrip('/')}/lab/tree/gpu-jobs/{status['name']}/{nb}"


def _minutes(seconds: float) -> str:
    return "~1 min" if seconds < 90 else f"~{round(seconds / 60)} min" if seconds < 7200 else f"~{seconds / 3600:.1f} h"


def eta_text(status: dict) -> str:
    """'ETA ~20 min (p90 ~45 min)' from the service's queue estimate, or 'no estimate yet' (thin history)."""
    p50, p90 = status.get("eta_p50_s"), status.get("eta_p90_s")
    if p50 is None:
        return "no estimate yet"
    return f"ETA {_minutes(p50)}" + (f" (p90 {_minutes(p90)})" if p90 is not None and p90 > p50 else "")


def _figure(x: float) -> str:
    """A rate or a loss in at most 3 significant digits (12,345 stays whole)."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


#: A report older than this is said to be old: the notebook stopped reporting (stuck, or a long cell without any).
QUIET_S = 120


def throughput_text(speed: dict | None, now: float | None = None) -> str:
    """The notebook's own progress in a few words: 'step 150/1000 · 160 samples/s · 0.2 s/step · ETA ~3 min ·
    loss 0.8', and how long ago when the last report is old ('' without a report)."""
    if not speed:
        return ""
    parts = []
    if speed.get("step") is not None:
        parts.append(f"step {speed['step']}" + (f"/{speed['total_steps']}" if speed.get("total_steps") else ""))
    if speed.get("samples_per_s") is not None:
        parts.append(f"{_figure(speed['samples_per_s'])} samples/s")
    if speed.get("step_s") is not None:
        parts.append(f"{_figure(speed['step_s'])} s/step")
    if speed.get("eta_s") is not None:
        parts.append(f"ETA {_minutes(speed['eta_s'])}")
    if speed.get("loss") is not None:
        parts.append(f"loss {_figure(speed['loss'])}")
    age = (time.time() if now is None else now) - speed.get("reported_at", 0)
    if age > QUIET_S:
        parts.append(f"last report {_minutes(age)} ago")
    return " · ".join(parts)


def view(status: dict | None, error: str | None = None, gone: bool = False, now: float | None = None) -> dict[str, Any]:
    """What the status widget shows for a job status (None before the first answer):
    {state, title, detail, color, icon, poll (keep polling?), interval (s), show_log, link?}; `now` (Unix
    seconds, default the clock) only ages the notebook's last progress report."""
    if gone:
        status = {**(status or {}), "state": JobState.CANCELLED, "message": "the job was cancelled or removed"}
    if status is None:
        color, icon = STYLE[JobState.UNKNOWN]
        return {"state": JobState.UNKNOWN, "title": "submitting…", "detail": error or "", "color": color,
                "icon": icon, "poll": error is None, "interval": 2.0, "show_log": False, "link": None}
    state = status.get("state", JobState.UNKNOWN)
    color, icon = STYLE.get(state, STYLE[JobState.UNKNOWN])
    detail = status.get("message") or ""
    if state == JobState.QUEUED:
        pos, of = status.get("position"), status.get("queue_length")
        title = f"Queued in {status.get('queue')} · position {pos} of {of} · {eta_text(status)}" if pos else "Queued"
        if status.get("preempted"):
            title += f" — preempted {status['preempted']}×, will resume from its checkpoint"
        interval = 5.0
    elif state == JobState.ADMITTED:
        title, interval = "Admitted — starting", 2.0
    elif state in (JobState.RUNNING, JobState.RESUMED):
        cell = status.get("cell")
        where = f"cell {cell['cell']}/{cell['of']}" if cell else "starting the kernel"
        title = f"{state} ({where})" + (f" on {status['node']}" if status.get("node") else "")
        if speed := throughput_text(status.get("throughput"), now):
            title += f" · {speed}"
        interval = 3.0
    elif state == JobState.SUCCEEDED:
        resumed = f" (resumed after {status['preempted']} preemption(s))" if status.get("preempted") else ""
        title = "Succeeded" + resumed
        interval = 0
    elif state == JobState.FAILED:
        title, interval = "Failed", 0
    else:
        title, interval = state, 0
    if error:
        detail = f"{detail} (last update failed: {error})" if detail else f"last update failed: {error}"
    final = state in FINAL
    return {"state": state, "title": title, "detail": detail, "color": color, "icon": icon,
            "poll": not final, "interval": interval or 5.0,
            "show_log": state in _HAS_RUN,
            "link": output_link(status) if state in _HAS_RUN else None}


def render_html(name: str, v: dict, status: dict | None) -> str:
    """The widget's head: name, state and plain-words detail; Kueue's own text only under "details"."""
    link = f' · <a href="{html.escape(v["link"])}" target="_blank">output notebook</a>' if v.get("link") else ""
    extra = ""
    if status:
        extra = (f'<div style="{MUTED};font-size:90%">{html.escape(str(status.get("profile")))} · '
                 f'priority {html.escape(str(status.get("priority")))} · '
                 f'{html.escape(str(status.get("notebook")))}</div>')
    raw = (status or {}).get("kueue_message") if v["state"] == JobState.QUEUED else None
    details = (f'<details><summary>details</summary><div style="{TEXT}">Kueue says: '
               f'<code>{html.escape(raw)}</code></div></details>') if raw else ""
    return (f'<div class="gpuhub-job-status" data-state="{html.escape(v["state"])}" style="{TEXT};border-left:4px '
            f'solid {v["color"]};padding-left:.6em"><b>{html.escape(name)}</b>: <span style="font-weight:bold">'
            f'{v["icon"]} {html.escape(v["title"])}</span>{link}<div>{html.escape(v["detail"])}</div>{details}'
            f'{extra}</div>')


def note_html(text: str, error: bool = False) -> str:
    """A line for the user in theme colours; an error is marked by a red border and announced (role=alert)."""
    if error:
        return (f'<div role="alert" style="{TEXT};border-left:4px solid var(--jp-error-color1, #d32f2f);'
                f'padding-left:.6em">{html.escape(text)}</div>')
    return f'<div style="{MUTED}">{html.escape(text)}</div>'


class StatusWidget:
    """A job's live status, polled in a background thread until the job is final."""

    def __init__(self, client, name: str, status: dict | None = None, log_lines: int = 15, autostart: bool = True):
        import ipywidgets as w

        self.client, self.name, self.status, self.log_lines = client, name, status, log_lines
        self.head = w.HTML()
        self.log = w.HTML()
        self.cancel_button = w.Button(description="Cancel", button_style="danger", layout=w.Layout(width="90px"),
                                      tooltip=f"Cancel {name} (asks first)")
        self.cancel_button.on_click(lambda _: self.ask_cancel())
        # Cancel asks first: a second, explicit button does it, another keeps the job
        self.confirm_note = w.HTML()
        self.confirm_button = w.Button(description="Yes, cancel it", button_style="danger",
                                       layout=w.Layout(width="130px"))
        self.keep_button = w.Button(description="Keep it", layout=w.Layout(width="90px"))
        self.confirm_button.on_click(lambda _: self.cancel())
        self.keep_button.on_click(lambda _: self.show_confirm(False))
        self.confirm = w.HBox([self.confirm_note, self.confirm_button, self.keep_button])
        self.confirm.layout.display = "none"
        self.box = w.VBox([w.HBox([self.head, self.cancel_button]), self.confirm, self.log])
        self._stop = threading.Event()
        self.refresh_view(status)
        if autostart and view(status)["poll"]:
            threading.Thread(target=self._loop, daemon=True, name=f"gpu-job-{name}").start()

    def _ipython_display_(self):
        from IPython.display import display
        display(self.box)

    def refresh_view(self, status: dict | None, error: str | None = None, gone: bool = False) -> dict:
        v = view(status, error, gone)
        self.head.value = render_html(self.name, v, status)
        self.cancel_button.layout.display = None if v["poll"] else "none"
        return v

    def poll_once(self) -> dict:
        from .client import JobsError

        error = gone = None
        try:
            self.status = self.client.job(self.name)
        except JobsError as e:
            gone = e.status == 404
            error = None if gone else str(e)
        v = self.refresh_view(self.status, error, bool(gone))
        if v["show_log"]:
            try:
                tail = self.client.logs(self.name, 16384).splitlines()[-self.log_lines:]
                self.log.value = ('<pre class="gpuhub-job-log" tabindex="0" aria-label="job log, last lines" '
                                  'style="max-height:16em;overflow:auto;font-size:85%;padding:.4em;'
                                  'background:var(--jp-layout-color2, #eeeeee);'
                                  'color:var(--jp-content-font-color1, #000000de)">'
                                  + html.escape("\n".join(tail)) + "</pre>")
            except JobsError:
                pass
        return v

    def _loop(self):
        while not self._stop.is_set():
            v = self.poll_once()
            if not v["poll"]:
                return
            self._stop.wait(v["interval"])

    def stop(self):
        self._stop.set()

    def show_confirm(self, on: bool) -> None:
        self.confirm_note.value = (f'<span role="alert" style="{TEXT}">Cancel {html.escape(self.name)}? Its pod stops; '
                                   'the output so far and its checkpoints stay.</span>') if on else ""
        self.confirm.layout.display = None if on else "none"
        self.cancel_button.disabled = on

    def ask_cancel(self) -> None:
        """The Cancel button: ask first (a job may have run for hours)."""
        self.show_confirm(True)

    def cancel(self):
        from .client import JobsError

        self.show_confirm(False)
        try:
            self.client.cancel(self.name)
        except JobsError as e:
            self.head.value += note_html(f"cancel failed: {e}", error=True)
            return
        self._stop.set()
        self.refresh_view(self.status, gone=True)


def parse_params(text: str) -> dict:
    """`k=v` per line (or comma-separated); each value read by the one rule of `jupyterhub_gpu.parameters`
    (a Python literal, else the string)."""
    return parse_assignments(split_assignments(text))


class SubmitForm:
    """Profile (the user's GPU profiles with free quota and queue length), parameters, priority,
    timeout, nodes (a profile with max_nodes), Submit → a StatusWidget in place."""

    def __init__(self, client, submit: Callable[..., Any], defaults: dict | None = None):
        import ipywidgets as w

        defaults = defaults or {}
        info = client.profiles()
        self.profiles = info["profiles"]
        options = []
        for p in self.profiles:
            free = "" if p.get("free") is None else f", {p['free']} free"
            queued = "" if p.get("queued") is None else f", {p['queued']} queued"
            gpu = p.get("gpu_label") or f"{p['gpus']} GPU"  # "¼ T4 (time-sliced)", "1g.10gb MIG slice"
            options.append((f"{p['display_name']} ({gpu}{free}{queued})", p["slug"]))
        self.profile = w.Dropdown(options=options or [("no GPU profile is available to you", "")],
                                  value=defaults.get("profile") if defaults.get("profile") in
                                  [o[1] for o in options] else (options[0][1] if options else ""),
                                  description="Profile", style={"description_width": "80px"},
                                  layout=w.Layout(width="560px"))
        self.params = w.Textarea(value="\n".join(f"{k}={format_value(v)}"
                                                  for k, v in (defaults.get("parameters") or {}).items()),
                                 placeholder="epochs=10\nlr=0.001", description="Parameters",
                                 style={"description_width": "80px"}, layout=w.Layout(width="560px", height="80px"))
        self.priority = w.Dropdown(options=[("profile default", "")] + [(p, p) for p in info.get("priorities", [])],
                                   value=defaults.get("priority") or "", description="Priority",
                                   style={"description_width": "80px"})
        self.timeout = w.Text(value=str(defaults.get("timeout") or "2h"), description="Timeout",
                              style={"description_width": "80px"}, layout=w.Layout(width="200px"))
        # multi-node jobs: shown only for a profile that allows them (its max_nodes)
        self.nodes = w.BoundedIntText(value=1, min=1, max=1, description="Nodes", style={"description_width": "80px"},
                                      layout=w.Layout(width="200px"))
        self.profile.observe(lambda _: self._nodes_for_profile(defaults.get("nodes")), names="value")
        self._nodes_for_profile(defaults.get("nodes"))
        self.button = w.Button(description="Submit", button_style="primary", icon="rocket")
        self.message = w.HTML()
        self.out = w.VBox([])
        self.button.on_click(lambda _: self.on_submit(submit))
        self.box = w.VBox([w.HTML(f"<b>Run this notebook as a GPU job</b> (team {info.get('team')})"),
                           self.profile, self.params, w.HBox([self.priority, self.timeout, self.nodes]), self.button,
                           self.message, self.out])

    def _ipython_display_(self):
        from IPython.display import display
        display(self.box)

    def _nodes_for_profile(self, wanted: int | None = None) -> None:
        most = next((p.get("max_nodes") or 1 for p in self.profiles if p["slug"] == self.profile.value), 1)
        self.nodes.max = most
        self.nodes.value = min(max(int(wanted or 1), 1), most)
        self.nodes.layout.display = None if most > 1 else "none"

    def on_submit(self, submit):
        try:
            params = parse_params(self.params.value)
        except ValueError as e:
            self.message.value = note_html(str(e), error=True)
            return
        self.button.disabled = True
        try:
            widget, note = submit(profile=self.profile.value, parameters=params, priority=self.priority.value or None,
                                  timeout=self.timeout.value or None,
                                  **({"nodes": self.nodes.value} if self.nodes.value > 1 else {}))
        except Exception as e:  # shown, not raised, in a button callback
            self.message.value = note_html(str(e), error=True)
            self.button.disabled = False
            return
        self.message.value = html.escape(note)
        self.out.children = [widget.box]
        self.button.disabled = False


def wait_final(widget: StatusWidget, timeout: float) -> dict:
    """Block until the job is final (tests, scripts)."""
    deadline = time.monotonic() + timeout
    while True:
        v = widget.poll_once()
        if not v["poll"] or time.monotonic() > deadline:
            return v
        time.sleep(0.5)
