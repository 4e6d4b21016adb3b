"""`%gpu_submit`, `%gpu_jobs`, `%gpu_logs`, `%gpu_cancel`: send the current notebook as a queued GPU Job.

  %gpu_submit                                   a form: profile, parameters, priority, timeout, Submit
  %gpu_submit --profile a100-mig-1g10gb --param epochs=10 --param lr=0.001 --priority high --timeout 2h
  %gpu_submit --profile h100-full --nodes 2     one job on 2 nodes (torchrun's env in each rank)
  %gpu_jobs [--all]                             your jobs, with live status widgets for unfinished ones
  %gpu_logs JOB [--tail BYTES] [--rank K]       the job's log (a multi-node job's: rank K's, default 0)
  %gpu_cancel JOB                               cancel it (its pods stop; checkpoints stay)
What runs is the notebook as last SAVED: in JupyterLab with the jupyterhub-gpu extension the magic asks
it to save first (jupyterhub_gpu/singleuser/frontend.py); elsewhere unsaved edits are not included, and the magic says
so. The magics display their widgets and return None (a returned widget would be shown twice, once as
the cell's Out); the last ones stay on the Magics object (`last_widget`, `last_form`, `last_jobs`).
Inside a running GPU job (`$GPUHUB_JOB` set) `%gpu_submit` does nothing, so a job never resubmits itself.
"""
from __future__ import annotations

import argparse
import os
import shlex
from typing import Any

from IPython.core.magic import Magics, line_magic, magics_class

from jupyterhub_gpu.contract import CHECKPOINTS_FOLDER, ENV_JOB, JOBS_FOLDER, JobState
from jupyterhub_gpu.parameters import parse_assignments

from . import frontend
from .client import JobsClient, JobsError, current_notebook_path, read_notebook, saved_note


def _saved_at(path: str) -> float | None:
    try:
        return read_notebook(path).saved_at
    except JobsError:
        return None


class UsageError(ValueError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage()}")


def parse_submit_args(line: str) -> dict[str, Any]:
    """The arguments of `%gpu_submit` (pure). No --profile means: show the form."""
    p = _Parser(prog="%gpu_submit", add_help=False)
    p.add_argument("--profile")
    p.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--priority")
    p.add_argument("--timeout")
    p.add_argument("--nodes", type=int, default=None, help="nodes for one multi-node job (the profile's max_nodes)")
    p.add_argument("--option", "-o", action="append", default=[], metavar="NAME=CHOICE",
                   help="a profile option (e.g. image=tensorflow; a typed value: image--unlisted-choice=REF); "
                        "default: this server's own choices when the job uses the server's profile")
    p.add_argument("--notebook", help="notebook path (default: this kernel's notebook)")
    p.add_argument("--wait", action="store_true", help="block until the job finishes")
    try:
        a = p.parse_args(shlex.split(line))
    except ValueError as e:  # shlex: unbalanced quotes
        raise UsageError(f"%gpu_submit: {e}") from None
    try:
        params = parse_assignments(a.param)  # the one rule: a Python literal, else the string
    except ValueError as e:
        raise UsageError(f"%gpu_submit: --param {e}") from None
    options = {}
    for item in a.option:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"%gpu_submit: --option {item!r}: write NAME=CHOICE, e.g. image=tensorflow")
        options[name] = value
    return {"profile": a.profile, "parameters": params, "priority": a.priority, "timeout": a.timeout,
            "notebook": a.notebook, "wait": a.wait, "options": options, "nodes": a.nodes}


