"""The admins' console, a hub service (`/services/gpu-admin/`): the profiles as each group sees them, the
cluster's live state, `gpuhub doctor` on demand and a new profiles file's dry run. Admins only: a caller whose
hub model is not an admin's gets a 403 on every request (JupyterHub already refuses users the service's access).
Logged in through the hub (OAuth); no script, a strict CSP, every value escaped, POSTs XSRF-checked.

    python -m jupyterhub_gpu.services.admin.web --profiles-file FILE [--hub-namespace jhub]
        [--activity-interval 300] [--doctor-timeout 90]

Heavy or untrusted work stays off the event loop: a pasted file (at most 256 KiB) is parsed and compared in a
worker process, killed after `PARSE_TIMEOUT`; the cluster is read in the background (live.py); the doctor runs
as its own process (`gpuhub doctor`: the tools may not be imported by a service), at most once a minute.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import multiprocessing
import os
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Callable, Sequence
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated, UserNotAllowed
from tornado import httpclient, ioloop, web
from tornado.httpserver import HTTPServer

from jupyterhub_gpu.contract import adopt_hub_api_url
from jupyterhub_gpu.model.activity import DEFAULT_ACTIVITY_INTERVAL
from jupyterhub_gpu.services.admin import diff as d
from jupyterhub_gpu.services.admin import render
from jupyterhub_gpu.services.admin.live import LiveReader, kube_reads
from jupyterhub_gpu.services.hub_entry import listen_address
from jupyterhub_gpu.services.loopguard import LoopGuard

log = logging.getLogger("gpuhub.admin")
MAX_BODY = 256 * 1024         # a pasted file
MAX_REQUEST = MAX_BODY * 2    # the form's encoding of it, refused by the server above this
PARSE_TIMEOUT = 10.0          # seconds for a pasted file's parse and comparison
DOCTOR_EVERY = 60.0
MAX_OUTPUT = 64 * 1024
WORKER_MEMORY = 512 * 1024 * 1024  # the worker's address space beyond what it has at start (an alias bomb)
SECRET_ENV = ("JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN")  # and every JUPYTERHUB_*TOKEN / *SECRET / *KEY
CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"


# ---------------------------------------------------------------- the worker process (pure functions)

def dry_run(text: str, loaded: str, activity_interval: int, hub_namespace: str | None) -> dict[str, Any]:
    """In the worker: the pasted file's problems, or its diff from the loaded one (and the new file)."""
    new, problems = d.check_text(text, activity_interval)
    if new is None:
        return {"problems": problems}
    old = d.parse_profiles_text(loaded)  # the hub runs with it: it parses
    return {"diff": d.diff(old, new, hub_namespace), "new": new}


def load(text: str) -> Any:
    return d.parse_profiles_text(text)


