"""`gpuhub dev` as a person runs it: one command, a hub on the given port, a GPU server, Ctrl-C stops all."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from devcluster.devhub import free_port, login, xsrf_token

pytestmark = pytest.mark.cluster


def test_gpuhub_dev_up_spawn_and_ctrl_c(tmp_path):
    port = free_port()
    env = dict(os.environ, GPUHUB_CLUSTER_DIR=str(tmp_path / "cluster"), GPUHUB_DEV_DIR=str(tmp_path / "dev"))
    proc = subprocess.Popen(["gpuhub", "dev", "--port", str(port), "--nodes-per-pool", "1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        deadline = time.monotonic() + 180
        while not any("JupyterHub is up" in ln for ln in lines):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            lines.append(proc.stdout.readline())
        assert f"http://127.0.0.1:{port}" in "".join(lines)
        s = login(f"http://127.0.0.1:{port}", "alice")
        form = s.get(f"http://127.0.0.1:{port}/hub/spawn", timeout=30).text
        r = s.post(f"http://127.0.0.1:{port}/hub/spawn", data={"profile": "t4-shared", "_xsrf": xsrf_token(s, form)}, timeout=60)
        assert r.ok
        deadline = time.monotonic() + 150
        while True:
            lab = s.get(f"http://127.0.0.1:{port}/user/alice/lab", timeout=60)
            if lab.status_code == 200 and "JupyterLab" in lab.text:
                break
            assert time.monotonic() < deadline, lab.text[:300]
            time.sleep(1)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, "".join(lines) + out
    status = subprocess.run(["gpuhub", "cluster", "status"], env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 3, status.stdout  # nothing of the dev cluster is left running
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert leftovers.stdout.strip() == "", f"processes left running: {leftovers.stdout}"
