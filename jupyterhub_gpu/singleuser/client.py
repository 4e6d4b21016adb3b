"""The notebook side's only way out: the `gpu-jobs` hub service, called with the user's own hub token
($JUPYTERHUB_API_TOKEN). No Kubernetes credentials live in the kernel."""
from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote

import requests

from jupyterhub_gpu.contract import (
    ENV_JOBS_URL,
    ENV_PROFILE,
    ENV_PROFILE_OPTIONS,
    IDEMPOTENCY_KEY_HEADER,
    JOBS_SERVICE,
    UNLISTED_CHOICE_SUFFIX,
)

SERVICE = JOBS_SERVICE


class JobsError(RuntimeError):
    """The service refused or could not be reached; the message is for the user (a sentence, no "HTTP 400":
    the code is in `status`, None when there was no answer)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def service_url(env: dict | None = None) -> str:
    """$GPUHUB_JOBS_URL (set by the hub config), else the hub's public URL + /services/gpu-jobs/."""
    env = os.environ if env is None else env
    if env.get(ENV_JOBS_URL):
        return env[ENV_JOBS_URL].rstrip("/") + "/"
    if env.get("JUPYTERHUB_PUBLIC_URL"):
        return env["JUPYTERHUB_PUBLIC_URL"].rstrip("/") + f"/services/{SERVICE}/"
    api = env.get("JUPYTERHUB_API_URL", "")
    if api.endswith("/hub/api"):
        return api[: -len("/hub/api")] + f"/services/{SERVICE}/"
    raise JobsError("cannot find the gpu-jobs service: this kernel is not running under JupyterHub "
                    "(no $GPUHUB_JOBS_URL or $JUPYTERHUB_API_URL)")


@dataclass
class Notebook:
    path: str           # path as the Jupyter server knows it (relative to its root)
    content: dict
    saved_at: float | None
    source: str         # where it was read from, for messages


def job_options(profile: str, chosen: dict | None = None, env: dict | None = None) -> dict:
    """A job's profile options: on the server's own profile, the server's choices (so the job runs in the image
    the server runs), with any option the user names (`%gpu_submit --option image=...`) instead."""
    env = os.environ if env is None else env
    same = env.get(ENV_PROFILE) == profile and env.get(ENV_PROFILE_OPTIONS)
    server = dict(parse_qsl(env[ENV_PROFILE_OPTIONS])) if same else {}
    named = {k.removesuffix(UNLISTED_CHOICE_SUFFIX) for k in chosen or {}}
    return {**{k: v for k, v in server.items() if k.removesuffix(UNLISTED_CHOICE_SUFFIX) not in named},
            **(chosen or {})}


def current_notebook_path(env: dict | None = None) -> str | None:
    """The kernel's notebook: jupyter_server (2+) puts the session's path in $JPY_SESSION_NAME, as an
    absolute path; under $HOME (the server's root in the singleuser image) it becomes relative to it,
    the path users see in JupyterLab and the contents API takes."""
    env = os.environ if env is None else env
    path = env.get("JPY_SESSION_NAME") or ""
    if not path.endswith(".ipynb"):
        return None
    home = env.get("HOME")
    if home and os.path.isabs(path) and Path(path).is_relative_to(home):
        return str(Path(path).relative_to(home))
    return path


def read_notebook(path: str, env: dict | None = None) -> Notebook:
    """The saved notebook: from the Jupyter server's contents API (this user's server, same token), else
    from disk next to the kernel (its working folder is the notebook's folder)."""
    env = os.environ if env is None else env
    server, token = env.get("JUPYTERHUB_SERVICE_URL"), env.get("JUPYTERHUB_API_TOKEN")
    if server and token and not os.path.isabs(path):
        try:
            r = requests.get(f"{server.rstrip('/')}/api/contents/{quote(path)}", params={"content": "1"},
                             headers={"Authorization": f"token {token}"}, timeout=15)
            if r.ok:
                model = r.json()
                from datetime import datetime
                saved = datetime.fromisoformat(model["last_modified"].replace("Z", "+00:00")).timestamp()
                return Notebook(path, model["content"], saved, "the Jupyter server")
        except (requests.RequestException, ValueError, KeyError):
            pass
    for candidate in (Path(path), Path.cwd() / Path(path).name, Path.home() / path):
        if candidate.is_file():
            return Notebook(path, json.loads(candidate.read_text()), candidate.stat().st_mtime, str(candidate))
    raise JobsError(f"cannot read the notebook {path!r}; save it first, or pass --notebook PATH")