def address_space() -> int:
    """This process's address space (VSZ) in bytes, from /proc/self/statm (Linux); 0 where unknown."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def limit_memory(extra: int) -> None:
    """The worker's initializer: its address space capped at what it has now + `extra` (lowering a limit needs
    no capability), so a file that expands in memory raises MemoryError there, not the pod's OOM killer here."""
    now = address_space()
    if now and extra > 0:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = now + extra if hard == resource.RLIM_INFINITY else min(now + extra, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def guarded(fn: Callable, *args) -> Any:
    """In the worker: `fn(*args)`, a MemoryError raised afresh once what it held is freed (the first one's
    traceback keeps the expanded data alive, and sending it back would need more memory than there is)."""
    try:
        return fn(*args)
    except MemoryError:
        pass
    gc.collect()
    raise MemoryError("the worker's memory limit")


class Worker:
    """One spawned worker process, one job at a time, each bounded in time (a stuck parse kills the worker) and
    in memory (`memory` bytes beyond its size at start: a MemoryError, or its death, replaces the worker)."""

    def __init__(self, timeout: float = PARSE_TIMEOUT, memory: int = WORKER_MEMORY):
        self.timeout, self.memory, self._pool, self._lock = timeout, memory, None, asyncio.Lock()

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:  # spawn: a fork of a process with a running loop and threads is unsafe
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=limit_memory, initargs=(self.memory,))
        return self._pool

    async def run(self, fn: Callable, *args) -> Any:
        async with self._lock:
            future = asyncio.get_running_loop().run_in_executor(self._executor(), guarded, fn, *args)
            try:
                return await asyncio.wait_for(future, self.timeout)
            except (asyncio.TimeoutError, BrokenProcessPool, MemoryError):
                self.kill()
                raise

    def kill(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            processes = list((getattr(pool, "_processes", None) or {}).values())  # CPython's pool internals
            pool.shutdown(wait=False, cancel_futures=True)
            for p in processes:
                p.terminate()


# ---------------------------------------------------------------- the loaded file, the doctor, the hub's servers

class Loaded:
    """The profiles file the hub loaded: text, sha256, when this page read it; re-read when its mtime changes."""

    def __init__(self, path: str):
        self.path = path
        self.mtime = os.stat(path).st_mtime
        self.text = Path(path).read_text()
        self.cfg = d.parse_profiles_text(self.text, source=path)
        self.checksum, self.loaded_at = d.checksum(self.text), time.time()
        self.offered = d.offered(self.cfg)

    async def refresh(self, worker: Worker) -> bool:
        try:
            mtime = os.stat(self.path).st_mtime
            if mtime == self.mtime:
                return False
            text = Path(self.path).read_text()
            cfg = await worker.run(load, text)
            offered = await worker.run(_offered, cfg)
        except Exception as e:  # noqa: BLE001 (a bad or half-written file: the hub keeps the last good one too)
            log.warning("cannot re-read %s: %s", self.path, e)
            return False
        self.mtime, self.text, self.cfg, self.offered = mtime, text, cfg, offered
        self.checksum, self.loaded_at = d.checksum(text), time.time()
        return True


def _offered(cfg):
    return d.offered(cfg)


class Doctor:
    """`gpuhub doctor` as a child process: at most once every `every` s, bounded by `timeout`; the last result."""

    def __init__(self, command: Sequence[str], timeout: float = 90.0, every: float = DOCTOR_EVERY,
                 clock: Callable[[], float] = time.monotonic):
        self.command, self.timeout, self.every, self.clock = list(command), timeout, every, clock
        self.started: float | None = None
        self.result: dict | None = None
        self.running = False  # a run in flight (it may outlast `every`): another is not started

    @staticmethod
    def environment() -> dict[str, str]:
        """The child's environment: this one without the page's token or other JupyterHub secrets."""
        return {k: v for k, v in os.environ.items() if k not in SECRET_ENV and not (
            k.startswith(("JUPYTERHUB_", "JPY_")) and any(w in k for w in ("TOKEN", "SECRET", "KEY", "PASSWORD")))}

    def wait(self) -> float:
        return 0.0 if self.started is None else max(0.0, self.every - (self.clock() - self.started))

    async def run(self) -> dict | None:
        if self.running or self.wait() > 0:
            return self.result
        self.running, self.started = True, self.clock()
        try:
            self.result = await self._run()
        finally:
            self.running = False
        return self.result

    @staticmethod
    async def _stop(proc) -> None:
        """Kill the child; what is left in the pipe (a killed child's: at most its buffer) is drained, as a full
        reader pauses the pipe and then never sees its end, and the wait for the exit would never return."""
        proc.kill()
        try:
            await asyncio.wait_for(proc.stdout.read(), 5)
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            log.warning("the doctor (pid %s) did not end after its kill", proc.pid)

    async def _run(self) -> dict:
        try:
            proc = await asyncio.create_subprocess_exec(*self.command, stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.STDOUT,
                                                        stdin=asyncio.subprocess.DEVNULL, env=self.environment())
        except OSError as e:
            return parse_doctor(f"cannot run the doctor: {e}", None)
        try:
            out = await asyncio.wait_for(proc.stdout.readexactly(MAX_OUTPUT + 1), self.timeout)
        except asyncio.IncompleteReadError as e:  # the whole output, under the cap
            out = e.partial
        except asyncio.TimeoutError:
            out = None
        if out is not None and len(out) > MAX_OUTPUT:  # more than the cap: the rest is not read
            await self._stop(proc)
            return parse_doctor(out[:MAX_OUTPUT].decode(errors="replace") + "\n(output over 64 KiB: stopped)", None)
        try:
            code = None if out is None else await asyncio.wait_for(proc.wait(), self.timeout)
        except asyncio.TimeoutError:
            code = out = None
        if out is None:
            await self._stop(proc)
            return parse_doctor(f"the doctor did not finish in {self.timeout:.0f} s (stopped)", None)
        return parse_doctor(out.decode(errors="replace"), code)


def parse_doctor(text: str, code: int | None) -> dict:
    """The ✗ rows of doctor's table, each with the `fix:` line under it (pure)."""
    failed: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("✗"):
            failed.append([" ".join(line[1:].split()), ""])
        elif line.strip().startswith("fix:") and failed:
            failed[-1][1] = line.strip()[4:].strip()
    last = text.strip().splitlines()[-1] if text.strip() else ""
    summary = last if "checks:" in last else ("all checks passed" if code == 0 else
                                              f"the doctor failed (exit {code})" if code else last[:200])
    return {"at": time.time(), "code": code, "failed": [tuple(f) for f in failed], "summary": summary,
            "output": text}


async def hub_users(timeout: float = 10.0, pages: int = 50) -> list[dict]:
    """The hub's users with their servers (the page's own token: list:users, read:servers); bounded pages."""
    api = os.environ["JUPYTERHUB_API_URL"].rstrip("/")
    token = os.environ["JUPYTERHUB_API_TOKEN"]
    http = httpclient.AsyncHTTPClient()
    users: list[dict] = []
    for page in range(pages):
        r = await http.fetch(f"{api}/users?state=active&offset={page * 200}&limit=200", request_timeout=timeout,
                             headers={"Authorization": f"token {token}",
                                      "Accept": "application/jupyterhub-pagination+json"})
        body = json.loads(r.body)
        items = body.get("items", []) if isinstance(body, dict) else body
        users += [u for u in items if isinstance(u, dict)]
        if not isinstance(body, dict) or not (body.get("_pagination") or {}).get("next"):
            break
    return users


# ---------------------------------------------------------------- the page

class AdminPage(HubOAuthenticated, web.RequestHandler):
    """Every request: the caller's hub identity (OAuth cookie) must be an admin's.

    The identity is asked of the hub asynchronously, in `prepare`: HubAuthenticated's synchronous
    `get_current_user` blocks the loop on the hub's answer, and on a POST whose _xsrf cookie is stale (made
    for an earlier login) JupyterHub's XSRF check asks for the current user from inside that same lookup, on
    HubAuth's one background thread, which then waits on itself for ever: every later request would hang."""

    _caller: dict | None = None

    def initialize(self, console: "Console") -> None:
        self.console = console

    def get_current_user(self):
        return self._caller  # None until prepare has asked the hub (the XSRF check may ask before)

    async def prepare(self):
        model = await self.hub_auth.get_user(self, sync=False)
        caller = None
        if model:
            try:
                caller = self.check_hub_user(model)  # the service's access scope
            except UserNotAllowed:
                raise web.HTTPError(403, "the admin console is for JupyterHub admins") from None
        self._caller = caller
        self.current_user = caller

    def _admin(self) -> None:
        me = self.current_user
        if not isinstance(me, dict) or me.get("admin") is not True:
            raise web.HTTPError(403, "the admin console is for JupyterHub admins")

    def set_default_headers(self) -> None:
        self.set_header("Content-Security-Policy", CSP)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "no-referrer")
        self.set_header("Cache-Control", "no-store")

    def _show(self, status: int = 200, dry_text: str = "", dry: dict | None = None) -> None:
        c = self.console
        xsrf = self.xsrf_form_html()
        self.set_status(status)
        self.finish(render.page(
            render.profiles_section(c.loaded.offered, c.loaded.path, c.loaded.checksum, c.loaded.loaded_at),
            render.live_section(c.live.state),
            render.doctor_section(xsrf, c.doctor.result, c.doctor.wait(), c.doctor.running)
            if c.doctor else "<h2 id='doctor'>Doctor</h2><p>not configured for this page</p>",
            render.dry_run_section(xsrf, dry_text, dry)))

    @web.authenticated
    async def get(self, action: str | None = None):
        self._admin()
        self._show()

    @web.authenticated
    async def post(self, action: str | None = None):
        self._admin()
        if action == "doctor" and self.console.doctor is not None:
            await self.console.doctor.run()
            return self._show()
        if action != "dry-run":
            raise web.HTTPError(404)
        if len(self.request.body) > MAX_REQUEST:
            raise web.HTTPError(413, "the profiles file is too large")
        raw = (self.request.body_arguments.get("profiles") or [b""])[0]  # as sent: not stripped, controls kept
        if len(raw) > MAX_BODY:
            return self._show(413, "", {"error": f"the file is over {MAX_BODY // 1024} KiB; nothing was compared"})
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return self._show(400, "", {"error": f"the file is not UTF-8 (byte {e.start}); nothing was compared"})
        result = await self.console.dry_run(text)
        self._show(result.pop("status", 200), text, result)


