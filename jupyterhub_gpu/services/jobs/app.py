"""The `gpu-jobs` hub service: a tornado app, authenticated with the caller's own JupyterHub token.

  POST   /jobs              submit   {profile, notebook_path, notebook, parameters, priority, timeout, nodes}
                            (`Idempotency-Key` header: a retry answers 200 with the job the first try made)
  GET    /jobs              list (own; `?all=1` for admins: everyone's)
  GET    /jobs/{name}       status
  GET    /jobs/{name}/logs  log tail (text/plain; `?tail=BYTES`; a multi-node job's `?rank=K`, default 0)
  DELETE /jobs/{name}       cancel
  GET    /profiles          the caller's GPU profiles, with queue length and free quota
  GET    /metrics           the event loop's stalls (services/loopguard.py; nobody's data, no token); the jobs'
                            training throughput only on --metrics-port (throughput_metrics.py), never here
  GET/PUT/DELETE /notifications   the caller's e-mail / webhook notification choices (services/notify/web.py)
A job of someone else is a 404 (its existence is not revealed); admins see and touch all jobs. Every JSON
answer is built through its model in jupyterhub_gpu/wire.py.
Run: `python -m jupyterhub_gpu.services.jobs` (JupyterHub starts it as a managed service).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import logging
import os
import time
import weakref
from collections import Counter
from concurrent.futures.process import BrokenProcessPool
from urllib.parse import urlparse

import aiohttp
from jupyterhub.services.auth import HubAuth
from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from tornado import web
from tornado.httpserver import HTTPServer

from jupyterhub_gpu import wire
from jupyterhub_gpu.builders.jobs import JobRequestError, JobSettings
from jupyterhub_gpu.builders.kueue import cluster_queue_name, local_queue_name
from jupyterhub_gpu.contract import FINISHED, IDEMPOTENCY_KEY_HEADER, PROFILE_LABEL, USER_ANNOTATION
from jupyterhub_gpu.contract import JOBS_SERVICE as SERVICE_NAME
from jupyterhub_gpu.kubeio.clients import timeout_api_client
from jupyterhub_gpu.kubeio.lease import LeaseBusy, Leases, lease_name, own_namespace, replicas_warning
from jupyterhub_gpu.model.gpu_amount import gpu_amount
from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.model.profiles_file import cached_profiles, profiles_path
from jupyterhub_gpu.services.auth import TokenAuth
from jupyterhub_gpu.services.jobs import gang, idempotency, limits, throughput_metrics, words
from jupyterhub_gpu.services.jobs.cache import ClusterUnavailable, JobsCache
from jupyterhub_gpu.services.jobs.kube import Kube
from jupyterhub_gpu.services.jobs.lifecycle import StorageNotReady, create_submission, reconcile_forever
from jupyterhub_gpu.services.jobs.options import GPUJobs
from jupyterhub_gpu.services.jobs.planner import Planner
from jupyterhub_gpu.services.jobs.submission import ServiceSettings
from jupyterhub_gpu.services.loopguard import LoopGuard
from jupyterhub_gpu.services.metrics_auth import metrics_token
from jupyterhub_gpu.services.notify.options import Notifications
from jupyterhub_gpu.services.notify.watch import watch_jobs
from jupyterhub_gpu.services.web import Base

log = logging.getLogger("gpuhub.jobs")


NOTIFY_LEADER = "gpuhub-jobs-notify"  # the Lease of the one replica that sends notifications
BUSY_RETRY_AFTER = 2


class Busy(web.HTTPError):
    """503: another replica holds the user's submit lock; try again shortly (Retry-After)."""

    def __init__(self):
        super().__init__(503, log_message="another submission of yours is being checked; busy, try again in a few "
                                          "seconds", reason="Busy")


def still_held(user: str, held) -> None:
    """Before a create under the user's lock: the Lease (if any) still ours, else Busy (503, Retry-After)."""
    if held is not None and held.lost:
        log.warning("the submit lock of %s was lost before the create: answered busy", user)
        raise Busy()