def saved_note(nb: Notebook, now: float | None = None) -> str:
    """What the user must know: the last SAVED version is what runs."""
    if nb.saved_at is None:
        return f"Submitting {nb.path} as saved on disk. Unsaved edits are not included."
    ago = max(0, int((now or time.time()) - nb.saved_at))
    when = f"{ago} s ago" if ago < 120 else f"{ago // 60} min ago"
    return (f"Submitting {nb.path} as last saved ({when}). Unsaved edits in the editor are NOT included: "
            "save (Ctrl+S) and submit again if you changed it since.")


#: Answers after which a submission is sent again under its key: none came (None), or gpu-jobs or the proxy in
#: front of it was briefly unavailable (a restart).
RETRIED = (None, 502, 503, 504)


def new_idempotency_key() -> str:
    """A fresh key per submission: 32 URL-safe characters (contract.IDEMPOTENCY_KEY_RE)."""
    return secrets.token_urlsafe(24)


class JobsClient:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30, attempts: int = 4,
                 backoff: float = 1.0):
        self.url = (url or service_url()).rstrip("/") + "/"
        self.token = token or os.environ.get("JUPYTERHUB_API_TOKEN")
        if not self.token:
            raise JobsError("no $JUPYTERHUB_API_TOKEN: %gpu_submit works inside a JupyterHub server")
        self.timeout, self.attempts, self.backoff = timeout, max(1, attempts), backoff

    def _call(self, method: str, path: str, headers: dict | None = None, **kw) -> requests.Response:
        try:
            r = requests.request(method, self.url + path, timeout=self.timeout, **kw,
                                 headers={**(headers or {}), "Authorization": f"token {self.token}"})
        except requests.RequestException as e:
            raise JobsError(f"the gpu-jobs service is not reachable at {self.url}: {e}") from None
        if r.status_code >= 400:
            try:
                message = r.json().get("message") or r.reason
            except ValueError:
                message = r.text[:300] or r.reason
            raise JobsError(str(message), r.status_code)
        return r

    def profiles(self) -> dict:
        return self._call("GET", "profiles").json()

    def submit(self, profile: str, notebook_path: str, notebook: dict, parameters: dict | None = None,
               priority: str | None = None, timeout: str | int | None = None, options: dict | None = None,
               nodes: int | None = None, key: str | None = None) -> dict:
        """The notebook goes without its outputs (the snapshot drops them; gpu-jobs takes at most 4 MiB).
        `key`: the submission's Idempotency-Key (the lab routes pass the browser's own; else a fresh one)."""
        from jupyterhub_gpu.builders.jobs import strip_outputs  # here: the kernel imports this module at load

        body = {"profile": profile, "notebook_path": notebook_path, "notebook": strip_outputs(notebook),
                "parameters": parameters or {}, "options": job_options(profile, options)}
        if nodes is not None and nodes != 1:  # a multi-node job (a JobSet of `nodes` ranks)
            body["nodes"] = nodes
        if priority:
            body["priority"] = priority
        if timeout:
            body["timeout"] = timeout
        return self.post_job(body, key)

    def post_job(self, body: dict, key: str | None = None) -> dict:
        """POST /jobs under an Idempotency-Key (a fresh one unless given), tried again with the same key when
        no answer came or gpu-jobs was briefly unavailable: a retry gets the job the first try made, never a
        second one."""
        key, attempt = key or new_idempotency_key(), 0
        while True:
            try:
                return self._call("POST", "jobs", headers={IDEMPOTENCY_KEY_HEADER: key}, json=body).json()
            except JobsError as e:
                attempt += 1
                if attempt >= self.attempts or e.status not in RETRIED:
                    raise
            time.sleep(self.backoff * 2 ** (attempt - 1))

    def jobs(self, everyone: bool = False) -> list[dict]:
        return self._call("GET", "jobs", params={"all": "1"} if everyone else None).json()["jobs"]

    def job(self, name: str) -> dict:
        return self._call("GET", f"jobs/{name}").json()

    def logs(self, name: str, tail: int = 65536, rank: int | None = None) -> str:
        params = {"tail": str(tail), **({"rank": str(rank)} if rank is not None else {})}
        return self._call("GET", f"jobs/{name}/logs", params=params).text

    def cancel(self, name: str) -> dict:
        return self._call("DELETE", f"jobs/{name}").json()

    def confirm_email(self, code: str) -> dict:
        """The code mailed to the user's own address, back to gpu-jobs (which makes that address theirs)."""
        return self._call("POST", "notifications/confirm", json={"code": code}).json()