class Console:
    """What the page shows: the loaded file, the live reader, the doctor, the dry-run worker and the hub's users."""

    def __init__(self, loaded: Loaded, live: LiveReader, doctor: Doctor | None, worker: Worker | None = None,
                 users: Callable[[], Any] | None = hub_users, activity_interval: int = DEFAULT_ACTIVITY_INTERVAL,
                 hub_namespace: str | None = None):
        self.loaded, self.live, self.doctor = loaded, live, doctor
        self.worker = worker or Worker()
        self.users, self.activity_interval, self.hub_namespace = users, activity_interval, hub_namespace

    async def dry_run(self, text: str) -> dict:
        try:
            result = await self.worker.run(dry_run, text, self.loaded.text, self.activity_interval,
                                           self.hub_namespace)
        except asyncio.TimeoutError:
            return {"error": f"the file took over {self.worker.timeout:.0f} s to read; nothing was compared"}
        except (BrokenProcessPool, MemoryError) as e:  # over the worker's memory: the worker is replaced
            why = "MemoryError" if isinstance(e, MemoryError) else "the worker stopped"
            return {"status": 413, "error": f"the file is too large to check: {why} (over "
                                            f"{self.worker.memory // 2**20} MiB once expanded); nothing was compared"}
        except Exception as e:  # noqa: BLE001 (a bug or an input the parser did not foresee): a 400, not a 500
            log.exception("the dry run failed")
            return {"status": 400, "error": f"the file could not be checked: {type(e).__name__}; nothing was compared"}
        if "diff" in result:
            new = result.pop("new")
            result["servers"], result["servers_note"] = None, "the hub's user list could not be read"
            if self.users is not None:
                try:
                    result["servers"] = d.servers_losing_profile(await self.users(), new)
                except Exception as e:  # noqa: BLE001 (the hub down or the scope missing): said, not guessed
                    result["servers_note"] = f"the hub's user list could not be read: {type(e).__name__}"
        return result

    async def refresh(self, every: float = 30.0) -> None:
        """The background loop: the live read and the file's version, every `every` s (at least 30)."""
        while True:
            await self.loaded.refresh(self.worker)
            self.live.cfg = self.loaded.cfg
            if self.live.reads is not None:
                await self.live.read_once()
            await asyncio.sleep(max(every, 30.0))


