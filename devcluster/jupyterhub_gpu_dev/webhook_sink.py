"""A webhook receiver on loopback (SIMULATOR side: it stands in for Slack's or Teams' incoming-webhook endpoint):
the notification tests and the day replay record what gpu-jobs delivered, and how often it tried."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class WebhookSink:
    """An HTTP server on 127.0.0.1 recording (path, JSON body) of each POST; the first `fail_first` POSTs
    (of each path) are answered `fail_status`."""

    def __init__(self, fail_first: int = 0, fail_status: int = 503):
        self.received: list[tuple[str, dict]] = []
        self.headers: list[dict[str, str]] = []  # of the received posts
        self.attempts: dict[str, list[float]] = {}
        self.fail_first, self.fail_status = fail_first, fail_status
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                tries = sink.attempts.setdefault(self.path, [])
                tries.append(time.monotonic())
                if len(tries) <= sink.fail_first:
                    self.send_response(sink.fail_status)
                    self.end_headers()
                    self.wfile.write(b"try again")
                    return
                sink.received.append((self.path, json.loads(body)))
                sink.headers.append(dict(self.headers))
                self.send_response(202)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "WebhookSink":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
