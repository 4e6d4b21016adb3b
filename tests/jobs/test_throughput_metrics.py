"""gpu-jobs' training-throughput series (services/jobs/throughput_metrics.py): only running jobs that report, bounded,
labelled so they join DCGM's on namespace and pod, served on their own port."""
from __future__ import annotations

import asyncio
import socket

import aiohttp
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpu.services.jobs import throughput_metrics
from jupyterhub_gpu.services.jobs.throughput_metrics import SERIES, ThroughputCollector, rows

SPEED = {"step": 60, "total_steps": 110, "samples": 1920, "loss": 0.5, "reported_at": 1010.0,
         "samples_per_s": 160.0, "step_s": 0.2, "eta_s": 10.0}


def status(name, state="Running", speed=SPEED, user="alice"):
    return {"name": name, "namespace": "team-ds", "pod": f"{name}-x", "user": user, "queue": "data-science",
            "profile": "t4-shared", "state": state, **({"throughput": speed} if speed else {})}


def samples(text: str) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_only_running_jobs_that_report_have_series_and_their_labels_join_dcgm():
    found = rows([status("a"), status("b", state="Succeeded"), status("c", speed=None), status("d", "Queued"),
                  status("e", state="Preempted-and-resumed", speed={**SPEED, "samples_per_s": None})])
    assert [r[0][2] for r in found] == ["a", "e"]
    collector = ThroughputCollector()
    collector.rows = found
    registry = CollectorRegistry()
    registry.register(collector)
    got = samples(generate_latest(registry).decode())
    labels = (("job_name", "a"), ("namespace", "team-ds"), ("pod", "a-x"), ("profile", "t4-shared"),
              ("team", "data-science"), ("user", "alice"))
    assert got[("gpuhub_job_samples_per_second", labels)] == 160.0
    assert got[("gpuhub_job_eta_seconds", labels)] == 10.0 and got[("gpuhub_job_loss", labels)] == 0.5
    assert got[("gpuhub_job_last_report_timestamp_seconds", labels)] == 1010.0
    assert {name for name, _ in got} == {name for name, _ in SERIES.values()}
    e_labels = tuple((k, "e" if k == "job_name" else "e-x" if k == "pod" else v) for k, v in labels)
    assert ("gpuhub_job_samples_per_second", e_labels) not in got and ("gpuhub_job_step", e_labels) in got


def test_the_series_are_bounded_newest_reports_first():
    many = [status(f"j{i}", speed={**SPEED, "reported_at": float(i)}) for i in range(50)]
    assert [r[0][2] for r in rows(many, limit=3)] == ["j49", "j48", "j47"]


class FakeKube:
    def __init__(self, statuses):
        self.answers = statuses
        self.calls = 0

    async def jobs(self, user):
        return ["job"]

    async def statuses(self, jobs, with_logs=True):
        self.calls += 1
        assert with_logs
        if self.calls == 2:
            raise aiohttp.ClientError("the cluster does not answer")  # the last rows stay
        return self.answers


async def test_served_on_its_own_port_and_refreshed():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kube = FakeKube([status("a")])
    task = throughput_metrics.serve(kube, port, "127.0.0.1", interval=0.05)
    try:
        await asyncio.sleep(0.3)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                text = await r.text()
            async with http.get(f"http://127.0.0.1:{port}/jobs") as r:
                assert r.status == 404  # nothing else on that port
        assert kube.calls >= 3 and 'gpuhub_job_samples_per_second{job_name="a"' in text
    finally:
        task.cancel()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening_on(port: int) -> set[str]:
    import psutil

    return {c.laddr.ip for c in psutil.Process().net_connections("tcp")
            if c.status == "LISTEN" and c.laddr.port == port}


async def test_with_a_token_only_its_bearer_reads_the_series_on_every_interface():
    """Issue 50 item 7: the series name every user's jobs, loss and progress; the port answered anyone who reached
    it. With a token (deploy/gpu-jobs.yaml: the Secret gpu-jobs-metrics-token) only Prometheus' bearer reads."""
    port, token = _free_port(), "t" * 32
    task = throughput_metrics.serve(FakeKube([status("a")]), port, "", interval=0.05, token=token)
    try:
        await asyncio.sleep(0.3)
        assert _listening_on(port) <= {"0.0.0.0", "::"} and _listening_on(port)  # reachable from Prometheus' pod
        async with aiohttp.ClientSession() as http:
            for header in ({}, {"Authorization": "Bearer " + "x" * 32}, {"Authorization": f"token {token}"},
                           {"Authorization": f"Bearer {token[:-1]}"}):
                async with http.get(f"http://127.0.0.1:{port}/metrics", headers=header) as r:
                    assert r.status == 401 and "job_name" not in await r.text(), header
                    assert r.headers["WWW-Authenticate"].startswith("Bearer")
            async with http.get(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"}) as r:
                assert r.status == 200 and 'job_name="a"' in await r.text()
    finally:
        task.cancel()


async def test_without_a_token_the_port_listens_on_loopback_only():
    port = _free_port()
    task = throughput_metrics.serve(FakeKube([status("a")]), port, "", interval=0.05)  # "" would be every interface
    try:
        await asyncio.sleep(0.2)
        assert _listening_on(port) == {"127.0.0.1"}
    finally:
        task.cancel()


def test_the_deploy_files_give_the_token_from_an_optional_secret_and_let_the_monitoring_namespace_in():
    from jupyterhub_gpu.builders.network import render_network_policies
    from jupyterhub_gpu.builders.workloads import render_gpu_jobs
    from jupyterhub_gpu.contract import JOBS_METRICS_PORT, JOBS_METRICS_TOKEN_ENV
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

    (deployment,) = [o for o in render_gpu_jobs("jhub") if o["kind"] == "Deployment"]
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[JOBS_METRICS_TOKEN_ENV]["valueFrom"]["secretKeyRef"] == {
        "name": "gpu-jobs-metrics-token", "key": "token", "optional": True}
    policy = next(p for p in render_network_policies(load_profiles(EXAMPLE_PROFILES), "jhub", "prom")
                  if p["metadata"]["name"] == "gpuhub-gpu-jobs")
    (scrape,) = [r for r in policy["spec"]["ingress"] if any("namespaceSelector" in f for f in r["from"])]
    assert scrape == {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prom"}}}],
                      "ports": [{"protocol": "TCP", "port": JOBS_METRICS_PORT}]}
    (off,) = [o for o in render_gpu_jobs("jhub", options={"metrics-port": "0"}) if o["kind"] == "Deployment"]
    assert JOBS_METRICS_TOKEN_ENV not in {e["name"] for e in off["spec"]["template"]["spec"]["containers"][0]["env"]}
