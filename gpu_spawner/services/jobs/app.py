"""The `gpu-jobs` hub service: a tornado app, authenticated with the caller's own JupyterHub token.

  POST   /jobs              submit   {profile, notebook_path, notebook, parameters, priority, timeout}
  GET    /jobs              list (own; `?all=1` for admins: everyone's)
  GET    /jobs/{name}       status
  GET    /jobs/{name}/logs  log tail (text/plain; `?tail=BYTES`)
  DELETE /jobs/{name}       cancel
  GET    /profiles          the caller's GPU profiles, with queue length and free quota
A job of someone else is a 404 (its existence is not revealed); admins see and touch all jobs.
Run: `python -m gpu_spawner.services.jobs` (JupyterHub starts it as a managed service).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from urllib.parse import urlparse

from jupyterhub.services.auth import HubAuth, HubAuthenticated
from jupyterhub.utils import url_path_join
from kubernetes_asyncio import client, config
from tornado import httpclient, web
from tornado.httpserver import HTTPServer

from gpu_spawner.builders.jobs import JobRequestError, JobSettings
from gpu_spawner.builders.kueue import cluster_queue_name, local_queue_name
from gpu_spawner.model.profiles import ProfilesConfig
from gpu_spawner.services.jobs.cache import JobsCache
from gpu_spawner.services.jobs.kube import Kube
from gpu_spawner.services.jobs.lifecycle import StorageNotReady, reconcile_forever
from gpu_spawner.contract import FINISHED, JOBS_SERVICE as SERVICE_NAME, PROFILE_LABEL, USER_ANNOTATION
from gpu_spawner.services.jobs.submission import ServiceSettings, plan_submission

log = logging.getLogger("gpuhub.jobs")


class UserInfo:
    """Groups and admin flag from the hub, asked with the service's own token (`read:users`): the
    caller's token cannot make itself an admin or a group member. Cached for a few seconds."""

    def __init__(self, api_url: str, token: str, ttl: float = 10):
        self.api_url, self.token, self.ttl = api_url, token, ttl
        self.cache: dict[str, tuple[float, dict]] = {}

    async def get(self, name: str, fallback: dict) -> dict:
        hit = self.cache.get(name)
        if hit and time.monotonic() - hit[0] < self.ttl:
            return hit[1]
        try:
            r = await httpclient.AsyncHTTPClient().fetch(url_path_join(self.api_url, "users", name),
                                                         headers={"Authorization": f"token {self.token}"})
            model = json.loads(r.body)
        except httpclient.HTTPClientError as e:
            log.warning("cannot read user %s from the hub (%s); using the token's model", name, e)
            model = {"name": name, "groups": fallback.get("groups", []), "admin": False}
        info = {"name": name, "groups": list(model.get("groups") or []), "admin": bool(model.get("admin"))}
        self.cache[name] = (time.monotonic(), info)
        return info


class Base(HubAuthenticated, web.RequestHandler):
    @property
    def hub_auth(self) -> HubAuth:
        return self.settings["hub_auth"]

    @property
    def cfg(self) -> ProfilesConfig:
        return self.settings["profiles"]

    @property
    def kube(self) -> Kube:
        return self.settings["kube"]

    def check_xsrf_cookie(self):  # token-authenticated JSON API: no cookies, no XSRF
        return

    async def prepare(self):
        model = self.get_current_user()
        if model is None:
            raise web.HTTPError(403, "a JupyterHub token with access to the gpu-jobs service is required")
        self.who = await self.settings["users"].get(model["name"], model)

    def write_error(self, status_code, **kwargs):
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = getattr(exc, "log_message", None) or self._reason
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status_code, "message": message}))

    def send(self, obj, status: int = 200):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(obj))

    async def own_job(self, name: str) -> dict:
        job = await self.kube.job(name)
        owner = ((job or {}).get("metadata", {}).get("annotations") or {}).get(USER_ANNOTATION)
        if job is None or not (self.who["admin"] or owner == self.who["name"]):
            raise web.HTTPError(404, f"no job {name!r} of yours")
        return job


class JobsHandler(Base):
    async def get(self):
        everyone = self.who["admin"] and self.get_argument("all", "") in ("1", "true", "yes")
        jobs = await self.kube.jobs(None if everyone else self.who["name"])
        statuses = await self.kube.statuses(jobs, with_logs=self.get_argument("cells", "1") != "0")
        statuses.sort(key=lambda s: s.get("created") or "", reverse=True)
        self.send({"jobs": statuses})

    async def post(self):
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, "the request body is not JSON") from None
        user, groups = self.who["name"], self.who["groups"]
        slug = body.get("profile") if isinstance(body, dict) else None
        active = 0
        if isinstance(slug, str) and slug in self.cfg.by_slug and self.cfg.by_slug[slug].max_per_user:
            active = sum(1 for s in await self.kube.statuses(
                [j for j in await self.kube.jobs(user)
                 if (j["metadata"].get("labels") or {}).get(PROFILE_LABEL) == slug], with_logs=False)
                if s["state"] not in FINISHED)
        try:
            objs = plan_submission(self.cfg, user, groups, body, active, self.settings["service"])
        except JobRequestError as e:
            raise web.HTTPError(400, str(e)) from None
        try:
            job = await self.kube.create(objs, self.settings["service"].job.home.claim)
        except StorageNotReady as e:
            raise web.HTTPError(503, str(e)) from None
        except client.ApiException as e:
            log.error("creating job for %s failed: %s %s", user, e.status, e.body)
            try:
                why = json.loads(e.body).get("message") or e.reason
            except (TypeError, ValueError, AttributeError):
                why = e.reason
            raise web.HTTPError(502 if e.status >= 500 else 400, f"Kubernetes refused the job: {why}") from None
        log.info("%s submitted %s/%s (%s)", user, job["metadata"]["namespace"], job["metadata"]["name"], slug)
        (status,) = await self.kube.statuses([job], with_logs=False)
        self.send(status, 201)