class SubmitGate:
    """One submission per user at a time (count unfinished jobs + create), so N parallel requests cannot
    all pass `max_per_user` / `max_jobs_per_user`; and the jobs just created, counted until the watch-fed
    cache lists them (the cache may lag a create). Two locks, in order: an asyncio lock per user (cheap, this
    process), then with `leases` a Lease per user at the API server (kubeio/lease.py: every replica)."""

    def __init__(self, remember: float = 60, leases: Leases | None = None):
        self.remember = remember
        self.leases = leases
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._recent: dict[str, dict[str, tuple[str, float]]] = {}  # user → job name → (profile, created at)
        self._in_flight: Counter = Counter()  # user → submissions being read, planned or created

    def enter(self, user: str, limit: int) -> bool:
        """Take one of the user's `limit` in-flight submissions (before the body is read); False: all taken."""
        if self._in_flight[user] >= limit:
            return False
        self._in_flight[user] += 1
        return True

    def in_flight(self, user: str) -> int:
        return self._in_flight[user]

    def leave(self, user: str) -> None:
        self._in_flight[user] -= 1
        if self._in_flight[user] <= 0:
            del self._in_flight[user]

    def lock(self, user: str) -> asyncio.Lock:
        found = self._locks.get(user)
        if found is None:
            found = self._locks[user] = asyncio.Lock()
        return found

    @contextlib.asynccontextmanager
    async def held(self, user: str):
        """This user's lock in this process and, with `leases`, across replicas; not obtained in the Lease's
        wait: Busy (503, Retry-After); the API server not answering: ClusterUnavailable (503). Yields a check
        to call right before each create: the Lease lost meanwhile (a renew failed or was late): Busy."""
        async with self.lock(user), contextlib.AsyncExitStack() as stack:
            held = None
            if self.leases is not None:
                try:
                    held = await stack.enter_async_context(self.leases.hold(lease_name(user), user))
                except LeaseBusy:
                    raise Busy() from None
                except client.ApiException as e:
                    log.error("the submit lock of %s: %s %s", user, e.status, e.reason)
                    raise ClusterUnavailable(f"the per-user lock: HTTP {e.status} {e.reason}") from None
                except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                    raise ClusterUnavailable.no_answer(e) from None
            yield functools.partial(still_held, user, held)

    def created(self, user: str, name: str, profile: str) -> None:
        self._recent.setdefault(user, {})[name] = (profile, time.monotonic())

    def forget(self, user: str, name: str) -> None:
        self._recent.get(user, {}).pop(name, None)

    def unfinished(self, user: str, listed: dict[str, str]) -> Counter:
        """Unfinished jobs per profile: `listed` (name → profile, from the cache) plus jobs created in the
        last `remember` seconds that the cache does not list yet."""
        recent = self._recent.get(user, {})
        now = time.monotonic()
        for name in [n for n, (_, t) in recent.items() if n in listed or now - t > self.remember]:
            del recent[name]
        return Counter([*listed.values(), *(slug for slug, _ in recent.values())])


class JobsBase(Base):
    """The jobs endpoints' handlers: the shared base (identity, query bounds, JSON; services/web.py) with the
    service's profiles and cluster."""

    @property
    def cfg(self) -> ProfilesConfig:
        return self.settings["profiles"]

    @property
    def kube(self) -> Kube:
        return self.settings["kube"]

    def explained(self, statuses: list[dict]) -> list[dict]:
        """Queued jobs' Kueue reasons in plain words (Kueue's own stay in `kueue_message`)."""
        return [words.explain(self.cfg, s) for s in statuses]

    async def own_job(self, name: str) -> dict:
        try:
            limits.job_name(name)
        except JobRequestError as e:
            raise refusal(e) from None
        job = await self.kube.job(name)
        owner = ((job or {}).get("metadata", {}).get("annotations") or {}).get(USER_ANNOTATION)
        if job is None or not (self.who.admin or owner == self.who.name):
            raise web.HTTPError(404, f"no job {name!r} of yours")
        return job


