"""Running jobs' training throughput as Prometheus series, beside DCGM's (`--metrics-port`): what each notebook's own
`gpuhub.report()` says (samples/s, seconds per step, ETA, step, loss, when it last reported), so a dashboard can
put "GPU busy but slow" beside "GPU idle".

On a port of its own, never the service's routed one: the series name users and their jobs, and the proxy routes
/services/gpu-jobs/ to anyone. Bounded: only running jobs that report, at most MAX_JOBS of them, refreshed every
`interval` seconds from the statuses gpu-jobs derives anyway (one log tail per running job); `namespace` and `pod`
are the job pod's, as in DCGM's series, so the two join on them.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from tornado import web
from tornado.httpserver import HTTPServer

from jupyterhub_gpu.contract import JOBS_METRICS_TOKEN_ENV as METRICS_TOKEN_ENV
from jupyterhub_gpu.contract import RESUMED, RUNNING
from jupyterhub_gpu.services.metrics_auth import LOOPBACK, allowed

log = logging.getLogger("gpuhub.jobs")

LABELS = ("namespace", "pod", "job_name", "user", "team", "profile")
#: Throughput field → (series, help). `team` is the job's LocalQueue: one per team, named after it.
SERIES = {
    "samples_per_s": ("gpuhub_job_samples_per_second", "Samples per second the notebook reports (gpuhub.report)."),
    "step_s": ("gpuhub_job_step_seconds", "Seconds per training step, from the notebook's reports."),
    "eta_s": ("gpuhub_job_eta_seconds", "Seconds until the notebook's total_steps at its recent pace."),
    "step": ("gpuhub_job_step", "The training step the notebook last reported."),
    "loss": ("gpuhub_job_loss", "The loss the notebook last reported."),
    "reported_at": ("gpuhub_job_last_report_timestamp_seconds", "When the notebook last reported (Unix time)."),
}
#: At most this many jobs' series (the newest-reporting first): a bound on what one scrape can cost.
MAX_JOBS = 2000


def rows(statuses: Iterable[dict[str, Any]], limit: int = MAX_JOBS) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """(label values, throughput) of the running jobs that report (pure): finished, queued and silent jobs have no
    series, so the series end with the job."""
    found = [s for s in statuses if s.get("state") in (RUNNING, RESUMED) and s.get("throughput")]
    found.sort(key=lambda s: s["throughput"]["reported_at"], reverse=True)
    return [((s.get("namespace") or "", s.get("pod") or "", s.get("name") or "", s.get("user") or "",
              s.get("queue") or "", s.get("profile") or ""), s["throughput"]) for s in found[:limit]]


class ThroughputCollector:
    """The last refresh's rows as gauge families (a custom collector: a job that ends leaves no stale series)."""

    def __init__(self) -> None:
        self.rows: list[tuple[tuple[str, ...], dict[str, Any]]] = []

    def describe(self):
        return [GaugeMetricFamily(name, doc, labels=LABELS) for name, doc in SERIES.values()]

    def collect(self):
        for key, (name, doc) in SERIES.items():
            family = GaugeMetricFamily(name, doc, labels=LABELS)
            for labels, speed in self.rows:
                if speed.get(key) is not None:
                    family.add_metric(labels, float(speed[key]))
            yield family


async def refresh_forever(kube, collector: ThroughputCollector, interval: float) -> None:
    """Every `interval` s: every job's status with its log tail (gpu-jobs' own Kube.statuses) → the collector."""
    while True:
        try:
            jobs = await kube.jobs(None)
            collector.rows = rows(await kube.statuses(jobs, with_logs=True))
        except Exception as e:  # noqa: BLE001 - the last rows stay; the next round tries again
            log.warning("throughput metrics not refreshed: %s: %s", type(e).__name__, str(e)[:200])
        await asyncio.sleep(interval)


class _Metrics(web.RequestHandler):
    def get(self):
        if not allowed(self.request.headers.get("Authorization"), self.settings["token"]):
            self.set_status(401)
            self.set_header("WWW-Authenticate", 'Bearer realm="gpu-jobs"')
            return self.finish()
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(generate_latest(self.settings["registry"]))


def serve(kube, port: int, address: str = "", interval: float = 30.0, token: str | None = None) -> asyncio.Task:
    """Listen on `port` (GET /metrics only) and refresh in the background; the task is the refresh loop. The
    series name every user's jobs: with `token` only a request bearing it reads them (on `address`), without one
    the port listens on loopback only (metrics_auth's rule, as the usage collector's)."""
    collector = ThroughputCollector()
    registry = CollectorRegistry()
    registry.register(collector)
    host = address if token else LOOPBACK
    app = web.Application([(r"/metrics", _Metrics)], registry=registry, token=token)
    HTTPServer(app).listen(port, host)
    log.info("training-throughput metrics on %s:%d/metrics (%s), refreshed every %.0f s", host or "*", port,
             "bearer token" if token else f"loopback only: set ${METRICS_TOKEN_ENV} for Prometheus", interval)
    return asyncio.create_task(refresh_forever(kube, collector, interval))
