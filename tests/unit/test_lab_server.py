"""The single-user server's gpuhub routes (jupyterhub_gpu/singleuser/server.py) and the kernel's save request
(jupyterhub_gpu/singleuser/frontend.py), in their pure parts: request checking, where the culler is, what a job's output
path is, the activity report, and the save handshake's timing."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.builders.jobs import JobRequestError
from jupyterhub_gpu.singleuser import frontend
from jupyterhub_gpu.singleuser.client import JobsError
from jupyterhub_gpu.singleuser.server import activity_body, culler_url, for_lab, output_path, submit_request


def body(**kw) -> bytes:
    return json.dumps({"path": "work/train.ipynb", "profile": "t4-shared", **kw}).encode()


def test_submit_request_takes_form_text_or_an_object_for_parameters():
    assert submit_request(body(parameters="epochs=10\nlr=0.001, name='a, b'")) == {
        "path": "work/train.ipynb", "profile": "t4-shared", "parameters": {"epochs": 10, "lr": 0.001, "name": "a, b"}}
    got = submit_request(body(parameters={"epochs": 3}, priority="high", timeout="2h"))
    assert got["parameters"] == {"epochs": 3} and got["priority"] == "high" and got["timeout"] == "2h"
    assert "priority" not in submit_request(body(priority="", timeout=None))


@pytest.mark.parametrize("raw, needle", [
    (b"not json", "must be JSON"),
    (b"[1, 2]", "JSON object"),
    (body(path="/etc/passwd"), "notebook_path"),
    (body(path="../other/x.ipynb"), ".."),
    (body(path="notes.txt"), ".ipynb"),
    (body(profile=""), "choose a GPU profile"),
    (body(profile=["t4-shared"]), "choose a GPU profile"),
    (body(parameters="no equals sign"), "parameters"),
    (body(parameters=[1, 2]), "parameters must be"),
    (body(priority={"x": 1}), "priority must be a string"),
    (body(timeout=True), "timeout must be a string"),
    (body(parameters="x=" + "1" * 70_000), "limit is"),
])
def test_submit_request_refuses_hostile_bodies_with_a_clear_message(raw, needle):
    with pytest.raises(JobRequestError) as e:
        submit_request(raw)
    assert needle in str(e.value)


def test_culler_url_sits_beside_gpu_jobs_behind_the_proxy():
    assert culler_url({"GPUHUB_JOBS_URL": "http://127.0.0.1:8000/services/gpu-jobs/"}) == \
        "http://127.0.0.1:8000/services/gpu-culler/"
    assert culler_url({"GPUHUB_CULLER_URL": "http://culler:9000/x"}) == "http://culler:9000/x/"
    # gpu-jobs reached in-cluster on its own port: the culler is still behind the proxy (public URL)
    assert culler_url({"GPUHUB_JOBS_URL": "http://hub:10101", "JUPYTERHUB_PUBLIC_URL": "https://hub.example.org/"}) \
        == "https://hub.example.org/services/gpu-culler/"
    # nothing configured: a clear error, never the hub API's own port
    with pytest.raises(JobsError, match="GPUHUB_CULLER_URL"):
        culler_url({"JUPYTERHUB_API_URL": "http://127.0.0.1:8081/hub/api"})


def test_output_path_is_the_notebooks_name_in_the_jobs_folder():
    assert output_path({"name": "gpu-alice-train-abc", "notebook": "work/deep/train.ipynb"}) == \
        "gpu-jobs/gpu-alice-train-abc/train.ipynb"
    assert output_path({"name": "gpu-alice-x", "notebook": None}) == "gpu-jobs/gpu-alice-x/notebook.ipynb"


def test_the_panel_gets_the_status_widgets_own_summary():
    queued = {"name": "gpu-tina-q-1", "state": "Queued", "position": 2, "queue_length": 3, "queue": "tiny",
              "eta_p50_s": 1200, "eta_p90_s": 2700, "notebook": "q.ipynb"}
    assert for_lab(queued)["summary"] == "Queued in tiny · position 2 of 3 · ETA ~20 min (p90 ~45 min)"
    running = {"name": "gpu-tina-q-1", "state": "Running", "cell": {"cell": 3, "of": 12}, "node": "gpu-0"}
    got = for_lab(running)
    assert got["summary"] == "Running (cell 3/12) on gpu-0" \
        and got["output_path"] == "gpu-jobs/gpu-tina-q-1/notebook.ipynb"


def test_activity_body_is_what_the_hub_activity_api_takes():
    now = datetime(2026, 12, 1, 7, 0, 0, tzinfo=timezone.utc)
    assert activity_body("", now) == {"last_activity": "2026-12-01T07:00:00Z",
                                      "servers": {"": {"last_activity": "2026-12-01T07:00:00Z"}}}


class Comm:
    """A comm as the kernel holds it: send() and on_close()."""

    def __init__(self):
        self.sent, self.closers = [], []

    def send(self, data):
        self.sent.append(data)

    def on_close(self, fn):
        self.closers.append(fn)


@pytest.fixture
def comm():
    c = Comm()
    frontend._opened(c, {})
    yield c
    frontend._forget(c)


def test_without_the_lab_extension_nothing_is_asked_and_nothing_waits():
    assert not frontend.present()
    assert frontend.save_first("a.ipynb", lambda: pytest.fail("must not poll"), wait=5) is False


def test_save_first_asks_and_waits_for_a_newer_saved_copy(comm):
    import time

    saves = iter([time.time() - 3600, time.time() - 3600, time.time() + 0.1])
    assert frontend.save_first("work/a.ipynb", lambda: next(saves), wait=5) is True
    assert comm.sent == [{"op": "save", "path": "work/a.ipynb"}]


def test_save_first_gives_up_when_nothing_was_saved(comm):
    import time

    start = time.monotonic()
    assert frontend.save_first("a.ipynb", lambda: None, wait=0.6) is False
    assert 0.5 < time.monotonic() - start < 3


def test_a_closed_comm_is_forgotten(comm):
    comm.closers[0]({})
    assert not frontend.present()