class JobHandler(Base):
    async def get(self, name):
        job = await self.own_job(name)
        (status,) = await self.kube.statuses([job])
        self.send(status)

    async def delete(self, name):
        job = await self.own_job(name)
        await self.kube.delete(job)
        log.info("%s cancelled %s", self.who["name"], name)
        self.send({"name": name, "cancelled": True})


class LogsHandler(Base):
    async def get(self, name):
        job = await self.own_job(name)
        tail = min(int(self.get_argument("tail", "65536")), 1024 * 1024)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(await self.kube.job_logs(job, tail))


class ProfilesHandler(Base):
    async def get(self):
        team = self.cfg.team_for(self.who["groups"])
        info = {"pending": None, "free": {}}
        if team:
            info = await self.kube.queue_info(team[1].namespace, local_queue_name(team[0]), cluster_queue_name(team[0]))
        out = []
        for p in self.cfg.profiles_for(self.who["groups"]):
            if p.is_gpu:
                out.append({"slug": p.slug, "display_name": p.display_name, "description": p.description,
                            "gpus": p.gpu.count, "resource": self.cfg.resource_name(p), "pool": p.pool,
                            "priority": p.priority, "max_per_user": p.max_per_user,
                            "max_timeout": min(p.max_job_timeout or JobSettings().max_timeout,
                                               self.settings["service"].job.max_timeout),
                            "free": info["free"].get(f"{p.pool}/{self.cfg.resource_name(p)}"),
                            "queued": info["pending"]})
        self.send({"user": self.who["name"], "team": team[0] if team else None, "profiles": out,
                   "priorities": list(self.cfg.priorities)})


class HealthHandler(web.RequestHandler):
    def get(self):
        self.finish({"ok": True})


def make_app(cfg: ProfilesConfig, kube: Kube, hub_auth: HubAuth, service: ServiceSettings,
             users: UserInfo, prefix: str = "/") -> web.Application:
    p = prefix.rstrip("/")
    return web.Application([
        (rf"{p}/health", HealthHandler),
        (rf"{p}/jobs/?", JobsHandler),
        (rf"{p}/jobs/([a-z0-9-]+)/?", JobHandler),
        (rf"{p}/jobs/([a-z0-9-]+)/logs", LogsHandler),
        (rf"{p}/profiles/?", ProfilesHandler),
    ], profiles=cfg, kube=kube, hub_auth=hub_auth, service=service, users=users)


def listen_address(host: str | None) -> str:
    """Bind the service URL's IP (127.0.0.1 when the hub and proxy share the machine); a host name (z2jh:
    `http://hub:10101`, the proxy in its own pod) means all interfaces. $GPUHUB_JOBS_LISTEN_IP overrides."""
    import ipaddress

    if "GPUHUB_JOBS_LISTEN_IP" in os.environ:
        return os.environ["GPUHUB_JOBS_LISTEN_IP"]
    try:
        return str(ipaddress.ip_address(host or ""))
    except ValueError:
        return ""


async def serve(opts) -> None:
    """Run the service with `options.GPUJobs` settings until stopped."""
    from gpu_spawner.model.profiles_file import cached_profiles, profiles_path

    cfg = cached_profiles(str(opts.profiles_file or profiles_path()))
    job_settings = opts.job_settings()
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig)
    else:
        config.load_incluster_config()
    api = client.ApiClient()
    logs = opts.log_source_class(api=api, parent=opts)
    namespaces = [t.namespace for t in cfg.teams.values()]
    cache = JobsCache(api, namespaces)
    try:
        await cache.start()
    except asyncio.TimeoutError:  # e.g. RBAC without watch: serve from the API until the watches sync
        log.warning("the Job/Workload/pod watches did not sync in 30 s; reading from the API meanwhile")
    kube = Kube(api, namespaces, logs, cache)
    service = ServiceSettings(job=job_settings)
    hub_auth = HubAuth(access_scopes={f"access:services!service={os.environ.get('JUPYTERHUB_SERVICE_NAME', SERVICE_NAME)}"},
                       cache_max_age=30)
    users = UserInfo(hub_auth.api_url, hub_auth.api_token)
    url = urlparse(opts.url)
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", f"/services/{SERVICE_NAME}/")
    app = make_app(cfg, kube, hub_auth, service, users, prefix)
    grace = opts.orphan_grace_seconds()  # half-created submissions: found and removed (lifecycle.py)
    app.settings["reconciler"] = asyncio.create_task(reconcile_forever(kube, grace, max(1.0, min(30.0, grace / 2))))
    server = HTTPServer(app, xheaders=True)
    server.listen(url.port or 80, listen_address(url.hostname))
    log.info("gpu-jobs service on %s%s (namespaces %s; runner image %s; home claim %s; logs from %s)",
             url.geturl(), prefix, namespaces, job_settings.runner_image, job_settings.home.claim,
             type(logs).__name__)
    await asyncio.Event().wait()