def refusal(e: JobRequestError) -> web.HTTPError:
    code = 413 if isinstance(e, limits.TooLarge) else 422 if isinstance(e, idempotency.KeyReused) else 400
    return web.HTTPError(code, str(e))


@web.stream_request_body  # prepare() runs before the body is read: the in-flight limit first, then the body
class JobsHandler(JobsBase):
    _slot: str | None = None
    _body: list[bytes]
    _size = 0
    _body_read = False  # tornado calls post() once the streamed body has been read to its end

    async def prepare(self):
        self._body = []
        if self.request.method != "POST":
            # Not refused here: tornado closes a connection whose request it has not read to the end when the
            # answer comes from prepare() (a streamed body may follow), and a proxy that keeps connections alive
            # (configurable-http-proxy) can hand the next user's request to it just then: a 503 "socket hang
            # up" for someone else. A GET has no body: it is checked in get(), once tornado has read it.
            return
        await super().prepare()
        limit = self.settings["service"].submissions_in_flight
        if not self.settings["gate"].enter(self.who.name, limit):
            raise web.HTTPError(429, f"you have {limit} submission(s) in progress already; the limit is {limit} "
                                     "at a time. Wait for them to be answered and submit again.")
        self._slot = self.who.name

    def data_received(self, chunk: bytes) -> None:
        """Kept up to the limit; beyond it read and dropped (answered 413 once read: a proxy in front cannot
        pass on an answer to a request it is still sending), up to tornado's HARD_BODY_BYTES."""
        self._size += len(chunk)
        if self.request.method == "POST" and self._size <= limits.MAX_BODY_BYTES:
            self._body.append(chunk)

    def on_finish(self) -> None:
        self._leave()

    def on_connection_close(self) -> None:
        self._leave()
        super().on_connection_close()

    def _leave(self) -> None:
        if self._slot is not None:
            self.settings["gate"].leave(self._slot)
            self._slot = None

    async def get(self):
        await super().prepare()  # Base's checks, which prepare() left for a GET
        everyone = self.who.admin and self.get_argument("all", "") in ("1", "true", "yes")
        jobs = await self.kube.jobs(None if everyone else self.who.name)
        statuses = self.explained(await self.kube.statuses(jobs, with_logs=self.get_argument("cells", "1") != "0"))
        statuses.sort(key=lambda s: s.get("created") or "", reverse=True)
        self.send(wire.dump(wire.JobList, {"jobs": statuses}))

    def write_error(self, status_code, **kwargs):
        if isinstance(kwargs.get("exc_info", (None, None, None))[1], Busy):  # after tornado's clear(): kept
            self.set_header("Retry-After", str(BUSY_RETRY_AFTER))
        if self.request.method == "POST" and not self._body_read:
            # Refused before its body was read (token, in-flight limit): tornado closes the connection once this
            # is sent, so say so. A proxy that keeps connections alive (configurable-http-proxy) would otherwise
            # hand the next request, maybe another user's, to the closing socket: a 503 "socket hang up".
            self.set_header("Connection", "close")
        super().write_error(status_code, **kwargs)

    async def unfinished(self, user: str, jobs: list[dict]) -> Counter:
        """The user's unfinished jobs per profile (of `jobs`, theirs), including ones just created (see
        SubmitGate)."""
        statuses = await self.kube.statuses(jobs, with_logs=False)
        listed = {j["metadata"]["name"]: (j["metadata"].get("labels") or {}).get(PROFILE_LABEL, "")
                  for j, s in zip(jobs, statuses) if s["state"] not in FINISHED}
        return self.settings["gate"].unfinished(user, listed)

    async def post(self):
        self._body_read = True
        user, groups = self.who.name, list(self.who.groups)
        if self._size > limits.MAX_BODY_BYTES:
            raise refusal(limits.too_large(self._size))
        raw, self._body = b"".join(self._body), []
        try:  # a retry under the same key gets the job the first try made (idempotency.py)
            key = idempotency.check_key(self.request.headers.get(IDEMPOTENCY_KEY_HEADER))
        except JobRequestError as e:
            raise refusal(e) from None
        submission = idempotency.submission_id(user, key) if key else None
        gate: SubmitGate = self.settings["gate"]
        self.kube.require_current()  # limits are counted from the cache: only from a current one
        async with gate.held(user) as still_ours:  # count and create as one step per user, over all replicas
            mine = await self.kube.jobs(user, fresh=gate.leases is not None)  # from the API: another replica's too
            if submission and (earlier := idempotency.find(mine, user, submission)):
                return await self.replayed(raw, earlier)  # before the limits: it counts among them already
            active = await self.unfinished(user, mine)
            try:  # parse and plan in a worker process: never on this loop (planner.py)
                objs, slug = await self.settings["planner"].plan(raw, user, groups, dict(active), submission)
            except JobRequestError as e:
                raise refusal(e) from None
            except BrokenProcessPool:
                raise web.HTTPError(503, "the submission could not be checked right now; try again") from None
            still_ours()  # the lock lost while counting (a renew failed or was late): 503, no create
            job, made = await self.create(user, objs)
            if made and await self.kube.job(job["metadata"]["name"]) is None:  # the cache lags: count it
                gate.created(user, job["metadata"]["name"], slug)
        log.info("%s submitted %s/%s (%s)%s", user, job["metadata"]["namespace"], job["metadata"]["name"], slug,
                 "" if made else ": a retry, the job its first try made")
        (status,) = self.explained(await self.kube.statuses([job], with_logs=False))
        self.send(wire.dump(wire.JobStatus, status), 201 if made else 200)

    async def replayed(self, raw: bytes, job: dict) -> None:
        """A retry of a submission whose job exists: that job (200), if the body is the one it was made from."""
        try:
            idempotency.check_replay(job, await self.settings["planner"].digest(raw))
        except JobRequestError as e:
            raise refusal(e) from None
        except BrokenProcessPool:
            raise web.HTTPError(503, "the submission could not be checked right now; try again") from None
        log.info("%s retried the submission of %s: answered with it", self.who.name, job["metadata"]["name"])
        (status,) = self.explained(await self.kube.statuses([job], with_logs=False))
        self.send(wire.dump(wire.JobStatus, status), 200)

    async def create(self, user: str, objs: list[dict]) -> tuple[dict, bool]:
        try:
            return await create_submission(self.kube, objs, self.settings["service"].job.home.claim)
        except JobRequestError as e:  # the key reused with another body, found at the API server
            raise refusal(e) from None
        except StorageNotReady as e:
            raise web.HTTPError(503, str(e)) from None
        except client.ApiException as e:
            log.error("creating job for %s failed: %s %s", user, e.status, e.body)
            try:
                why = json.loads(e.body).get("message") or e.reason
            except (TypeError, ValueError, AttributeError):
                why = e.reason
            raise web.HTTPError(502 if e.status >= 500 else 400, f"Kubernetes refused the job: {why}") from None


