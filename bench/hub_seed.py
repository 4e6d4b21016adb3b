"""Seed a JupyterHub database with running servers before the hub starts, as a hub restored from a backup
would have it; for benchmarks whose servers are not processes (bench/cull_cycle.py's NoProcessSpawner).

`seed(db_url, servers, target)` writes, with `jupyterhub.orm` on a new database: the hub's default roles,
and per `SeededServer` a user (role `user`, its `last_activity`), its default server's `orm.Spawner`
(`state` {}, `started`, `last_activity`, `user_options`, its OAuth client) and `orm.Server` row (the
spawner's `server_id`, so the hub treats it as running) pointing at `target` ("http://127.0.0.1:PORT").

What the hub then does at start (jupyterhub/app.py `init_spawners`, `proxy.check_routes`): for every
spawner with a server it calls `poll()` (None: running), `get_url()` (the row's URL) and waits for the URL
to answer HTTP (`target` must answer GET .../api), then adds the missing proxy route of each. With
`init_spawners_timeout = -1` "JupyterHub is now running" comes after all of that.
"""
from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse

from jupyterhub import orm, roles
from jupyterhub.utils import url_escape_path

#: The hub config lines every bench hub shares: loopback only, its ports, proxy, database and secret (format
#: with port, hub_port, proxy_api, proxy_token, chp, state, secret); nothing is ever spawned for real.
LOOPBACK_HUB = '''c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api}"
c.ConfigurableHTTPProxy.auth_token = "{proxy_token}"
c.ConfigurableHTTPProxy.command = [{chp!r}]
c.JupyterHub.db_url = "sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret = bytes.fromhex("{secret}")
c.JupyterHub.authenticator_class = "null"
c.JupyterHub.authenticate_prometheus = False
'''


def stop_hub(proc: subprocess.Popen, state: Path, keep: bool = False) -> None:
    """End a bench hub started in its own process group (its proxy with it); its state folder removed
    unless `keep`."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    if not keep:
        shutil.rmtree(state, ignore_errors=True)


def _new_session(db_url: str):
    """A session on a new hub database with the hub's default roles."""
    logging.disable(logging.INFO)  # alembic's lines about stamping the new database, per run
    try:
        session = orm.new_session_factory(db_url)()
    finally:
        logging.disable(logging.NOTSET)
    for spec in roles.get_default_roles():
        roles.create_role(session, spec, commit=False)
    session.commit()
    return session


@dataclass
class SeededServer:
    user: str
    last_activity: datetime  # naive UTC, as the hub stores times
    started: datetime
    user_options: dict = field(default_factory=dict)


def seed(db_url: str, servers: list[SeededServer], target: str) -> int:
    """Write `servers` into the new database at `db_url`; returns the number of running servers written."""
    url = urlparse(target)
    session = _new_session(db_url)
    try:
        user_role = orm.Role.find(session, "user")
        for s in servers:
            prefix = f"/user/{url_escape_path(s.user)}/"
            user = orm.User(name=s.user, last_activity=s.last_activity, created=s.started)
            user.roles.append(user_role)
            client = orm.OAuthClient(identifier=f"jupyterhub-user-{url_escape_path(s.user)}",
                                     secret=secrets.token_hex(16), redirect_uri=f"{prefix}oauth_callback",
                                     description=f"Server at {prefix}")
            server = orm.Server(proto=url.scheme, ip=url.hostname, port=url.port, base_url=prefix,
                                cookie_name=f"jupyterhub-user-{url_escape_path(s.user)}")
            spawner = orm.Spawner(name="", user=user, server=server, state={}, started=s.started,
                                  last_activity=s.last_activity, user_options=s.user_options,
                                  oauth_client=client)
            session.add_all([user, client, server, spawner])
        session.commit()
        return session.query(orm.Spawner).filter(orm.Spawner.server_id.isnot(None)).count()
    finally:
        session.close()
        session.get_bind().dispose()


def seed_users(db_url: str, names: list[str], groups: list[str] = ()) -> dict[str, dict[str, str]]:
    """Write users WITHOUT servers (role `user`, members of `groups`) into the new database at `db_url`, each
    with an API token of their own (the user's own permissions; a generated token, checked with one hash
    round as the hub's own are); returns {name: {"token": ..., "cookie_id": ...}}, so that a load driver can
    act as every user without logging in: the token for the REST API, the cookie id for the hub's pages
    (which take no token: a login cookie signed with the hub's cookie_secret, `tornado.web.create_signed_value`)."""
    session = _new_session(db_url)
    try:
        user_role = orm.Role.find(session, "user")
        group_rows = [orm.Group(name=g) for g in groups]
        session.add_all(group_rows)
        if not session.query(orm.OAuthClient).filter_by(identifier="jupyterhub").first():
            session.add(orm.OAuthClient(identifier="jupyterhub"))  # tokens' client; the hub updates it at start
        users = []
        for name in names:
            user = orm.User(name=name)
            user.roles.append(user_role)
            user.groups.extend(group_rows)
            users.append(user)
        session.add_all(users)
        session.commit()
        return {u.name: {"token": orm.APIToken.new(user=u, scopes=["inherit"], note="bench"), "cookie_id": u.cookie_id}
                for u in users}
    finally:
        session.close()
        session.get_bind().dispose()
