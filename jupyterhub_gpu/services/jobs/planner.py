"""Parse and plan a submission off gpu-jobs' event loop, in a worker process.

Parsing a 4 MiB body of tiny JSON values takes a quarter of a second of C code that holds the GIL (a
thread would not free the loop), and planning it (checks, stripping outputs, gzip) as much again; on
the service's one loop that is a stall for every user. A worker process takes the raw body and the
caller's counts and returns the manifests or the `JobRequestError` (pickled back as it was raised).
The worker gets the profiles and settings once, when it starts; a crashed worker is replaced.
"""
from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.services.jobs import idempotency, limits
from jupyterhub_gpu.services.jobs.submission import ServiceSettings, plan_submission

_worker: dict[str, Any] = {}


def _start(cfg: ProfilesConfig, settings: ServiceSettings) -> None:
    _worker.update(cfg=cfg, settings=settings)


def plan_raw(raw: bytes, user: str, groups: list[str], active: dict[str, int],
             cfg: ProfilesConfig | None = None, settings: ServiceSettings | None = None,
             submission: str | None = None) -> tuple[list[dict], Any]:
    """(the manifests, the requested profile) for the raw body (pure); `active`: the user's unfinished jobs
    per profile; `submission`: an Idempotency-Key's id (idempotency.py). Runs in the worker, with the
    worker's profiles unless `cfg` is given."""
    body = limits.parse_body(raw)
    slug = body.get("profile") if isinstance(body, dict) else None
    on_profile = active.get(slug, 0) if isinstance(slug, str) else 0
    objs = plan_submission(cfg or _worker["cfg"], user, groups, body, on_profile, settings or _worker["settings"],
                           active_total=sum(active.values()), submission=submission)
    return objs, slug


def digest_raw(raw: bytes) -> str:
    """A retried body's digest (idempotency.body_digest), parsed within the same bounds as a submission."""
    return idempotency.body_digest(limits.parse_body(raw))


class Planner:
    """The worker pool (`workers` processes, started on first use or by `warm`)."""

    def __init__(self, cfg: ProfilesConfig, settings: ServiceSettings, workers: int = 1):
        self.cfg, self.settings, self.workers = cfg, settings, workers
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:  # spawn: a fork of a process with a running loop and threads is unsafe
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_start, initargs=(self.cfg, self.settings))
        return self._pool

    async def warm(self) -> None:
        """Start the workers now (their imports take a second), not at the first submission."""
        await asyncio.gather(*(asyncio.get_running_loop().run_in_executor(self._executor(), _start, self.cfg,
                                                                          self.settings)
                               for _ in range(self.workers)))

    async def plan(self, raw: bytes, user: str, groups: list[str], active: dict[str, int],
                   submission: str | None = None) -> tuple[list[dict], Any]:
        return await self._run(plan_raw, raw, user, groups, active, None, None, submission)

    async def digest(self, raw: bytes) -> str:
        return await self._run(digest_raw, raw)

    async def _run(self, fn, *args):
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor(), fn, *args)
        except BrokenProcessPool:  # the worker died (e.g. out of memory): a fresh one next time
            self.close()
            raise

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def stop_now(self) -> None:
        """The hub stops gpu-jobs: end the workers now (they hold nothing), so that exiting without the
        interpreter's teardown (services/stopped.py) leaves no worker behind waiting for its next body."""
        processes = list((getattr(self._pool, "_processes", None) or {}).values())  # CPython's pool internals
        self.close()
        for p in processes:
            p.terminate()
        for p in processes:
            p.join(2)
