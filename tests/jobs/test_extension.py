"""The notebook side: argument parsing, the status widget's state machine driven by real job states
(status dicts made by the service's own `derive_status` from Job/Workload/pod objects), notebook
discovery and the saved-version note, and the magics' registration."""
from __future__ import annotations

import json

import pytest

from jupyterhub_gpu.services.jobs.status import derive_status
from jupyterhub_gpu.singleuser.client import JobsError, current_notebook_path, read_notebook, saved_note, service_url
from jupyterhub_gpu.singleuser.magic import UsageError, parse_submit_args
from jupyterhub_gpu.singleuser.widgets import parse_params, view

from .conftest import job, pod, workload

LOG = "[gpuhub-runner] 10:05:03 cell 1/3 running\n[gpuhub-runner] 10:05:09 cell 2/3 running\n"
ENV = {"JUPYTERHUB_SERVICE_PREFIX": "/user/alice/"}


def states():
    """One job's life: queued 2nd → 1st → admitted → running → preempted → resumed → succeeded."""
    j = job()
    name = j["metadata"]["name"]
    wl = workload(name)
    yield derive_status(j, wl, [], {"position": 2, "of": 3})
    yield derive_status(j, wl, [], {"position": 1, "of": 2})
    j2, wl2 = job(suspend=False), workload(name, admitted=True)
    yield derive_status(j2, wl2, [pod("p1", phase="Pending")])
    yield derive_status(j2, wl2, [pod("p1")], None, LOG)
    yield derive_status(job(suspend=True), workload(name, evicted=True), [pod("p1", phase="Failed", exit_code=143)],
                        {"position": 1, "of": 1})
    resumed = [pod("p1", phase="Failed", exit_code=143, disrupted=True),
               pod("p2", created="2026-01-01T10:40:00Z")]
    yield derive_status(j2, workload(name, admitted=True, evicted=True), resumed, None, LOG)
    yield derive_status(job(suspend=False, conditions=[("Complete", "", "")]), None, resumed)


