"""The usage collector's /metrics names every user with their GPU-hours and $: only Prometheus may read it.
The real collector process (`python -m jupyterhub_gpu.services.usage`, its API server unreachable, so every
cycle is a missed one while /metrics keeps serving): with a token, a request without it or with another is a
401 and the token's bearer gets the series; without a token it listens on loopback only."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.services.usage.hub import usage_services
from jupyterhub_gpu.services.usage.metrics_http import allowed, metrics_token
from jupyterhub_gpu_dev.devhub import free_port

REPO = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-prometheus-token-0123456789"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def collector(tmp_path: Path, port: int, env: dict) -> subprocess.Popen:
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    cmd = [sys.executable, "-m", "jupyterhub_gpu.services.usage", f"--profiles-file={EXAMPLE_PROFILES}",
           f"--store={tmp_path / 'store'}", f"--kubeconfig={tmp_path / 'kubeconfig'}", f"--port={port}",
           "--every=1"]
    base = {k: v for k, v in os.environ.items() if k != "GPUHUB_USAGE_METRICS_TOKEN"}
    return subprocess.Popen(cmd, env={**base, "PYTHONPATH": str(REPO), **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def wait_up(url: str, proc: subprocess.Popen, **kw) -> requests.Response:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, "the collector exited"
        try:
            return requests.get(url, timeout=5, **kw)
        except requests.ConnectionError:
            assert time.monotonic() < deadline, "the collector's /metrics never answered"
            time.sleep(0.3)


@pytest.fixture
def stop():
    procs = []
    yield procs.append
    for p in procs:
        p.terminate()
        p.wait(timeout=20)


def test_metrics_need_prometheus_token(tmp_path, stop):
    port = free_port()
    proc = collector(tmp_path, port, {"GPUHUB_USAGE_METRICS_TOKEN": TOKEN})
    stop(proc)
    url = f"http://127.0.0.1:{port}/metrics"
    assert wait_up(url, proc).status_code == 401  # no credentials
    for header in ("Bearer wrong-token-0123456789abcdef", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer "):
        assert requests.get(url, headers={"Authorization": header}, timeout=5).status_code == 401, header
    r = requests.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
    assert r.status_code == 200 and "gpuhub_usage_gpus_held" in r.text
    assert "gpuhub_event_loop_busy_stall_seconds_count" in r.text  # its LoopGuard (services/loopguard.py)


def test_without_a_token_metrics_listen_on_loopback_only(tmp_path, stop):
    import socket

    port = free_port()
    proc = collector(tmp_path, port, {})
    stop(proc)
    assert wait_up(f"http://127.0.0.1:{port}/metrics", proc).status_code == 200
    # the machine's own non-loopback address: nothing listens there
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))  # no packet is sent: picks the outward interface
        outward = s.getsockname()[0]
    if outward.startswith("127."):
        pytest.skip("this machine has no non-loopback IPv4 address")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://{outward}:{port}/metrics", timeout=5)


def test_token_rules_and_the_hub_passes_the_token_on(tmp_path):
    assert allowed(f"Bearer {TOKEN}", TOKEN) and allowed(f"bearer  {TOKEN}", TOKEN)
    assert not allowed(None, TOKEN) and not allowed(TOKEN, TOKEN) and not allowed("Bearer x", TOKEN)
    with pytest.raises(ValueError):
        metrics_token({"GPUHUB_USAGE_METRICS_TOKEN": "short"})
    (tmp_path / "t").write_text(TOKEN + "\n")
    assert metrics_token({}, str(tmp_path / "t")) == TOKEN
    services = {s["name"]: s for s in usage_services("/p.yaml", env={"GPUHUB_USAGE_METRICS_TOKEN": TOKEN})}
    assert services["gpu-usage-collector"]["environment"]["GPUHUB_USAGE_METRICS_TOKEN"] == TOKEN
