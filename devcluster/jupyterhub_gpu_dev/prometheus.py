"""Debian's Prometheus scraping one DCGM-format exporter, for tests (tests/culler, tests/usage) and the day replay.

The static `pod`/`namespace` labels play the part of Kubernetes service discovery's (the exporter pod's own),
so the exporter's `pod` label becomes `exported_pod`, as in a cluster.
"""
from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml

from jupyterhub_gpu_dev.devhub import free_port


class PrometheusMissing(RuntimeError):
    """The prometheus binary is not installed (make test-deps installs Debian's package)."""


def start(folder: Path, exporter_port: int, scrape_s: float = 1,
          exporter_pod: str = "nvidia-dcgm-exporter-x7k2p", honor_labels: bool = False) -> tuple[subprocess.Popen, str]:
    """Start it in `folder` (config, data, log); returns (process, base URL) once it answers /-/ready.

    `honor_labels`: no static labels, and the exporter's own `instance` wins, as when Azure Managed Prometheus
    scrapes AKS's managed exporter (its `instance` is the node's name) and kube-state-metrics from one target."""
    binary = shutil.which("prometheus")
    if not binary:
        raise PrometheusMissing("prometheus is not installed (make test-deps installs Debian's package)")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": f"{scrape_s}s", "evaluation_interval": f"{scrape_s}s"},
        "scrape_configs": [{"job_name": "dcgm-exporter", "honor_labels": True,
                            "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}] if honor_labels else
                          [{"job_name": "dcgm", "static_configs": [{
                              "targets": [f"127.0.0.1:{exporter_port}"],
                              "labels": {"pod": exporter_pod, "namespace": "gpu-operator"}}]}],
    }))
    port = free_port()
    with (folder / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen([binary, f"--config.file={folder / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/-/ready", timeout=2).read()
            return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(proc)
                raise RuntimeError(f"prometheus did not become ready; log {folder / 'prometheus.log'}") from None
            time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