def test_widget_follows_a_job_through_its_life(monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/alice/")
    views = [view(s) for s in states()]
    titles = [v["title"] for v in views]
    assert titles[0] == "Queued in data-science · position 2 of 3 · no estimate yet"
    assert titles[1] == "Queued in data-science · position 1 of 2 · no estimate yet"
    assert titles[2] == "Admitted — starting"
    assert titles[3] == "Running (cell 2/3) on kwok-gpumig-0"
    assert titles[4].startswith("Queued in data-science · position 1 of 1 · no estimate yet — preempted 1×")
    assert titles[5] == "Preempted-and-resumed (cell 2/3) on kwok-gpumig-0"
    assert titles[6] == "Succeeded (resumed after 1 preemption(s))"
    assert [v["poll"] for v in views] == [True] * 6 + [False]
    assert views[3]["show_log"] and not views[0]["show_log"]
    assert views[6]["link"] == "/user/alice/lab/tree/gpu-jobs/gpu-alice-nb-abc123/nb.ipynb"


def test_widget_failed_cancelled_and_errors():
    failed = derive_status(job(suspend=False, conditions=[("Failed", "PodFailurePolicy", "exit code 3")]))
    v = view(failed)
    assert v["state"] == "Failed" and not v["poll"] and "cell of the notebook raised" in v["detail"] and v["link"]
    gone = view(failed, gone=True)
    assert gone["state"] == "Cancelled" and not gone["poll"]
    running = derive_status(job(suspend=False), workload("gpu-alice-nb-abc123", admitted=True), [pod("p1")])
    err = view(running, error="connection refused")
    assert err["poll"] and "last update failed: connection refused" in err["detail"]
    assert view(None)["poll"] and not view(None, error="refused")["poll"]


def test_submit_args():
    a = parse_submit_args("--profile a100-mig-1g10gb --param epochs=10 -p lr=0.001 -p name='run 1' "
                          "--param tags=[1,2] --param mode=fast --priority high --timeout 2h")
    assert a["profile"] == "a100-mig-1g10gb" and a["priority"] == "high" and a["timeout"] == "2h"
    assert a["parameters"] == {"epochs": 10, "lr": 0.001, "name": "run 1", "tags": [1, 2], "mode": "fast"}
    assert parse_submit_args("")["profile"] is None  # → the form
    with pytest.raises(UsageError, match="name=value"):
        parse_submit_args("--profile x --param epochs")
    with pytest.raises(UsageError, match="unrecognized"):
        parse_submit_args("--gpus 2")
    assert parse_params("a=1, b='x'\nc=[1]") == {"a": 1, "b": "x", "c": [1]}


def test_service_url_and_notebook_discovery(tmp_path, monkeypatch):
    assert service_url({"GPUHUB_JOBS_URL": "http://proxy/services/gpu-jobs"}) == "http://proxy/services/gpu-jobs/"
    assert service_url({"JUPYTERHUB_API_URL": "http://h:8000/hub/api"}) == "http://h:8000/services/gpu-jobs/"
    with pytest.raises(JobsError, match="not running under JupyterHub"):
        service_url({})
    assert current_notebook_path({"JPY_SESSION_NAME": "work/a.ipynb"}) == "work/a.ipynb"
    assert current_notebook_path({"JPY_SESSION_NAME": "console-1"}) is None
    # jupyter_server gives the absolute path; under $HOME it is shown (and read) relative to it
    home = {"HOME": "/home/jovyan"}
    assert current_notebook_path({**home, "JPY_SESSION_NAME": "/home/jovyan/work/a.ipynb"}) == "work/a.ipynb"
    assert current_notebook_path({**home, "JPY_SESSION_NAME": "/srv/shared/b.ipynb"}) == "/srv/shared/b.ipynb"
    (tmp_path / "a.ipynb").write_text(json.dumps({"cells": [], "nbformat": 4}))
    monkeypatch.chdir(tmp_path)
    nb = read_notebook("work/a.ipynb", env={})
    assert nb.content["nbformat"] == 4
    note = saved_note(nb, now=nb.saved_at + 300)
    assert "as last saved (5 min ago)" in note and "Unsaved edits in the editor are NOT included" in note
    with pytest.raises(JobsError, match="save it first"):
        read_notebook("missing.ipynb", env={})


def test_load_ext_registers_the_magics():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyterhub_gpu.singleuser")
    for name in ("gpu_submit", "gpu_jobs", "gpu_logs", "gpu_cancel"):
        assert name in shell.magics_manager.magics["line"]


def test_a_running_job_never_resubmits_itself(monkeypatch):
    """The job's notebook still contains its `%gpu_submit` cell; in the job it must be a no-op."""
    from IPython.core.interactiveshell import InteractiveShell

    from jupyterhub_gpu.singleuser.magic import GPUMagics

    said = []
    monkeypatch.setenv("GPUHUB_JOB", "gpu-alice-train-abc123")
    monkeypatch.setattr(GPUMagics, "client_factory", lambda self: pytest.fail("no client in a job"))
    monkeypatch.setattr(GPUMagics, "_say", lambda self, text, error=False: said.append(text))
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyterhub_gpu.singleuser")
    assert shell.run_line_magic("gpu_submit", "--profile a100-mig-1g10gb") is None
    assert shell.run_line_magic("gpu_submit", "") is None
    assert said == ["%gpu_submit skipped: this notebook is running as GPU job gpu-alice-train-abc123"] * 2


def test_widget_shows_plain_words_and_folds_kueues_text_in_theme_colours():
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
    from jupyterhub_gpu.services.jobs.words import explain
    from jupyterhub_gpu.singleuser.widgets import render_html

    j = job()
    wl = workload(j["metadata"]["name"])
    wl["status"]["conditions"][0]["message"] = ("couldn't assign flavors to pod set main: insufficient unused quota "
                                                "for nvidia.com/mig-1g.10gb in flavor gpumig, 1 more needed")
    s = explain(load_profiles(EXAMPLE_PROFILES), derive_status(j, wl, [], {"position": 1, "of": 2}))
    v = view(s)
    assert v["detail"].startswith("your team's 14 A100 80GB MIG slices are in use; starts when one finishes")
    page = render_html(j["metadata"]["name"], v, s)
    head, folded = page.split("<details>")
    assert "couldn&#x27;t assign flavors" not in head and "couldn&#x27;t assign flavors" in folded
    assert "var(--jp-ui-font-color1" in page and "#57606a" not in page and "#8a6d00" not in page


class _Recorder:
    """Stands in for the gpu-jobs HTTP client: records what the widget asked (the service is exercised in
    tests/jobs/test_service_cluster.py)."""

    def __init__(self):
        self.cancelled = []

    def cancel(self, name):
        self.cancelled.append(name)
        return {"name": name, "cancelled": True}


def test_cancel_asks_first_and_keep_it_backs_out():
    from jupyterhub_gpu.singleuser.widgets import StatusWidget

    running = derive_status(job(suspend=False), workload("gpu-alice-nb-abc123", admitted=True), [pod("p1")])
    client = _Recorder()
    w = StatusWidget(client, "gpu-alice-nb-abc123", running, autostart=False)
    w.cancel_button.click()
    assert client.cancelled == [] and w.confirm.layout.display is None and w.cancel_button.disabled
    assert 'role="alert"' in w.confirm_note.value and "checkpoints stay" in w.confirm_note.value
    w.keep_button.click()
    assert client.cancelled == [] and w.confirm.layout.display == "none" and not w.cancel_button.disabled
    w.cancel_button.click()
    w.confirm_button.click()
    assert client.cancelled == ["gpu-alice-nb-abc123"] and "■ Cancelled" in w.head.value


def test_service_refusals_read_as_sentences_without_http_codes():
    """A refusal from an HTTP server reaches the user as the server's sentence; the code stays in `status`."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from jupyterhub_gpu.singleuser.client import JobsClient

    class Refuse(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"status": 400, "message": "timeout '9d' is over the profile's limit of 1 day"})
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(JobsError) as e:
            JobsClient(f"http://127.0.0.1:{server.server_port}/", "token").job("gpu-alice-nb-abc123")
    finally:
        server.shutdown()
    assert str(e.value) == "timeout '9d' is over the profile's limit of 1 day" and e.value.status == 400


def test_the_client_sends_the_notebook_without_its_outputs():
    """gpu-jobs takes at most 4 MiB (what a snapshot can be); outputs never reach the snapshot, so they are
    not sent: a notebook with 6 MiB of plots is still submitted."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from jupyterhub_gpu.singleuser.client import JobsClient

    got: list[dict] = []

    class Accept(BaseHTTPRequestHandler):
        def do_POST(self):
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"name": "gpu-alice-nb-abc123"}')

        def log_message(self, *args):
            pass

    plot = {"output_type": "display_data", "data": {"image/png": "A" * (6 * 2**20)}, "metadata": {}}
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "source": "plot()", "metadata": {}, "outputs": [plot], "execution_count": 3},
        {"cell_type": "markdown", "source": "# notes", "metadata": {}}]}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Accept)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        JobsClient(f"http://127.0.0.1:{server.server_port}/", "token").submit("t4-shared", "work/nb.ipynb", nb)
    finally:
        server.shutdown()
    (body,) = got
    assert body["notebook"]["cells"][0]["outputs"] == [] and body["notebook"]["cells"][0]["source"] == "plot()"
    assert body["notebook"]["cells"][1] == nb["cells"][1] and nb["cells"][0]["outputs"] == [plot]  # caller's kept
