"""The culler hub service: jupyterhub-idle-culler's loop with GPU-aware, per-profile decisions.

Each cycle: reload the profiles file (cheap when unchanged), ask Prometheus once per distinct window for
DCGM evidence, then run jupyterhub-idle-culler's `cull_idle` (paginated `GET /users?state=ready`) with
`cull_arbiter_hook` bound to `decide()`. Its own global `max_age` is not used: each profile's `max_age`
is part of the decision. The culls' DELETEs are issued by `stops.Stopper` in the background (at most
`concurrency` at a time), so the hub's time to stop servers does not stretch the cycle.
One cycle is `cycle.CullCycle`; this module holds the options, the Prometheus queries and each decision's record.

Also serves (web.py), under its hub prefix (`/services/gpu-culler/`):
  GET warnings/<user>   that user's pending warnings and recent culls (the user's own token, or an admin's)
  GET warnings          all of them (admins only)
  GET metrics           Prometheus text format (culls by profile and reason, GPU-hours and $ reclaimed)
  GET health            200 once it runs
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sys
import time
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode, urlparse

import jupyterhub_idle_culler
from jupyterhub_idle_culler import IdleCuller, utcnow
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.ioloop import IOLoop, PeriodicCallback
from traitlets import Bool, Enum, Float, Int, Unicode

from jupyterhub_gpu.cluster.dcgm_nodes import presence_query
from jupyterhub_gpu.cluster.rules import Rule, default_rule, rules_from_profiles
from jupyterhub_gpu.cluster.times import parse_time
from jupyterhub_gpu.contract import ENV_PROFILES
from jupyterhub_gpu.model.profiles_file import cached_profiles
from jupyterhub_gpu.model.validation import ProfilesError
from jupyterhub_gpu.services.culler import decide as D
from jupyterhub_gpu.services.culler.cycle import CullCycle, CycleResult, decision_log, user_url  # noqa: F401
from jupyterhub_gpu.services.culler.forward import Forwarder
from jupyterhub_gpu.services.culler.stops import Stopper
from jupyterhub_gpu.services.culler.web import make_app
from jupyterhub_gpu.services.loopguard import LoopGuard
from jupyterhub_gpu.services.stopped import exit_now

# jupyterhub-idle-culler parses each server's two timestamps with dateutil's general parser, which is
# the slowest step of a cycle over thousands of servers; the hub writes ISO 8601, which
# datetime.fromisoformat reads ~20x faster (same result; anything unusual still goes to dateutil).
jupyterhub_idle_culler.parse_date = parse_time
# jupyterhub-idle-culler builds its DELETE URLs with quote()'s default safe="/". The hub refuses "/" in
# user and server names today; quoting every character keeps a name from ever becoming a second path
# segment (another user's server) if that changes.
jupyterhub_idle_culler.quote = functools.partial(quote, safe="")


def _json_logger() -> None:
    """One JSON object per line on stdout for decisions (the rest of the culler logs as usual)."""
    if not decision_log.handlers:
        h = logging.StreamHandler(sys.stdout)
        h.setFormatter(logging.Formatter("%(message)s"))
        decision_log.addHandler(h)
        decision_log.setLevel(logging.INFO)
        decision_log.propagate = False


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.culls = Counter("gpuhub_culler_culls_total", "Servers stopped (or, in dry run, that would be)",
                             ["profile", "reason", "dry_run"], registry=r)
        self.warnings = Counter("gpuhub_culler_warnings_total", "Cull warnings issued", ["profile", "reason"],
                                registry=r)
        self.gpu_hours = Counter("gpuhub_culler_gpu_hours_reclaimed_total",
                                 "Estimated GPU-hours (GPUs, MIG slices or shares) freed by culls",
                                 ["profile", "dry_run"], registry=r)
        self.dollars = Counter("gpuhub_culler_dollars_reclaimed_total",
                               "Estimated $ freed by culls (the profile's share of its pool's node price)",
                               ["profile", "dry_run"], registry=r)
        self.idle_gpu_hours = Counter("gpuhub_culler_idle_gpu_hours_total",
                                      "GPU-hours culled servers had held while idle", ["profile", "dry_run"],
                                      registry=r)
        self.fallbacks = Counter("gpuhub_culler_gpu_fallbacks_total",
                                 "GPU servers decided by activity because GPU evidence was missing or not "
                                 "theirs (gpu-shared: a time-sliced or MPS device's series)",
                                 ["profile", "why"], registry=r)
        self.cycles = Counter("gpuhub_culler_cycles_total", "Cull cycles", ["outcome"], registry=r)
        self.cycle_seconds = Histogram("gpuhub_culler_cycle_seconds", "Wall time of one cull cycle", registry=r)
        self.prometheus_up = Gauge("gpuhub_culler_prometheus_up", "1 if Prometheus answered last cycle",
                                   registry=r)


class GPUCuller(IdleCuller):
    """`python -m jupyterhub_gpu.services.culler`: IdleCuller's options plus the GPU-aware ones below."""

    name = "gpu-culler"

    timeout = Int(3600, help="Idle timeout (s) for servers of unknown profiles, or profiles without "
                             "idle_timeout").tag(config=True)
    cull_every = Int(60, help="Seconds between cull cycles").tag(config=True)

    profiles_file = Unicode(os.environ.get(ENV_PROFILES, ""),
                            help="The profiles file (per-profile idle_timeout / max_age).").tag(config=True)
    prometheus_url = Unicode("", help="Prometheus base URL; empty: no GPU evidence.").tag(config=True)
    gpu_idle_policy = Enum(list(D.POLICIES), default_value="activity",
                           help="activity | gpu | both (see jupyterhub_gpu/services/culler/decide.py)").tag(config=True)
    gpu_idle_threshold = Float(D.DEFAULT_THRESHOLD, help="GPU activity (0..1) below which it is idle").tag(
        config=True)
    gpu_window = Int(0, help="GPU idle window in seconds; 0: the profile's idle_timeout").tag(config=True)
    scrape_interval = Float(15.0, help="Prometheus scrape interval of the DCGM exporter (s), for coverage, and the "
                                       "step at which series that name a node but no pod (AKS's managed exporter: "
                                       "30 s) are given the node's only GPU pod").tag(config=True)
    min_coverage = Float(0.8, help="Fraction of the window's samples needed to call a GPU idle").tag(config=True)
    prometheus_timeout = Float(10.0, help="Seconds to wait for Prometheus").tag(config=True)
    warn_before = Int(600, help="Warn this many seconds before a cull (keep it > cull_every)").tag(config=True)
    dry_run = Bool(False, help="Decide, log and count, but stop nothing").tag(config=True)
    exempt_admins = Bool(False, help="Never cull admins' servers").tag(config=True)
    pod_name_template = Unicode("jupyter-{user_server}", help="GPUSpawner.pod_name_template").tag(config=True)
    namespace = Unicode("", help="Namespace of user pods; empty: match pod names in any namespace").tag(
        config=True)
    reclaim_horizon = Int(8 * 3600, help="For reclaimed estimates: how long an uncull'd server would "
                                         "otherwise have run, at most (s)").tag(config=True)
    notify_url = Unicode("", help="gpu-jobs' cull-warnings endpoint (configure(c) sets it): each new warning is "
                                  "posted there once, and e-mailed / posted to webhooks for users who opted in "
                                  "(services/notify). Empty, or a dry run: not forwarded.").tag(config=True)
    warnings_file = Unicode("", help="Also write the warnings here for the hub's banner (culler/banner.py)").tag(
        config=True)
    once = Bool(False, help="Run one cycle and exit").tag(config=True)
    port = Int(0, help="Port of the warnings/metrics server; 0: from JUPYTERHUB_SERVICE_URL, else none").tag(
        config=True)

    aliases = {
        **IdleCuller.aliases,
        "profiles-file": "GPUCuller.profiles_file",
        "prometheus-url": "GPUCuller.prometheus_url",
        "gpu-idle-policy": "GPUCuller.gpu_idle_policy",
        "gpu-idle-threshold": "GPUCuller.gpu_idle_threshold",
        "gpu-window": "GPUCuller.gpu_window",
        "scrape-interval": "GPUCuller.scrape_interval",
        "min-coverage": "GPUCuller.min_coverage",
        "warn-before": "GPUCuller.warn_before",
        "warnings-file": "GPUCuller.warnings_file",
        "notify-url": "GPUCuller.notify_url",
        "dry-run": "GPUCuller.dry_run",
        "exempt-admins": "GPUCuller.exempt_admins",
        "pod-name-template": "GPUCuller.pod_name_template",
        "namespace": "GPUCuller.namespace",
        "reclaim-horizon": "GPUCuller.reclaim_horizon",
        "port": "GPUCuller.port",
    }
    # IdleCuller's options are on IdleCuller; ours on GPUCuller (a subclass, so both apply).
    aliases = {k: v.replace("IdleCuller.", "GPUCuller.") for k, v in aliases.items()}
    flags = {
        **IdleCuller.flags,
        "once": ({"GPUCuller": {"once": True}}, "Run one cycle and exit."),
        "dry-run": ({"GPUCuller": {"dry_run": True}}, "Decide, log and count, but stop nothing."),
        "exempt-admins": ({"GPUCuller": {"exempt_admins": True}}, "Never cull admins' servers."),
    }

    def initialize(self, argv=None):
        super().initialize(argv)
        _json_logger()
        self.metrics = Metrics()
        #: user → {server name → warning}; replaced each cycle
        self.warnings: dict[str, dict[str, dict[str, Any]]] = {}
        #: user → recent culls (newest last)
        self.culled: dict[str, list[dict[str, Any]]] = {}
        self.last_cycle: CycleResult | None = None
        #: (user, server) → (the future last_activity it reported, when this culler first saw that value)
        self.future_seen: dict[tuple[str, str], tuple[str, datetime]] = {}
        self._forwarder: Forwarder | None = None
        #: the culls' DELETEs in flight (made at the first cycle, inside the event loop)
        self.stopper: Stopper | None = None

    @property
    def forwarder(self) -> Forwarder:
        if self._forwarder is None or self._forwarder.url != self.notify_url:  # set after a config file
            self._forwarder = Forwarder(self.notify_url)
        return self._forwarder

    # ------------------------------------------------------------------ settings

    def settings(self) -> D.Settings:
        return D.Settings(policy=self.gpu_idle_policy, threshold=self.gpu_idle_threshold,
                          min_coverage=self.min_coverage, scrape_interval=self.scrape_interval,
                          gpu_window=self.gpu_window or None, warn_before=self.warn_before,
                          exempt_admins=self.exempt_admins)

    def rules(self) -> tuple[dict[str, Rule], Rule]:
        default = default_rule(self.timeout, self.max_age)
        if not self.profiles_file:
            return {}, default

        cfg = cached_profiles(self.profiles_file)
        return rules_from_profiles(cfg, self.timeout, self.max_age), default

    # ------------------------------------------------------------------ prometheus

    async def prometheus_query(self, client: AsyncHTTPClient, query: str) -> list[dict]:
        """One instant query's result vector (POST: a per-pod query names the pod twice per metric)."""
        url = f"{self.prometheus_url.rstrip('/')}/api/v1/query"
        resp = await client.fetch(HTTPRequest(url, method="POST", body=urlencode({"query": query}),
                                              request_timeout=self.prometheus_timeout,
                                              connect_timeout=self.prometheus_timeout))
        body = json.loads(resp.body)
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus: {body.get('error')}")
        return body["data"]["result"]

    async def gpu_evidence(self, windows: set[int]) -> dict[int, dict] | None:
        """Evidence per window, or None when Prometheus did not answer (logged)."""
        client = AsyncHTTPClient(force_instance=True)

        async def one(window: int, step: float | None):
            return window, D.parse_evidence(await self.prometheus_query(
                client, D.evidence_query(window, step=step)))

        try:
            # series that name a node but no pod (AKS's managed exporter): their parts only when there are any
            present = await self.prometheus_query(client, presence_query(max(windows)))
            step = self.scrape_interval if present else None
            pairs = await asyncio.gather(*(one(w, step) for w in sorted(windows)))
        except Exception as e:  # unreachable, timeout, 5xx, bad answer: fall back to activity
            self.log.warning("Prometheus at %s unavailable (%s): GPU servers are judged by activity this cycle",
                             self.prometheus_url, e)
            decision_log.info(json.dumps({"event": "gpu-evidence-unavailable", "prometheus": self.prometheus_url,
                                          "error": str(e), "ts": utcnow().isoformat()}))
            return None
        finally:
            client.close()
        return dict(pairs)

    # ------------------------------------------------------------------ one cycle

    async def cycle(self) -> CycleResult:
        """One cull cycle (cycle.py)."""
        return await CullCycle(self).run()

    async def once_and_drain(self) -> CycleResult:
        """`--once`: one cycle, then wait for its DELETEs, logged apart (`cull-stops`: the hub's time)."""
        result = await self.cycle()
        t0 = time.perf_counter()
        await self.stopper.drain()
        s = self.stopper
        decision_log.info(json.dumps({"event": "cull-stops", "issued": s.issued, "done": s.done, "failed": s.failed,
                                      "seconds_after_cycle": round(time.perf_counter() - t0, 3),
                                      "hub_seconds": round(s.hub_seconds, 3)}))
        return result

    def record(self, user, sname, rule, d: D.Decision, warnings, decisions, now) -> bool:
        """Log, count and remember one decision; the return value tells cull_idle whether to DELETE."""
        cull = d.action == "cull"
        entry = {"event": "cull-decision", "ts": now.isoformat(), "user": user, "server": sname,
                 "policy": self.gpu_idle_policy, "dry_run": self.dry_run, **d.as_log()}
        if cull:
            entry["action"] = "would-cull" if self.dry_run else "cull"
            dry = str(self.dry_run).lower()
            self.metrics.culls.labels(rule.profile, d.reason, dry).inc()
            gpu_h, dollars, idle_h = D.reclaimed(rule, d, self.reclaim_horizon)
            entry.update(gpu_hours_reclaimed=round(gpu_h, 4), dollars_reclaimed=round(dollars, 4))
            if rule.is_gpu:
                self.metrics.gpu_hours.labels(rule.profile, dry).inc(gpu_h)
                self.metrics.idle_gpu_hours.labels(rule.profile, dry).inc(idle_h)
            self.metrics.dollars.labels(rule.profile, dry).inc(dollars)
            history = self.culled.setdefault(user, [])
            history.append({"server": sname, "profile": rule.profile, "reason": d.reason, "at": now.isoformat(),
                            "dry_run": self.dry_run, "why": d.why})
            del history[:-20]
        elif d.action == "warn":
            self.metrics.warnings.labels(rule.profile, d.reason).inc()
            cull_at = now.timestamp() + (d.cull_in_s or 0)
            warnings.setdefault(user, {})[sname] = {
                "server": sname, "profile": rule.profile, "reason": d.reason,
                "cull_in_s": round(d.cull_in_s or 0), "dry_run": self.dry_run,
                "cull_at": datetime.fromtimestamp(cull_at, timezone.utc).isoformat(),
                "message": _warning_text(sname, rule, d), "why": d.why}
            self.log.warning("Warning %s: %s", user, warnings[user][sname]["message"])
        if d.fallback:
            self.metrics.fallbacks.labels(rule.profile, d.fallback).inc()
        decisions.append(entry)
        decision_log.info(json.dumps(entry, default=str))
        return cull and not self.dry_run

    # ------------------------------------------------------------------ web

    def make_app(self) -> web.Application:
        return make_app(self)

    def listen_port(self) -> int | None:
        if self.port:
            return self.port
        url = os.environ.get("JUPYTERHUB_SERVICE_URL")
        return urlparse(url).port if url else None

    @staticmethod
    def listen_ip() -> str:
        """Loopback when the hub reaches us on loopback (one pod / one machine), else all interfaces."""
        if os.environ.get("GPUHUB_CULLER_IP"):
            return os.environ["GPUHUB_CULLER_IP"]
        host = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "")).hostname or "127.0.0.1"
        return host if host in ("127.0.0.1", "localhost", "::1") else "0.0.0.0"

    def start(self):
        if self.generate_config:
            print(self.generate_config_file())
            sys.exit(0)
        if self.config_file and os.path.exists(self.config_file):
            self.load_config_file(self.config_file)
        if not self.url:
            self.log.error("No hub API URL: set JUPYTERHUB_API_URL or --url")
            sys.exit(2)
        if not os.environ.get("JUPYTERHUB_API_TOKEN"):
            self.log.error("No hub API token: set JUPYTERHUB_API_TOKEN (the hub does for its services)")
            sys.exit(2)

        try:
            self.rules()  # a bad profiles file stops the service now, with its problems listed
        except (ProfilesError, OSError) as e:
            self.log.critical("gpu-culler: refusing to start: %s", e)
            sys.exit(2)
        try:  # a field the culler cannot fill would fail every GPU server's decision, every cycle
            D.pod_name("user", "server", self.pod_name_template)
        except (KeyError, IndexError, ValueError) as e:
            self.log.critical("gpu-culler: refusing to start: --pod-name-template %r: unknown field %s "
                              "(the culler knows the user and server name fields, not e.g. {userid})",
                              self.pod_name_template, e)
            sys.exit(2)
        loop = IOLoop.current()
        if self.once:
            loop.run_sync(self.once_and_drain)
            return
        port = self.listen_port()
        if port:
            self.make_app().listen(port, address=self.listen_ip())
            self.log.info("Warnings and metrics on port %s", port)
        self.log.info("Culling every %ss (policy %s, prometheus %s, dry run %s)", self.cull_every,
                      self.gpu_idle_policy, self.prometheus_url or "-", self.dry_run)
        loop.add_callback(LoopGuard(self.metrics.registry).start)  # the loop's stalls, at /metrics
        loop.add_callback(self.cycle)
        PeriodicCallback(self.cycle, 1e3 * self.cull_every).start()
        try:
            loop.start()
        except KeyboardInterrupt:  # the hub stops its managed services with SIGINT (services/stopped.py)

            exit_now()


def _warning_text(sname: str, rule: Rule, d: D.Decision) -> str:
    what = f"server {sname!r}" if sname else "server"
    minutes = max(1, round((d.cull_in_s or 0) / 60))
    why = {"idle-soon": "it has been idle", "max-age-soon": "it reaches its maximum age"}.get(
        d.reason, "it has been idle")
    if d.gpu_state is not None and d.reason == "idle-soon" and rule.is_gpu:
        why = "its GPU has been idle"
    if D.gpu_shared(rule) and d.reason == "idle-soon":  # the GPU's load is its neighbours' too
        return (f"Your {what} ({rule.profile}) will be stopped in about {minutes} min because {why}: its GPU is "
                "shared with other servers, so only your notebooks' activity counts, not the GPU's load. "
                "Save your work; any activity resets the idle timer.")
    return (f"Your {what} ({rule.profile}) will be stopped in about {minutes} min because {why}. "
            "Save your work; any activity (or GPU use) resets the idle timer.")


def main(argv=None):
    GPUCuller.launch_instance(argv)
