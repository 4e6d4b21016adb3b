"""The single-user server's routes for the JupyterLab extension (a jupyter_server extension).

The browser never holds a hub token for gpu-jobs or the culler: it calls these routes on its own Jupyter
server (cookie + XSRF, like every JupyterLab request), and the server calls the services with its own
$JUPYTERHUB_API_TOKEN in the Authorization header, through the same `JobsClient` as `%gpu_submit`.

  GET    <base>/gpuhub/profiles         the user's GPU profiles (gpu-jobs)
  GET    <base>/gpuhub/jobs             the user's jobs, each with `output_path` and `summary` (see for_lab)
  POST   <base>/gpuhub/jobs             {path, profile, parameters, priority, timeout}: submit the SAVED notebook
                                        (the browser's Idempotency-Key goes on to gpu-jobs: its retry makes no 2nd job)
  GET    <base>/gpuhub/jobs/<name>      status;  DELETE: cancel;  GET .../logs: {log: the log tail}
  GET    <base>/gpuhub/culling          this user's culling warnings (the culler's warnings/<user>)
  POST   <base>/gpuhub/keep             "keep my server": reports activity to the hub now
  GET    <base>/gpuhub/stopping         a preemptible server's end: whether SIGTERM came, and what to tell the user
                                        (stopping.py: JupyterLab warns and saves before the server stops)
  GET    <base>/gpuhub/confirm-email?code=  the link mailed to a user's own address: a page whose button (POST)
                                        hands the code to gpu-jobs with this server's token (the user's own)
Enabled by jupyter-config/jupyter_server_config.d/jupyterhub_gpu.json (installed with the package).
"""
from __future__ import annotations

import asyncio
import html
import json
import os
from datetime import datetime, timezone
from urllib.parse import quote

import requests
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.utils import ensure_async, url_path_join
from tornado import web

from jupyterhub_gpu.builders.jobs import JobRequestError
from jupyterhub_gpu.contract import (
    CULLER_SERVICE,
    ENV_CULLER_URL,
    ENV_JOBS_URL,
    IDEMPOTENCY_KEY_HEADER,
    IDEMPOTENCY_KEY_RE,
    JOBS_SERVICE,
    LAB_API_PREFIX,
    output_notebook_path,
)
from jupyterhub_gpu.parameters import parse_assignments, split_assignments
from jupyterhub_gpu.services.jobs.limits import check_notebook_path, job_name

from . import stopping
from .client import JobsClient, JobsError, new_idempotency_key
from .widgets import view

#: A submit request carries names and a few short strings; the notebook itself is read here, not sent.
MAX_BODY = 64 * 1024


def culler_url(env: dict | None = None) -> str:
    """$GPUHUB_CULLER_URL; else the culler beside gpu-jobs when $GPUHUB_JOBS_URL goes through the proxy (both
    are hub services behind it); else the hub's public URL. Configured URLs only: never one built from the
    request (its Host header is the caller's; the URL receives this server's token). Never the hub API's own
    address: the hub does not route /services/."""
    env = os.environ if env is None else env
    if env.get(ENV_CULLER_URL):
        return env[ENV_CULLER_URL].rstrip("/") + "/"
    jobs, suffix = env.get(ENV_JOBS_URL, "").rstrip("/") + "/", f"/services/{JOBS_SERVICE}/"
    if jobs.endswith(suffix):
        return jobs[: -len(suffix)] + f"/services/{CULLER_SERVICE}/"
    public = env.get("JUPYTERHUB_PUBLIC_URL")
    if not public:
        raise JobsError(f"cannot find the culler: set ${ENV_CULLER_URL}")
    return public.rstrip("/") + f"/services/{CULLER_SERVICE}/"


def output_path(status: dict) -> str:
    """Where the job's output notebook lands, relative to the server's root (the home folder)."""
    return output_notebook_path(status["name"], status.get("notebook"))


def for_lab(status: dict) -> dict:
    """A job status for the front end: where its output lands, and the status widget's own one-line summary
    (queue position and ETA, current cell, preemptions), so the panel and `%gpu_submit` say the same.
    Its shape is `wire.LabJob` (tests/unit/test_wire.py); not enforced here, so the keys of a newer gpu-jobs
    than this server's pass through to the browser instead of failing it."""
    return {**status, "output_path": output_path(status), "summary": view(status)["title"]}


