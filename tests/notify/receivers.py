"""Local receivers for notification tests: a real SMTP server (aiosmtpd) and an HTTP webhook endpoint
(jupyterhub_gpu_dev.webhook_sink, shared with the day replay), each in its own thread, recording what arrives."""
from __future__ import annotations

import email
import email.policy
import socket

from aiosmtpd.controller import Controller

from jupyterhub_gpu_dev.webhook_sink import WebhookSink  # noqa: F401 (the tests import it from here)


class SmtpSink:
    """An SMTP server on 127.0.0.1 (free port) keeping each message as an `email.message.EmailMessage`."""

    def __init__(self):
        self.messages: list = []
        self.envelopes: list[tuple[str, list[str]]] = []
        sink = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                sink.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
                sink.messages.append(email.message_from_bytes(envelope.original_content or envelope.content,
                                                              policy=email.policy.default))
                return "250 OK"

        with socket.socket() as s:  # the Controller checks its server by connecting: it needs a real port
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> "SmtpSink":
        self.controller.start()
        return self

    def __exit__(self, *exc) -> None:
        self.controller.stop()
