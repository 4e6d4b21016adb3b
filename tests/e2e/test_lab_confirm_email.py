"""The link mailed to a user's own address opens a page in their own Jupyter server (finding 4 of issue 25): a
real Jupyter server with the package's server extension, its $JUPYTERHUB_API_TOKEN alice's, calling the real
gpu-jobs app (tests/notify/jobs_app.py) that mailed the link to a real SMTP server. Opening the link confirms
nothing (a mail scanner follows links); its button does, with alice's token; without the server's login, no
page at all."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from urllib.parse import urlparse

import pytest
import requests
from notify.jobs_app import Service
from notify.receivers import SmtpSink

from jupyterhub_gpu_dev.devhub import free_port

pytestmark = pytest.mark.services


@pytest.fixture
def jobs(tmp_path):
    with SmtpSink() as smtp, Service(tmp_path, smtp) as svc:
        yield svc


@pytest.fixture
def lab(tmp_path, jobs):
    token, port = secrets.token_hex(16), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "GPUHUB_"))}
    env.update({"JUPYTERHUB_API_TOKEN": "tok-alice", "GPUHUB_JOBS_URL": jobs.url.removesuffix("notifications")})
    proc = subprocess.Popen([sys.executable, "-m", "jupyter_server", f"--port={port}", "--ip=127.0.0.1",
                             "--no-browser", f"--ServerApp.token={token}", f"--ServerApp.root_dir={tmp_path}",
                             *(["--allow-root"] if os.geteuid() == 0 else [])],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url, auth = f"http://127.0.0.1:{port}", {"Authorization": f"token {token}"}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/api/status", headers=auth, timeout=5).ok:
                    break
            except requests.RequestException:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "jupyter server did not start"
            time.sleep(0.3)
        yield url, auth
    finally:
        proc.terminate()
        proc.wait(20)


def test_the_mailed_link_opens_a_page_whose_button_confirms_with_the_users_token(jobs, lab):
    url, auth = lab
    r = jobs.call("PUT", "tok-alice", {"channels": {"email": ["failed"]}, "email": "all-staff@example.org"})
    assert r.status_code == 200 and "check that inbox" in r.json()["message"]
    code, link = jobs.mailed_code("all-staff@example.org")
    path = urlparse(link).path.removeprefix("/hub/user-redirect") + "?" + urlparse(link).query

    anonymous = requests.get(url + path, timeout=30, allow_redirects=False)
    assert anonymous.status_code in (302, 403) and "Confirm my address" not in anonymous.text
    page = requests.get(url + path, headers=auth, timeout=30)
    assert page.status_code == 200 and "Confirm my address" in page.text and f'value="{code}"' in page.text
    assert jobs.call("GET", "tok-alice").json()["preferences"]["email_confirmed"] is False  # opening: nothing

    wrong = requests.post(url + path.split("?")[0], data={"code": "x" * 43}, headers=auth, timeout=30)
    assert wrong.status_code == 400 and "Not confirmed" in wrong.text and "not valid for you" in wrong.text
    hostile = requests.post(url + path.split("?")[0], data={"code": '<script>alert(1)</script>'}, headers=auth,
                            timeout=30)
    assert "<script>" not in hostile.text  # the page escapes what it shows
    ok = requests.post(url + path.split("?")[0], data={"code": code}, headers=auth, timeout=30)
    assert ok.status_code == 200 and "Address confirmed" in ok.text and "all-staff@example.org" in ok.text
    assert jobs.call("GET", "tok-alice").json()["preferences"]["email_confirmed"] is True