def submit_request(body: bytes) -> dict:
    """The front end's submit body, checked (pure): {path, profile, parameters, priority, timeout}.
    `parameters` is an object or the form's `name=value` text (the same rule as `%gpu_submit --param`)."""
    if len(body) > MAX_BODY:
        raise JobRequestError(f"the request is {len(body)} bytes; the limit is {MAX_BODY}")
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise JobRequestError("the request body must be JSON") from None
    if not isinstance(data, dict):
        raise JobRequestError("the request body must be a JSON object")
    path = check_notebook_path(data.get("path"))
    profile = data.get("profile")
    if not isinstance(profile, str) or not profile:
        raise JobRequestError("choose a GPU profile")
    params = data.get("parameters") or {}
    if isinstance(params, str):
        try:
            params = parse_assignments(split_assignments(params))
        except ValueError as e:
            raise JobRequestError(f"parameters: {e}") from None
    if not isinstance(params, dict):
        raise JobRequestError("parameters must be an object or name=value lines")
    out = {"path": path, "profile": profile, "parameters": params}
    for key in ("priority", "timeout"):
        value = data.get(key)
        if value not in (None, ""):
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                raise JobRequestError(f"{key} must be a string")
            out[key] = str(value)
    return out


def activity_body(server: str, now: datetime | None = None) -> dict:
    """The hub's POST /users/<name>/activity body for this server (what jupyterhub-singleuser sends)."""
    stamp = (now or datetime.now(timezone.utc)).isoformat().replace("+00:00", "Z")
    return {"last_activity": stamp, "servers": {server: {"last_activity": stamp}}}


class _Base(APIHandler):
    async def call(self, method: str, *args):
        """A `JobsClient` call off the event loop; its refusals reach the browser with their message."""
        try:
            client = JobsClient()
        except JobsError as e:  # not under JupyterHub, or no gpu-jobs configured
            raise web.HTTPError(503, str(e)) from None
        try:
            return await asyncio.to_thread(getattr(client, method), *args)
        except JobsError as e:
            raise web.HTTPError(502 if "not reachable" in str(e) else 400, str(e)) from None

    def name(self, name: str) -> str:
        try:
            return job_name(name)
        except JobRequestError as e:
            raise web.HTTPError(400, str(e)) from None


class ProfilesHandler(_Base):
    @web.authenticated
    async def get(self):
        self.finish(await self.call("profiles"))


class JobsHandler(_Base):
    def idempotency_key(self) -> str:
        """The browser's key for this submission (its retries send the same), else a fresh one."""
        key = self.request.headers.get(IDEMPOTENCY_KEY_HEADER)
        if key is None:
            return new_idempotency_key()
        if not IDEMPOTENCY_KEY_RE.fullmatch(key):
            raise web.HTTPError(400, f"the {IDEMPOTENCY_KEY_HEADER} header must be 8 to 64 letters, digits, "
                                     "'-' or '_'")
        return key

    @web.authenticated
    async def get(self):
        jobs = await self.call("jobs")
        self.finish({"jobs": [for_lab(j) for j in jobs]})

    @web.authenticated
    async def post(self):
        try:
            req = submit_request(self.request.body)
        except JobRequestError as e:
            raise web.HTTPError(400, str(e)) from None
        try:  # the SAVED notebook, as the server has it (the front end saved it just before)
            model = await ensure_async(self.contents_manager.get(req["path"], content=True, type="notebook"))
        except web.HTTPError as e:
            raise web.HTTPError(400, f"cannot read {req['path']}: {e.log_message}") from None
        notebook = json.loads(json.dumps(model["content"], default=str))
        status = await self.call("submit", req["profile"], req["path"], notebook, req["parameters"],
                                 req.get("priority"), req.get("timeout"), None, None, self.idempotency_key())
        self.set_status(201)
        self.finish(for_lab(status))


class JobHandler(_Base):
    @web.authenticated
    async def get(self, name):
        status = await self.call("job", self.name(name))
        self.finish(for_lab(status))

    @web.authenticated
    async def delete(self, name):
        self.finish(await self.call("cancel", self.name(name)))


class LogsHandler(_Base):
    @web.authenticated
    async def get(self, name):
        self.finish({"log": await self.call("logs", self.name(name), 65536)})  # an API answer is JSON