class JobHandler(JobsBase):
    async def get(self, name):
        job = await self.own_job(name)
        (status,) = self.explained(await self.kube.statuses([job]))
        self.send(wire.dump(wire.JobStatus, status))

    async def delete(self, name):
        job = await self.own_job(name)
        await self.kube.delete(job)
        self.settings["gate"].forget(job["metadata"].get("annotations", {}).get(USER_ANNOTATION, ""), name)
        log.info("%s cancelled %s", self.who.name, name)
        self.send(wire.dump(wire.Cancelled, {"name": name, "cancelled": True}))


class LogsHandler(JobsBase):
    async def get(self, name):
        job = await self.own_job(name)
        try:
            tail = limits.log_tail(self.get_argument("tail", None))
            rank = gang.check_rank(self.get_argument("rank", None), gang.nodes_of(job) if gang.is_jobset(job) else 1)
        except JobRequestError as e:
            raise refusal(e) from None
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(await self.kube.job_logs(job, tail, rank))


def profiles_answer(cfg: ProfilesConfig, service: ServiceSettings, user: str, groups: list[str],
                    team: str | None, info: dict) -> dict:
    """GET /profiles (pure): the caller's GPU profiles with their team queue's length and free quota (`info`:
    Kube.queue_info), as wire.Profiles."""
    out = []
    for p in cfg.profiles_for(groups):
        if p.is_gpu:
            out.append({"slug": p.slug, "display_name": p.display_name, "description": p.description,
                        "gpus": p.gpu.count, "gpu_label": gpu_amount(cfg, p),  # "¼ T4 (time-sliced)"
                        "resource": cfg.resource_name(p), "pool": p.pool,
                        "priority": cfg.effective_priority(p), "max_per_user": p.max_per_user,
                        "max_nodes": p.max_nodes or 1,
                        "priorities": cfg.allowed_priorities(p, groups),
                        "max_timeout": min(p.max_job_timeout or JobSettings().max_timeout, service.job.max_timeout),
                        "free": info["free"].get(f"{p.pool}/{cfg.resource_name(p)}"),
                        "queued": info["pending"]})
    return wire.dump(wire.Profiles, {"user": user, "team": team, "profiles": out, "priorities": list(cfg.priorities),
                                     "max_jobs_per_user": service.max_jobs_per_user or None})


