"""One cull cycle of the culler (service.GPUCuller): its GPU evidence, the hub's servers read page by page by
jupyterhub-idle-culler's `cull_idle`, a decision per server (decide.py), then the cycle's warnings kept,
written and forwarded. `CullCycle(culler).run()`; the culler's options and state are read from `culler`,
which this module does not import (service.py imports it)."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from jupyterhub_idle_culler import cull_idle, utcnow
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from jupyterhub_gpu.cluster.rules import Rule
from jupyterhub_gpu.cluster.times import parse_time
from jupyterhub_gpu.services.culler import banner
from jupyterhub_gpu.services.culler import decide as D
from jupyterhub_gpu.services.culler.stops import Stopper

decision_log = logging.getLogger("gpuhub.culler.decisions")


def user_url(api_url: str, user: str) -> str:
    """The hub API URL of one user: the name is one path segment whatever it contains (`?`, `#`, `/`, `%`)."""
    return f"{api_url}/users/{quote(user, safe='')}"


@dataclass
class CycleResult:
    decisions: list[dict[str, Any]]
    prometheus_reachable: bool | None
    seconds: float


class CullCycle:
    """One cycle: `run()` once. `culler`: the GPUCuller whose options it reads and whose state it updates
    (warnings, culls, last_cycle, future_seen, stopper)."""

    def __init__(self, culler: Any) -> None:
        self.culler = culler

    async def run(self) -> CycleResult:
        c = self.culler
        t0 = time.perf_counter()
        settings = self.settings = c.settings()
        self.rules, self.default = c.rules()
        self.gpu_on = gpu_on = bool(c.prometheus_url) and settings.policy != "activity"
        evidence: dict[int, dict] | None = {}
        if gpu_on:
            windows = set()
            for r in self.rules.values():
                if r.is_gpu and settings.window(r) and not D.gpu_shared(r):  # shared: never asked
                    w = settings.window(r)
                    windows |= {w, max(w - settings.warn_before, 1)}
            evidence = await c.gpu_evidence(windows) if windows else {}
            c.metrics.prometheus_up.set(0 if evidence is None else 1)
        self.evidence = evidence
        self.now = now = utcnow()
        self.decisions: list[dict[str, Any]] = []
        decisions = self.decisions
        self.warnings: dict[str, dict[str, dict[str, Any]]] = {}
        warnings = self.warnings
        self.admins: dict[str, bool] = {}
        self.token = token = os.environ["JUPYTERHUB_API_TOKEN"]
        self.namespace = c.namespace or None
        self.prometheus = prometheus = AsyncHTTPClient(force_instance=True)
        if c.stopper is None:
            c.stopper = Stopper(c.url, token, c.concurrency, c.remove_named_servers, c.log)
        self.young_queries = asyncio.Semaphore(max(c.concurrency, 1))
        self.future_seen, c.future_seen = c.future_seen, {}

        try:
            await cull_idle(url=c.url, api_token=token, inactive_limit=c.timeout, logger=c.log,
                            cull_users=False, remove_named_servers=c.remove_named_servers, max_age=0,
                            concurrency=c.concurrency, ssl_enabled=c.ssl_enabled,
                            internal_certs_location=c.internal_certs_location,
                            api_page_size=c.api_page_size, cull_default_servers=c.cull_default_servers,
                            cull_named_servers=c.cull_named_servers, cull_arbiter=self.arbiter)
            c.metrics.cycles.labels("ok").inc()
        except Exception:
            c.metrics.cycles.labels("error").inc()
            c.log.exception("Cull cycle failed")
        finally:
            prometheus.close()
            c.stopper.release()  # the pages are read: the culls' DELETEs go now, the cycle does not wait
        c.warnings = warnings
        if c.warnings_file:
            banner.write_warnings(c.warnings_file, warnings)
        if c.notify_url and not c.dry_run:
            await c.forwarder.cycle(warnings)
        dt = time.perf_counter() - t0
        c.metrics.cycle_seconds.observe(dt)
        c.last_cycle = CycleResult(decisions, None if not gpu_on else evidence is not None, dt)
        decision_log.info(json.dumps({"event": "cull-cycle", "ts": now.isoformat(), "servers": len(decisions),
                                      "culls": sum(d["action"] == "cull" for d in decisions),
                                      "warnings": sum(d["action"] == "warn" for d in decisions),
                                      "dry_run": c.dry_run, "seconds": round(dt, 3),
                                      "stops_in_flight": len(c.stopper.pending)}))
        return c.last_cycle

    async def is_admin(self, user: str) -> bool:
        """The user's admin flag (`list:users` implies `read:users:name`, whose model carries it)."""
        admins, c = self.admins, self.culler
        if user not in admins:
            client = AsyncHTTPClient(force_instance=True)
            try:
                resp = await client.fetch(HTTPRequest(user_url(c.url, user),
                                                      headers={"Authorization": f"token {self.token}"}))
                model = json.loads(resp.body)
                flag = D.admin_flag(model)
                if flag is None:
                    raise ValueError("the hub's answer has no admin flag (the culler's scopes are too narrow)")
                if model.get("name") != user:
                    raise ValueError(f"the hub answered for {model.get('name')!r}")
                admins[user] = flag
            except Exception as e:  # unknown → treat as admin: never cull on missing data
                c.log.warning("Could not tell whether %s is an admin (%s); not culling", user, e)
                admins[user] = True
            finally:
                client.close()
        return admins[user]

    async def young_evidence(self, pod: str, seconds: int) -> D.GPUEvidence | None:
        """Evidence from only this server's own samples (the last `seconds`), for a server younger than
        its window; None when there are none. Raises when Prometheus does not answer."""
        if seconds <= 0:
            return None
        async with self.young_queries:
            result = await self.culler.prometheus_query(self.prometheus,
                                                        D.pod_evidence_query(seconds, pod, self.namespace,
                                                                             self.settings.scrape_interval))
        return D.lookup_evidence(D.parse_evidence(result), pod, self.namespace)

    async def gpu_view(self, user: str, sname: str, server: dict, rule: Rule) -> D.GPUView:
        gpu_on, evidence, settings = self.gpu_on, self.evidence, self.settings
        view = D.GPUView(prometheus=gpu_on, reachable=evidence is not None)
        w = settings.window(rule)
        if not (gpu_on and evidence is not None and rule.is_gpu and w) or D.gpu_shared(rule):
            return view
        pod = D.pod_name(user, sname, self.culler.pod_name_template)
        started = parse_time(server.get("started"))
        views, own = [], {}
        for window in (w, max(w - settings.warn_before, 1)):
            seconds = D.lookback(window, started, self.now, settings.scrape_interval)
            if seconds >= window:  # old enough: the cycle's shared query holds only its own samples
                views.append(D.lookup_evidence(evidence.get(window, {}), pod, self.namespace))
                continue
            try:
                if seconds not in own:
                    own[seconds] = await self.young_evidence(pod, seconds)
            except Exception as e:
                self.culler.log.warning("Prometheus did not answer for %s (%s): judged by activity", pod, e)
                return D.GPUView(prometheus=True, reachable=False)
            views.append(own[seconds])
        return D.GPUView(True, True, *views)

    def activity_seen(self, user: str, sname: str, server: dict) -> datetime | None:
        """When this culler first saw the server's last_activity, if that lies in the future."""
        raw = server.get("last_activity")
        last = parse_time(raw)
        if last is None or last <= self.now:
            return None
        key = (user, sname)
        previous = self.future_seen.get(key)
        seen = self.culler.future_seen
        seen[key] = previous if previous and previous[0] == raw else (raw, self.now)
        return seen[key][1]

    async def arbiter(self, inactive, inactive_limit, server, **kwargs):
        c, now, warnings, decisions = self.culler, self.now, self.warnings, self.decisions
        user, sname = D.server_names(server)
        rule = D.rule_for(server, self.rules, self.default)
        if not (c.cull_named_servers if sname else c.cull_default_servers):
            d = D.Decision("keep", "excluded-server-kind", rule.profile, None, None)
            return c.record(user, sname, rule, d, warnings, decisions, now)
        if c.stopper.stopping(user, sname):  # culled last cycle, its DELETE not answered yet
            return c.record(user, sname, rule, D.Decision("keep", "stopping", rule.profile, None, None),
                            warnings, decisions, now)
        view = await self.gpu_view(user, sname, server, rule)
        seen = self.activity_seen(user, sname, server)
        settings = self.settings
        d = D.decide(server, rule, settings, now, view, activity_seen=seen)
        if d.future_s:
            c.log.warning("%s/%s reports activity or a start %.0f s in the future (clock skew?); "
                          "counted as of %s", user, sname, d.future_s, (seen or now).isoformat())
        if d.action != "keep" and settings.exempt_admins and await self.is_admin(user):
            d = D.decide(server, rule, settings, now, view, admin=True, activity_seen=seen)
        if c.record(user, sname, rule, d, warnings, decisions, now):
            c.stopper.stop(user, sname)  # sent once the cycle's pages are read
        return False  # cull_idle sends no DELETE of its own