@magics_class
class GPUMagics(Magics):
    client_factory = JobsClient
    last_widget = last_form = last_jobs = None

    def _client(self) -> JobsClient:
        return self.client_factory()

    def _say(self, text: str, error: bool = False) -> None:
        from IPython.display import HTML, display

        from .widgets import note_html
        display(HTML(note_html(text, error)))  # theme colours; an error is announced (role=alert)

    def submit(self, client: JobsClient, profile: str, parameters: dict, priority: str | None, timeout: str | None,
               notebook: str | None = None, options: dict | None = None, nodes: int | None = None):
        from .widgets import StatusWidget

        path = notebook or current_notebook_path()
        if not path:
            raise JobsError("cannot tell which notebook this kernel belongs to ($JPY_SESSION_NAME is not set); "
                            "pass --notebook PATH")
        saved = frontend.save_first(path, lambda: _saved_at(path))  # JupyterLab saves the editor's content
        nb = read_notebook(path)
        note = f"JupyterLab saved {nb.path}; submitting it." if saved else saved_note(nb)
        status = client.submit(profile, nb.path, nb.content, parameters, priority, timeout, options, nodes)
        return StatusWidget(client, status["name"], status), note + f" Job {status['name']} submitted."

    @line_magic
    def gpu_submit(self, line: str = ""):
        from IPython.display import display

        if job := os.environ.get(ENV_JOB):
            self._say(f"%gpu_submit skipped: this notebook is running as GPU job {job}")
            return None
        try:
            args = parse_submit_args(line)
            client = self._client()
            if not args["profile"]:
                from .widgets import SubmitForm

                self.last_form = SubmitForm(client, lambda **kw: self.submit(client, notebook=args["notebook"], **kw),
                                            defaults=args)
                display(self.last_form)
                return None
            widget, note = self.submit(client, args["profile"], args["parameters"], args["priority"],
                                       args["timeout"], args["notebook"], args["options"], args["nodes"])
        except (UsageError, JobsError) as e:
            self._say(str(e), error=True)
            return None
        self._say(note)
        self.last_widget = widget
        display(widget)
        if args["wait"]:
            from .widgets import wait_final
            wait_final(widget, 7 * 24 * 3600)
        return None

    @line_magic
    def gpu_jobs(self, line: str = ""):
        import html

        import ipywidgets as w
        from IPython.display import display

        from .widgets import FINAL, TEXT, StatusWidget, output_link

        try:
            jobs = self._client().jobs(everyone="--all" in line.split())
        except JobsError as e:
            self._say(str(e), error=True)
            return None
        self.last_jobs = jobs
        if not jobs:
            self._say("no GPU jobs; submit this notebook with %gpu_submit")
            return None
        client = self._client()
        rows = []
        for j in jobs:
            if j.get("state") in FINAL:
                link = "" if j["state"] == JobState.CANCELLED else \
                    f' · <a href="{html.escape(output_link(j))}" target="_blank">output notebook</a>'
                rows.append(w.HTML(f"<div style='{TEXT}'><b>{html.escape(j['name'])}</b>: {html.escape(j['state'])} — "
                                   f"{html.escape(j.get('message') or '')} ({html.escape(str(j.get('notebook')))})"
                                   + link + "</div>"))
            else:
                rows.append(StatusWidget(client, j["name"], j).box)
        display(w.VBox(rows))
        return None

    @line_magic
    def gpu_logs(self, line: str = ""):
        p = _Parser(prog="%gpu_logs", add_help=False)
        p.add_argument("job")
        p.add_argument("--tail", type=int, default=65536)
        p.add_argument("--rank", type=int, default=None, help="a multi-node job's rank (default 0)")
        try:
            a = p.parse_args(shlex.split(line))
            text = self._client().logs(a.job, a.tail, a.rank)
        except (ValueError, JobsError) as e:  # UsageError is a ValueError (so is shlex's unbalanced quote)
            self._say(str(e), error=True)
            return None
        print(text)
        return None

    @line_magic
    def gpu_cancel(self, line: str = ""):
        name = line.strip()
        if not name:
            self._say("usage: %gpu_cancel JOB", error=True)
            return None
        try:
            self._client().cancel(name)
        except JobsError as e:
            self._say(str(e), error=True)
            return None
        self._say(f"cancelled {name}; its output and checkpoints stay in "
                  f"~/{JOBS_FOLDER}/{name}/ ({CHECKPOINTS_FOLDER}/)")
        return None
