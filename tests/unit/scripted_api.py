"""A scripted Kubernetes API on loopback (aiohttp) for the hub's informer tests: the real kubernetes_asyncio
client talks HTTP to it, so lists, watches, timeouts and refusals go through the client's own code."""
from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

from aiohttp import web
from kubernetes_asyncio import client

from jupyterhub_gpu.kubeio.clients import TimeoutApiClient


@asynccontextmanager
async def scripted_api(routes: dict):
    """Serve GET `routes` (path → aiohttp handler) and yield an ApiClient pointed at them."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    api_client = TimeoutApiClient(cfg, request_timeout=1)
    try:
        yield api_client
    finally:
        await api_client.close()
        await runner.cleanup()


async def until(check, timeout: float = 5.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