def make_app(console: Console, prefix: str, cookie_secret: bytes | None = None) -> web.Application:
    args = {"console": console}
    return web.Application([
        (prefix + r"oauth_callback", HubOAuthCallbackHandler),
        (prefix + r"(doctor|dry-run)", AdminPage, args),
        (prefix + r"?", AdminPage, args),
    ], cookie_secret=cookie_secret or os.urandom(32), xsrf_cookies=True)


def main(argv: list[str] | None = None) -> int:
    adopt_hub_api_url()  # HubOAuth reads $JUPYTERHUB_API_URL
    p = argparse.ArgumentParser(prog="gpuhub-admin-web", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profiles-file", required=True)
    p.add_argument("--hub-namespace", default="jhub")
    p.add_argument("--activity-interval", type=int, default=DEFAULT_ACTIVITY_INTERVAL)
    p.add_argument("--doctor-timeout", type=float, default=90.0)
    p.add_argument("--no-cluster", action="store_true", help="no live state and no doctor (no cluster)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    loaded = Loaded(a.profiles_file)
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10104"))
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpu-admin/")
    loop = ioloop.IOLoop.current()

    async def start() -> None:
        reads = None
        if not a.no_cluster:
            try:
                from jupyterhub_gpu.kubeio.clients import timeout_api_client

                reads = kube_reads(await timeout_api_client(), a.hub_namespace)
            except Exception as e:  # noqa: BLE001 (no kube config): the live state says unknown
                log.warning("no cluster for the live state: %s", e)
        live = LiveReader(loaded.cfg, reads, hub_namespace=a.hub_namespace)
        doctor = None if a.no_cluster else Doctor(
            [sys.executable, "-m", "jupyterhub_gpu.tools.cli", "doctor", a.profiles_file, "--hub-service-account",
             "self", "--hub-namespace", a.hub_namespace], timeout=a.doctor_timeout)
        console = Console(loaded, live, doctor, activity_interval=a.activity_interval, hub_namespace=a.hub_namespace)
        # loopback when the proxy reaches us there; a host name (z2jh: http://hub:10104) means all interfaces
        HTTPServer(make_app(console, prefix), max_body_size=MAX_REQUEST, xheaders=True).listen(url.port or 80,
                                                                                              listen_address(url))
        asyncio.ensure_future(console.refresh())
        LoopGuard().start()  # its stalls: logged (services/loopguard.py)

    loop.add_callback(start)
    loop.start()
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # the hub stops its managed services with SIGINT: a stop, not a crash
        from jupyterhub_gpu.services.stopped import exit_now

        exit_now()
