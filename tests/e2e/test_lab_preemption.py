"""A preemptible server's last seconds in JupyterLab (issue 28 item 6): a real Jupyter server with the gpuhub
extensions as `make install` leaves them and $GPUHUB_PREEMPTION_GRACE_S set as the hub sets it on a preemptible
server's pod, headless Chromium with a notebook edited but not saved. SIGTERM (what the kubelet sends when Kueue
preempts the pod): JupyterLab says why in a notification, the unsaved edit reaches the disk, and the server
ends within its save window. A server that is not preemptible stops at once, as jupyter_server does."""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time

import pytest
import requests

from jupyterhub_gpu.contract import ENV_PREEMPTION_GRACE
from jupyterhub_gpu.singleuser.stopping import SAVE_WINDOW_S
from jupyterhub_gpu_dev.devhub import free_port

pytestmark = pytest.mark.services

EMPTY = {"nbformat": 4, "nbformat_minor": 5, "cells": [],
         "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}
EMPTY["cells"] = [
    {"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": None, "outputs": [], "source": ""}]


def jupyter(root, env_extra: dict):
    """A Jupyter server on `root` (its own session, so SIGTERM reaches it alone); (proc, url, token)."""
    token, port = secrets.token_hex(16), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "GPUHUB_"))} | env_extra
    proc = subprocess.Popen([sys.executable, "-m", "jupyter_server", f"--port={port}", "--ip=127.0.0.1",
                             "--no-browser", f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}",
                             *(["--allow-root"] if os.geteuid() == 0 else [])],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(f"{url}/api/status", headers={"Authorization": f"token {token}"}, timeout=5).ok:
                return proc, url, token
        except requests.RequestException:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "jupyter server did not start"
        time.sleep(0.3)


def ended_within(proc, seconds: float) -> float:
    began = time.monotonic()
    proc.wait(seconds)
    return time.monotonic() - began


def test_sigterm_on_a_preemptible_server_warns_jupyterlab_which_saves_the_open_notebook(tmp_path, browser, artifacts):
    (tmp_path / "work.ipynb").write_text(json.dumps(EMPTY))
    proc, url, token = jupyter(tmp_path, {ENV_PREEMPTION_GRACE: "40"})
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    try:
        page.goto(f"{url}/lab/tree/work.ipynb?token={token}", timeout=120_000)
        editor = page.locator(".jp-Notebook .jp-Cell .cm-content").first
        editor.wait_for(timeout=90_000)
        page.locator(".jp-Spinner").first.wait_for(state="hidden", timeout=90_000)  # the notebook has loaded
        page.wait_for_timeout(1000)
        if page.locator(".jp-Dialog").count():  # e.g. JupyterLab's kernel choice: its default
            page.screenshot(path=str(artifacts / "lab-preemption-dialog.png"))
            page.locator(".jp-Dialog .jp-mod-accept").first.click()
        editor.click()
        page.keyboard.type("answer = 42  # typed, never saved by hand")
        page.locator(".jp-mod-dirty").first.wait_for(timeout=10_000)  # unsaved: only the browser has it
        assert "never saved by hand" not in (tmp_path / "work.ipynb").read_text()
        said = requests.get(f"{url}/gpuhub/stopping", headers={"Authorization": f"token {token}"}, timeout=10).json()
        assert said == {"preemptible": True, "stopping": False, "grace_s": 40}
        time.sleep(6)  # JupyterLab has asked at least once (every 5 s): the server knows one is open

        os.killpg(proc.pid, signal.SIGTERM)  # the kubelet, after Kueue deleted the pod
        toast = page.locator(".jp-toast-message").filter(has_text="This server is stopping")
        toast.wait_for(timeout=15_000)
        try:
            page.locator(".jp-toast-message").filter(has_text="Saved 1 open document").wait_for(timeout=15_000)
        except Exception:
            page.screenshot(path=str(artifacts / "lab-preemption-failed.png"))
            raise AssertionError(page.locator(".jp-toast-message").all_inner_texts()) from None
        text = toast.first.inner_text()
        assert "preempted" in text and "Saved 1 open document" in text, text
        page.screenshot(path=str(artifacts / "lab-preemption-warning.png"))
        saved = json.loads((tmp_path / "work.ipynb").read_text())
        assert "answer = 42  # typed, never saved by hand" in "".join(saved["cells"][0]["source"])
        assert ended_within(proc, SAVE_WINDOW_S + 15) <= SAVE_WINDOW_S + 15
    finally:
        page.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_server_that_is_not_preemptible_stops_at_once(tmp_path):
    proc, url, token = jupyter(tmp_path, {})
    try:
        said = requests.get(f"{url}/gpuhub/stopping", headers={"Authorization": f"token {token}"}, timeout=10).json()
        assert said == {"preemptible": False, "stopping": False}
        os.killpg(proc.pid, signal.SIGTERM)
        assert ended_within(proc, 15) < 15
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
