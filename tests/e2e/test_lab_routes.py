"""The gpuhub routes in a real Jupyter server as `make install` leaves it (the server extension enabled
by its installed config file, the prebuilt JupyterLab extension listed): outside JupyterHub they answer
a clear 503, refuse hostile submissions with a 400 before reading anything, and need the server's auth."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time

import pytest
import requests

from jupyterhub_gpu_dev.devhub import free_port

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("labroot")
    (root / "nb.ipynb").write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}))
    token, port = secrets.token_hex(16), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "GPUHUB_"))}
    proc = subprocess.Popen([sys.executable, "-m", "jupyter_server", f"--port={port}", "--ip=127.0.0.1",
                             "--no-browser", f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}",
                             *(["--allow-root"] if os.geteuid() == 0 else [])],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/api/status", headers={"Authorization": f"token {token}"}, timeout=5).ok:
                    break
            except requests.RequestException:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "jupyter server did not start"
            time.sleep(0.3)
        yield url, {"Authorization": f"token {token}"}
    finally:
        proc.terminate()
        proc.wait(20)


def test_the_installed_lab_extension_is_in_the_page_jupyterlab_serves(server):
    url, auth = server
    r = requests.get(f"{url}/lab", headers=auth, timeout=30)
    assert r.ok, r.status_code
    page_config = r.text.split('id="jupyter-config-data" type="application/json">', 1)[1]
    config = json.loads(page_config.split("</script>", 1)[0])
    found = [e for e in config["federated_extensions"] if e["name"] == "jupyterhub-gpu-labextension"]
    assert found and found[0]["load"].startswith("static/remoteEntry."), config["federated_extensions"]
    entry = requests.get(f"{url}/lab/extensions/jupyterhub-gpu-labextension/{found[0]['load']}", headers=auth,
                         timeout=10)
    assert entry.ok and "jupyterhub-gpu-labextension" in entry.text  # served from the package, no CDN


def test_outside_jupyterhub_the_routes_say_why(server):
    url, auth = server
    r = requests.get(f"{url}/gpuhub/jobs", headers=auth, timeout=10)
    assert r.status_code == 503 and "JupyterHub" in r.json()["message"], r.text


def test_routes_need_the_servers_auth(server):
    url, _ = server
    assert requests.get(f"{url}/gpuhub/jobs", timeout=10).status_code == 403
    assert requests.post(f"{url}/gpuhub/keep", timeout=10).status_code == 403


@pytest.mark.parametrize("body, needle", [
    ({"path": "../../etc/x.ipynb", "profile": "t4"}, ".."),
    ({"path": "nb.ipynb", "profile": ""}, "choose a GPU profile"),
    ({"path": "nb.ipynb", "profile": "t4", "parameters": "no equals sign"}, "parameters"),
    ({"path": "missing.ipynb", "profile": "t4"}, "cannot read missing.ipynb"),
])
def test_hostile_or_wrong_submissions_are_refused_with_a_message(server, body, needle):
    url, auth = server
    r = requests.post(f"{url}/gpuhub/jobs", headers=auth, data=json.dumps(body), timeout=10)
    assert r.status_code == 400 and needle in r.json()["message"], r.text


def test_a_job_name_is_checked_before_anything_is_called(server):
    url, auth = server
    r = requests.get(f"{url}/gpuhub/jobs/Not_A_Name", headers=auth, timeout=10)
    assert r.status_code == 400 and "is not a job name" in r.json()["message"], r.text


def test_the_culling_route_never_sends_the_token_where_the_host_header_points(server):
    """With no culler URL configured the route used to build one from the request's Host header and send this
    server's $JUPYTERHUB_API_TOKEN there. A listener on this machine stands for the attacker's host."""
    import http.server
    import threading

    from jupyterhub_gpu_dev.devhub import free_port as another_port

    seen: list[str] = []

    class Record(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(f"{self.path} {self.headers.get('Authorization')}")
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"warnings": []}')

        def log_message(self, *args):
            pass

    evil = http.server.ThreadingHTTPServer(("127.0.0.1", another_port()), Record)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        url, auth = server
        r = requests.get(f"{url}/gpuhub/culling", timeout=30,
                         headers={**auth, "Host": f"127.0.0.1:{evil.server_address[1]}"})
    finally:
        evil.shutdown()
    assert seen == [], seen
    assert r.status_code == 502 and "GPUHUB_CULLER_URL" in r.json()["message"], r.text