class ProfilesHandler(JobsBase):
    async def get(self):
        groups = list(self.who.groups)
        team = self.cfg.team_for(groups)
        info = {"pending": None, "free": {}}
        if team:
            info = await self.kube.queue_info(team[1].namespace, local_queue_name(team[0]), cluster_queue_name(team[0]))
        self.send(profiles_answer(self.cfg, self.settings["service"], self.who.name, groups,
                                  team[0] if team else None, info))


class HealthHandler(web.RequestHandler):
    def get(self):
        self.finish({"ok": True})


class MetricsHandler(web.RequestHandler):
    def get(self):
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(generate_latest(self.settings["metrics"]))


def make_app(cfg: ProfilesConfig, kube: Kube, auth: TokenAuth, service: ServiceSettings,
             prefix: str = "/", notifier=None, hub_url: str = "", leases: Leases | None = None) -> web.Application:
    from jupyterhub_gpu.services.notify import web as notify_web  # notify's endpoints, hosted here

    p = prefix.rstrip("/")
    return web.Application([
        (rf"{p}/health", HealthHandler),
        (rf"{p}/metrics", MetricsHandler),
        (rf"{p}/jobs/?", JobsHandler),
        (rf"{p}/jobs/([^/]+)/?", JobHandler),  # any name: a bad one is a clear 400 (limits.job_name)
        (rf"{p}/jobs/([^/]+)/logs", LogsHandler),
        (rf"{p}/profiles/?", ProfilesHandler),
        *notify_web.routes(p),
    ], profiles=cfg, kube=kube, auth=auth, service=service, gate=SubmitGate(leases=leases), notifier=notifier,
       hub_url=hub_url, planner=Planner(cfg, service), metrics=CollectorRegistry())


def listen_address(host: str | None) -> str:
    """Bind the service URL's IP (127.0.0.1 when the hub and proxy share the machine); a host name (z2jh:
    `http://hub:10101`, the proxy in its own pod) means all interfaces. $GPUHUB_JOBS_LISTEN_IP overrides."""

    if "GPUHUB_JOBS_LISTEN_IP" in os.environ:
        return os.environ["GPUHUB_JOBS_LISTEN_IP"]
    try:
        return str(ipaddress.ip_address(host or ""))
    except ValueError:
        return ""


