"""Who may read a service's Prometheus port (shared by the usage collector and gpu-jobs): its series name users and
their jobs, so anyone who reaches the port must not read them. With a token (an environment variable, or a file: a
mounted Secret) the port serves all interfaces and answers only `Authorization: Bearer <token>` (Prometheus'
`authorization.credentials_file`); without one it listens on loopback only (`kubectl port-forward`)."""
from __future__ import annotations

import hmac
import os

#: Shortest token accepted (a guessable one is no gate).
MIN_TOKEN = 16
LOOPBACK = "127.0.0.1"


def metrics_token(env_name: str, env=os.environ, token_file: str | None = None) -> str | None:
    """The configured token (the file's first line, else `env_name` in the environment), or None; a short one is
    refused."""
    token = None
    if token_file:
        with open(token_file, encoding="utf-8") as f:
            token = f.readline().strip()
    token = token or (env.get(env_name) or "").strip() or None
    if token is not None and len(token) < MIN_TOKEN:
        raise ValueError(f"the /metrics token must have at least {MIN_TOKEN} characters")
    return token


def allowed(header: str | None, token: str | None) -> bool:
    """Whether an `Authorization` header carries the token (constant-time); no token: loopback decides."""
    if token is None:
        return True
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())