class CullingHandler(_Base):
    @web.authenticated
    async def get(self):
        """This user's warnings; for this server only where it has a name (the default server's is "")."""
        user = os.environ.get("JUPYTERHUB_USER", "")
        server = os.environ.get("JUPYTERHUB_SERVER_NAME", "")
        try:
            url = culler_url()
            r = await asyncio.to_thread(
                requests.get, url + f"warnings/{quote(user, safe='')}", timeout=15,
                headers={"Authorization": f"token {os.environ.get('JUPYTERHUB_API_TOKEN', '')}"})
        except (requests.RequestException, JobsError) as e:
            raise web.HTTPError(502, f"the culler is not reachable: {e}") from None
        if r.status_code == 404:  # no culler service on this hub: nothing to warn about
            self.finish({"warnings": [], "culler": False})
            return
        if not r.ok:
            raise web.HTTPError(502, f"the culler answered HTTP {r.status_code}")
        warnings = [w for w in r.json().get("warnings", []) if w.get("server", "") == server]
        self.finish({"warnings": warnings, "culler": True})


class KeepHandler(_Base):
    @web.authenticated
    async def post(self):
        """Counts as activity at once (the culler reads the hub's last_activity), not at the next report."""
        user = os.environ.get("JUPYTERHUB_USER", "")
        api = os.environ.get("JUPYTERHUB_API_URL", "").rstrip("/")
        body = activity_body(os.environ.get("JUPYTERHUB_SERVER_NAME", ""))
        try:
            r = await asyncio.to_thread(
                requests.post, f"{api}/users/{quote(user, safe='')}/activity", json=body, timeout=15,
                headers={"Authorization": f"token {os.environ.get('JUPYTERHUB_API_TOKEN', '')}"})
        except requests.RequestException as e:
            raise web.HTTPError(502, f"the hub is not reachable: {e}") from None
        if not r.ok:
            raise web.HTTPError(502, f"the hub refused the activity report (HTTP {r.status_code})")
        self.finish({"kept": True, "last_activity": body["last_activity"]})


CONFIRM_PAGE = ("""<!doctype html><html><head><meta charset="utf-8"><title>{title}</title></head>
"""
                """<body style="font-family: sans-serif; max-width: 40em; margin: 3em auto"><h1>{title}</h1>"""
                """<p>{text}</p>{form}</body></html>""")


class ConfirmEmailHandler(JupyterHandler):
    """The mailed link lands here, in the logged-in user's own server (the hub's OAuth): a GET only shows a
    button (a mail scanner that opens links confirms nothing); its POST hands the code to gpu-jobs with this
    server's token, so only the user who asked can confirm (gpu-jobs refuses another user's code)."""

    def page(self, title: str, text: str, form: str = "") -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(CONFIRM_PAGE.format(title=html.escape(title), text=html.escape(text), form=form))

    @web.authenticated
    def get(self):
        code = self.get_argument("code", "")[:100]
        form = (f'<form method="post">{self.xsrf_form_html()}<input type="hidden" name="code" '
                f'value="{html.escape(code, quote=True)}"><button type="submit">Confirm my address</button></form>')
        self.page("Confirm your e-mail address", "Send GPU job notifications to the address this link was mailed "
                  "to? Only do this if you asked for it, logged in as yourself.", form)

    @web.authenticated
    async def post(self):
        try:
            client = JobsClient()
            answer = await asyncio.to_thread(client.confirm_email, self.get_argument("code", "")[:100])
        except JobsError as e:
            self.set_status(e.status if e.status and 400 <= e.status < 500 else 502)
            self.page("Not confirmed", str(e))
            return
        self.page("Address confirmed", answer.get("message") or "Confirmed.")


def _load_jupyter_server_extension(server_app):
    base = url_path_join(server_app.web_app.settings["base_url"], LAB_API_PREFIX)
    server_app.web_app.add_handlers(".*$", [
        (url_path_join(base, "profiles"), ProfilesHandler),
        (url_path_join(base, "jobs"), JobsHandler),
        (url_path_join(base, r"jobs/([^/]+)"), JobHandler),
        (url_path_join(base, r"jobs/([^/]+)/logs"), LogsHandler),
        (url_path_join(base, "culling"), CullingHandler),
        (url_path_join(base, "keep"), KeepHandler),
        (url_path_join(base, "confirm-email"), ConfirmEmailHandler),
        (url_path_join(base, "stopping"), stopping.StoppingHandler),
    ])
    stopping.install(server_app)  # after jupyter_server's own SIGTERM handler: a preemptible server saves first
    server_app.log.info("jupyterhub-gpu: JupyterLab routes under %s", base)


def _jupyter_server_extension_points():
    return [{"module": "jupyterhub_gpu.singleuser.server"}]
