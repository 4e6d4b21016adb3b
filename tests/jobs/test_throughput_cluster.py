"""A notebook's own training progress on the dev cluster (issue 28, item 4): a `%gpu_submit` job whose notebook calls
`gpuhub.report()` runs under the dev agent (SIMULATOR) with the real runner and papermill; gpu-jobs serves its
samples/s, step time and ETA in the job's status (through the hub's proxy, with the user's own token) and as
Prometheus series on its own metrics port, which end with the job."""
from __future__ import annotations

import secrets
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpu.singleuser.widgets import view
from jupyterhub_gpu_dev.devhub import free_port
from jupyterhub_gpu_dev.testing import JobsHub, hub_with_agent

from .test_service_cluster import GROUPS, RUN_NB, TEAM_NS, clean_teams, jobs_profiles  # noqa: F401 - fixtures

pytestmark = pytest.mark.cluster

#: 40 steps of 0.4 s, 32 samples each: 80 samples/s, 0.4 s per step, reported every step (at most once a second).
TRAIN_NB = {**RUN_NB, "cells": [
    {**RUN_NB["cells"][0], "source": "steps = 40\ndelay = 0.4"},
    {"cell_type": "code", "id": "t", "metadata": {}, "outputs": [], "execution_count": None,
     "source": "import time, gpuhub\nfor step in range(1, steps + 1):\n    time.sleep(delay)\n"
               "    gpuhub.report(step=step, samples=32 * step, loss=1.0 / step, total_steps=steps)\n"
               "print('trained', steps)"}]}


@pytest.fixture(scope="module")
def metrics_hub(cluster, jobs_profiles, tmp_path_factory):  # noqa: F811 - the fixture imported above
    """A dev hub whose gpu-jobs also serves the throughput series (--metrics-port, refreshed every second)."""
    state = tmp_path_factory.mktemp("throughputhub")
    token, port = secrets.token_hex(16), free_port()
    extra = ('c.JupyterHub.load_roles = list(c.JupyterHub.load_roles) + [{"name": "jobs-tests-tokens", '
             '"scopes": ["tokens", "admin:users", "admin:servers"], "services": ["jobs-tests"]}]\n'
             'for _s in c.JupyterHub.services:\n'
             '    if _s["name"] == "gpu-jobs":\n'
             f'        _s["command"] = [*_s["command"], "--metrics-port={port}", "--metrics-interval=1s"]')
    with hub_with_agent(cluster, state, jobs_profiles, GROUPS, {"jobs-tests": token}, extra) as (dev, agent):
        hub = JobsHub(dev.settings.url, token, dev, agent, state, {})
        deadline = time.monotonic() + 60
        while requests.get(f"{hub.url}/services/gpu-jobs/health", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "the gpu-jobs service did not come up:\n" + dev.log_tail(60)
            time.sleep(0.5)
        yield hub, port


def series(port: int, job: str) -> dict[str, float]:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.labels.get("job_name") == job}


def test_the_notebooks_reports_reach_the_jobs_status_and_its_prometheus_series(cluster, metrics_hub, clean_teams):  # noqa: F811
    hub, port = metrics_hub
    r = hub.submit("alice", profile="t4-shared", notebook=TRAIN_NB, notebook_path="work/train.ipynb")
    assert r.status_code == 201, r.text
    name = r.json()["name"]

    def measured():
        s = hub.status("alice", name)
        assert s["state"] not in ("Failed", "Succeeded"), (s, hub.call("alice", "GET", f"/jobs/{name}/logs").text)
        speed = s.get("throughput") or {}
        return s if speed.get("samples_per_s") and speed["step"] >= 15 else None

    s = cluster.wait_until(measured, 180, "the job's status to carry its throughput", interval=1)
    speed = s["throughput"]
    assert s["state"] == "Running" and speed["total_steps"] == 40 and speed["samples"] == 32 * speed["step"]
    assert 40 < speed["samples_per_s"] < 90 and 0.35 < speed["step_s"] < 0.8, speed  # sleeps of 0.4 s, and overhead
    assert 0 < speed["eta_s"] < 40 * 0.8 and 0 < speed["loss"] < 1
    title = view(s)["title"]
    assert "samples/s" in title and "s/step" in title and "ETA" in title, title

    def refreshed():  # a refresh from before the second report has the step but no rate yet
        got = series(port, name)
        return got if got.get("gpuhub_job_step", 0) >= 15 and "gpuhub_job_samples_per_second" in got else None

    got = cluster.wait_until(refreshed, 30, "the job's series on the metrics port, rates included")
    assert 40 < got["gpuhub_job_samples_per_second"] < 90 and got["gpuhub_job_step"] >= 15, got
    assert {"gpuhub_job_step_seconds", "gpuhub_job_eta_seconds", "gpuhub_job_loss",
            "gpuhub_job_last_report_timestamp_seconds"} <= set(got)
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    assert 'user="alice"' in text and 'team="data-science"' in text and f'pod="{s["pod"]}"' in text
    assert "gpuhub_job_samples_per_second" not in hub.call("alice", "GET", "/metrics").text  # never the routed port

    final = cluster.wait_until(lambda: (st := hub.status("alice", name))["state"] in ("Succeeded", "Failed") and st,
                               180, "the job to finish", interval=1)
    assert final["state"] == "Succeeded" and "throughput" not in final
    cluster.wait_until(lambda: not series(port, name), 30, "the finished job's series to end")