async def serve(opts) -> None:
    """Run the service with `options.GPUJobs` settings until stopped."""

    path = opts.profiles_file or profiles_path()
    if not path:  # never the example file: a service without the hub's profiles would check nothing right
        raise SystemExit("gpu-jobs: no profiles file; pass --profiles FILE or set $GPUHUB_PROFILES")
    cfg = cached_profiles(str(path))
    job_settings = opts.job_settings()
    api = await timeout_api_client()  # every call of the service has a timeout
    logs = opts.log_source_class(api=api, parent=opts)
    namespaces = [t.namespace for t in cfg.teams.values()]
    jobsets = any(p.max_nodes for p in cfg.profiles)  # multi-node jobs: the JobSet CRD must be installed
    cache = JobsCache(api, namespaces, jobsets)
    try:
        await cache.start()
    except asyncio.TimeoutError:  # e.g. RBAC without watch: serve from the API until the watches sync
        log.warning("the Job/Workload/pod watches did not sync in 30 s; reading from the API meanwhile")
    kube = Kube(api, namespaces, logs, cache, jobsets)
    service = ServiceSettings(job=job_settings, max_jobs_per_user=opts.max_jobs_per_user,
                              submissions_in_flight=opts.submissions_in_flight)
    access = f"access:services!service={os.environ.get('JUPYTERHUB_SERVICE_NAME', SERVICE_NAME)}"
    auth = TokenAuth(HubAuth(access_scopes={access}), {access})
    url = urlparse(opts.url)
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", f"/services/{SERVICE_NAME}/")
    notifications = Notifications(parent=opts)
    notifier = notifications.notifier()  # None: the admin set no channel
    lease_ns = opts.lease_namespace or own_namespace()  # the per-user locks of every replica (else: in memory)
    leases = Leases(api, lease_ns) if lease_ns else None
    if warning := replicas_warning(leases is not None, notifier is not None):
        log.warning(warning)
    app = make_app(cfg, kube, auth, service, prefix, notifier, notifications.hub_url, leases)
    LoopGuard(app.settings["metrics"]).start()
    await app.settings["planner"].warm()
    if notifier is not None:  # job state changes → the e-mails and webhooks users opted into; by one replica
        watch = functools.partial(watch_jobs, kube, notifier, notifications.hub_url)
        app.settings["notify_watch"] = asyncio.create_task(leases.lead(NOTIFY_LEADER, watch) if leases else watch())
    if opts.metrics_port:  # the notebooks' training throughput, on a port the proxy never routes
        token = metrics_token(throughput_metrics.METRICS_TOKEN_ENV, token_file=opts.metrics_token_file or None)
        app.settings["throughput"] = throughput_metrics.serve(kube, opts.metrics_port, listen_address(url.hostname),
                                                              opts.metrics_interval_seconds(), token)
    grace = opts.orphan_grace_seconds()  # half-created submissions: found and removed (lifecycle.py)
    app.settings["reconciler"] = asyncio.create_task(reconcile_forever(kube, grace, max(1.0, min(30.0, grace / 2))))
    server = HTTPServer(app, xheaders=True, max_body_size=limits.HARD_BODY_BYTES)
    server.listen(url.port or 80, listen_address(url.hostname))
    log.info("gpu-jobs service on %s%s (namespaces %s; runner image %s; home claim %s; logs from %s; "
             "locks %s)", url.geturl(), prefix, namespaces, job_settings.runner_image,
             job_settings.home.claim, type(logs).__name__,
             f"in {leases.namespace} as {leases.holder}" if leases else "in this process only")
    try:
        await asyncio.Event().wait()
    finally:  # the hub's SIGINT (or any end): no planner worker outlives the service
        app.settings["planner"].stop_now()


def configured(argv: list[str] | None = None) -> GPUJobs:
    """gpu-jobs' settings from its command line, with those of the notification service it hosts
    (--Notifications.<trait>=...: e-mail and webhooks, services/notify/options.py)."""
    app = GPUJobs()
    app.classes = [*app.classes, Notifications]  # [GPUJobs, Notifications]
    app.initialize(argv)
    return app


def main(argv: list[str] | None = None) -> int:
    """`python -m jupyterhub_gpu.services.jobs`: the service, until stopped."""
    opts = configured(argv)
    logging.basicConfig(level=logging.INFO, format="[gpu-jobs %(levelname)1.1s %(asctime)s] %(message)s")
    asyncio.run(serve(opts))
    return 0
