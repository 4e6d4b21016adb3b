"""The collector's `/metrics`, for Prometheus only: its series name every user with their GPU-hours and $,
so anyone who reaches the port must not read them. With a token (`$GPUHUB_USAGE_METRICS_TOKEN`, or the file
`--metrics-token-file` names: a mounted Secret) it serves all interfaces and answers only a request carrying
`Authorization: Bearer <token>` (Prometheus' `authorization.credentials_file`); without one it listens on
loopback only (a Prometheus in the hub pod, or `kubectl port-forward`)."""
from __future__ import annotations

import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from jupyterhub_gpu.services import metrics_auth
from jupyterhub_gpu.services.metrics_auth import allowed

ENV_TOKEN = "GPUHUB_USAGE_METRICS_TOKEN"
log = logging.getLogger("gpuhub.usage")


def metrics_token(env=os.environ, token_file: str | None = None) -> str | None:
    """The collector's token: the file's first line, else $GPUHUB_USAGE_METRICS_TOKEN (metrics_auth's rule)."""
    return metrics_auth.metrics_token(ENV_TOKEN, env, token_file)


def serve_metrics(registry: CollectorRegistry, port: int, token: str | None,
                  address: str | None = None) -> ThreadingHTTPServer:
    """Start `/metrics` in a daemon thread; `address` defaults to all interfaces with a token, loopback without."""
    host = address if address is not None else ("" if token else metrics_auth.LOOPBACK)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
            elif not allowed(self.headers.get("Authorization"), token):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Bearer realm="gpuhub-usage"')
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, *args):  # no access log line per scrape
            return

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    if token is None:
        log.warning("/metrics on loopback only: set $%s (and give Prometheus the token) to serve it to the "
                    "cluster", ENV_TOKEN)
    return server
