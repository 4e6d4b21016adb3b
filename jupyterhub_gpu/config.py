"""The hub's whole jupyterhub-gpu wiring in one call, `configure(c)`: `jupyterhub_config.py`, z2jh's
`hub.extraConfig` (deploy/values.yaml) and the dev hub all call it, so each service's scopes and role are
written once (next to the service: services/jobs/hub.py, services/culler/__init__.py).

It merges into what the admin set before (other services and roles, the `user` role's scopes, servers'
environment, token scopes) and replaces only its own entries, so calling it twice is harmless.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Mapping
from urllib.parse import urlparse

from traitlets.config import LazyConfigValue

from jupyterhub_gpu.contract import (
    CULLER_SERVICE,
    ENV_CULLER_URL,
    ENV_HUB_API_URL,
    ENV_JOBS_URL,
    JOBS_SERVICE,
    NOTIFY_CULL_PATH,
    USAGE_COLLECTOR_SERVICE,
    USAGE_SERVICE,
)
from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.model.profiles_file import PROFILES_ENV, cached_profiles, profiles_path
from jupyterhub_gpu.model.validation import ProfilesError
from jupyterhub_gpu.services.admin.hub import SERVICE as ADMIN_SERVICE

#: The spawner; `c.JupyterHub.spawner_class = "gpu"` (the `jupyterhub.spawners` entry point) names it too.
SPAWNER_CLASS = "jupyterhub_gpu.hub.spawner.GPUSpawner"
#: Servers are pods: give them time to be scheduled onto a (possibly scaling-from-zero) GPU pool.
TIMEOUTS = {"start_timeout": 600, "http_timeout": 120}
#: JupyterHub's default scopes of a server's own token (the `server` role), to which gpu-jobs access is added.
SERVER_TOKEN_SCOPES = ["access:servers!server", "users:activity!user"]
SERVICES = (JOBS_SERVICE, CULLER_SERVICE, USAGE_SERVICE, USAGE_COLLECTOR_SERVICE, ADMIN_SERVICE)
#: Our versions of JupyterHub's home, spawn and spawn-pending pages (each extends JupyterHub's own).
HUB_PAGES = os.path.join(os.path.dirname(__file__), "hub", "templates", "pages")


def refuse_short_idle_timeouts(c, path: str, cfg: ProfilesConfig) -> None:
    """Stop the hub when a profile's idle_timeout is shorter than the activity interval this hub runs with
    (model/activity.py): the culler would stop open, busy servers."""
    from jupyterhub_gpu.model.activity import hub_activity_interval, idle_timeout_problems

    hub = c.JupyterHub.last_activity_interval if "last_activity_interval" in c.JupyterHub else None
    problems = idle_timeout_problems(cfg, hub_activity_interval(hub, _spawner_environment(c)))
    if problems:
        print(f"jupyterhub-gpu: refusing to start: {ProfilesError(problems, path)}", file=sys.stderr)
        raise SystemExit(2)


def load_or_exit(path: str | None = None) -> tuple[str, ProfilesConfig]:
    """Load the profiles file or stop the hub, listing every problem (a bad file must not half-start)."""
    path = path or profiles_path()
    if not path:
        print(f"jupyterhub-gpu: refusing to start: no profiles file; set ${PROFILES_ENV} to yours (check it with "
              "`gpuhub validate FILE`) or pass it to configure(c, profiles_file)", file=sys.stderr)
        raise SystemExit(2)
    path = str(path)
    try:
        return path, cached_profiles(path)
    except ProfilesError as e:
        print(f"jupyterhub-gpu: refusing to start: {e}\nFix the file, check it with `gpuhub validate {path}`, "
              "and start the hub again.", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as e:
        print(f"jupyterhub-gpu: refusing to start: cannot read profiles file {path!r}: {e.strerror}",
              file=sys.stderr)
        raise SystemExit(2) from None


def configure(c, profiles_file: str | None = None, *, services_host: str | None = None,
              ports: Mapping[str, int] | None = None, options: Mapping[str, Mapping[str, Any]] | None = None,
              environment: Mapping[str, Mapping[str, str]] | None = None, jobs_url_for_servers: str | None = None,
              spawner_class: str = SPAWNER_CLASS, env: Mapping[str, str] | None = None,
              usage: bool | None = None, admin: bool | None = None) -> tuple[str, ProfilesConfig]:
    """Wire GPUSpawner, the `gpu-jobs` service and the `gpu-culler` service into the config `c`.

    - `profiles_file`: default $GPUHUB_PROFILES; a bad file stops the hub with every problem listed.
    - `services_host`: where the proxy reaches both services (default loopback, or $GPUHUB_JOBS_SERVICE_URL /
      $GPUHUB_CULLER_URL); z2jh: `"hub"`, the hub pod's Service, and the services then listen on all interfaces.
    - `ports`, `options`, `environment`: per service name (`"gpu-jobs"`, `"gpu-culler"`): its port (default
      $GPUHUB_JOBS_PORT / $GPUHUB_CULLER_PORT, else 10101 / 10102), its options by command-line name (or
      `Class.trait`), e.g. `{"gpu-jobs": {"home-claim": "gpuhub-home", "max-timeout": "3d"}}`,
      and extra environment of its process (managed services get a clean one).
    - `jobs_url_for_servers`: where kernels reach gpu-jobs (default $GPUHUB_JOBS_PUBLIC_URL, else the
      servers' GPUHUB_JOBS_URL the admin set, else z2jh's `http://proxy-public/services/gpu-jobs/`).
    - `env`: the hub's environment to read (default os.environ).
    - `usage`: run the usage collector and the showback page (`gpu-usage-collector`, `gpu-usage`: services/
      usage/hub.py); default on unless $GPUHUB_USAGE is off/false/0/no. Off: both entries are removed.
    - `admin`: run the admins' console (`gpu-admin`: services/admin/hub.py); default on unless
      $GPUHUB_ADMIN_CONSOLE is off/false/0/no. Off: its entry and role are removed.
    Returns (profiles file path, the validated profiles).
    """
    from jupyterhub_gpu.hub.metrics import guard_loop
    from jupyterhub_gpu.services.culler import culler_service
    from jupyterhub_gpu.services.culler.banner import Announcement, warnings_file
    from jupyterhub_gpu.services.jobs import hub as jobs

    guard_loop()  # JupyterHub loads its config on its running loop: the hub's stalls at /hub/metrics from now on
    env = os.environ if env is None else env
    ports, options, environment = _per_service(ports, "ports"), _per_service(options, "options"), \
        _per_service(environment, "environment")
    path, cfg = load_or_exit(profiles_file)
    refuse_short_idle_timeouts(c, path, cfg)
    local_api = local_hub_api_url(c)
    if local_api:  # services in the hub's pod call the hub where it listens, not through its Service
        environment = {name: {ENV_HUB_API_URL: local_api, **environment.get(name, {})} for name in SERVICES}

    c.JupyterHub.spawner_class = spawner_class
    c.GPUSpawner.profiles_file = path
    for name, value in TIMEOUTS.items():
        if name not in c.GPUSpawner:  # the admin's own value wins
            c.GPUSpawner[name] = value

    jobs_entry = jobs.jobs_service(path, port=ports.get(JOBS_SERVICE), host=services_host,
                                   options=options.get(JOBS_SERVICE), environment=environment.get(JOBS_SERVICE),
                                   env=env)
    warnings = warnings_file()
    # new cull warnings go to gpu-jobs, which e-mails / posts them for users who opted in (services/notify)
    notify_url = f"{jobs_entry[0]['url'].rstrip('/')}/services/{JOBS_SERVICE}/{NOTIFY_CULL_PATH}"
    culler_entry = culler_service(path, port=ports.get(CULLER_SERVICE), host=services_host, env=env,
                                  options={"warnings-file": str(warnings), "notify-url": notify_url,
                                           **options.get(CULLER_SERVICE, {})},
                                  environment=environment.get(CULLER_SERVICE))
    for service, role in (jobs_entry, culler_entry):
        c.JupyterHub.services = _replace(_current(c.JupyterHub, "services"), service)
        c.JupyterHub.load_roles = _replace(_current(c.JupyterHub, "load_roles"), role)
    _configure_usage(c, path, usage, services_host, ports, options, environment, env)
    _configure_admin(c, path, admin, services_host, ports, options, environment, env)
    # every user may call gpu-jobs with their own token, and so may their server's token (the kernel's)
    c.JupyterHub.load_roles = _with_user_access(_current(c.JupyterHub, "load_roles"), jobs.ACCESS)
    c.Spawner.server_token_scopes = _with_scope(c.Spawner["server_token_scopes"] if "server_token_scopes"
                                                in c.Spawner else None, jobs.ACCESS)
    # where kernels reach gpu-jobs: this call's argument, else $GPUHUB_JOBS_PUBLIC_URL, else what the admin put
    # in the servers' environment (z2jh: singleuser.extraEnv), else the proxy-public default
    servers_env = _spawner_environment(c)
    servers_env[ENV_JOBS_URL] = (jobs_url_for_servers or env.get(jobs.ENV_URL_FOR_SERVERS)
                                 or servers_env.get(ENV_JOBS_URL) or jobs.DEFAULT_URL_FOR_SERVERS)
    if services_host and not servers_env.get(ENV_CULLER_URL):
        # z2jh: the culler listens in the hub pod (the `hub` Service); the servers' default, "beside gpu-jobs",
        # is gpu-jobs' own Service there, which has no culler
        servers_env[ENV_CULLER_URL] = f"{culler_entry[0]['url'].rstrip('/')}/services/{CULLER_SERVICE}/"
    c.GPUSpawner.environment = servers_env
    # each user sees their cull warnings as the banner of the hub's pages
    template_vars = c.JupyterHub.template_vars if isinstance(c.JupyterHub.template_vars, dict) else {}
    c.JupyterHub.template_vars = {**template_vars, "announcement": Announcement(warnings)}
    # the hub's pages that say why a start failed (after a reload too) and keep the spawn page honest
    paths = _current(c.JupyterHub, "template_paths")
    c.JupyterHub.template_paths = [p for p in paths if p != HUB_PAGES] + [HUB_PAGES]
    exit_on_conflicts(c)
    return path, cfg


def local_hub_api_url(c) -> str | None:
    """The hub API where the hub listens, for the services it starts beside itself, when JupyterHub would hand
    them another address: z2jh sets `hub_connect_url` to the hub Service (http://hub:8081) and binds the hub to
    all interfaces (`hub_bind_url` http://:8081). None when no connect URL is set (the services get the hub's own)."""
    hub = c.JupyterHub
    if not hub.get("hub_connect_url"):
        return None
    bind = urlparse(hub.get("hub_bind_url") or f"http://{hub.get('hub_ip', '')}:{hub.get('hub_port', 8081)}")
    host = bind.hostname or ""
    host = "127.0.0.1" if host in ("", "0.0.0.0") else "[::1]" if host == "::" else host
    base = "/" + str(hub.get("base_url", "/")).strip("/")
    return f"{bind.scheme}://{host}:{bind.port or 8081}{base.rstrip('/')}/hub/api"


def _configure_usage(c, path: str, usage: bool | None, host: str | None, ports, options, environment, env) -> None:
    """The usage collector and page (services/usage/hub.py), or neither; users may open their own page."""
    from jupyterhub_gpu.services.usage import hub as usage_hub

    names = (USAGE_SERVICE, USAGE_COLLECTOR_SERVICE)
    services = [s for s in _current(c.JupyterHub, "services") if s.get("name") not in names]
    if not usage_hub.usage_enabled(usage, env):
        c.JupyterHub.services = services
        return
    for entry in usage_hub.usage_services(path, env=env, host=host, ports=ports, options=options,
                                          environment=environment):
        services = _replace(services, entry)
    c.JupyterHub.services = services
    c.JupyterHub.load_roles = _with_user_access(_current(c.JupyterHub, "load_roles"), usage_hub.ACCESS)


def _configure_admin(c, path: str, admin: bool | None, host: str | None, ports, options, environment,
                     env) -> None:
    """The admins' console (services/admin/hub.py) and its role, or neither; JupyterHub's admin role has
    `access:services`, and no other role is given access to it."""
    from jupyterhub_gpu.model.activity import hub_activity_interval
    from jupyterhub_gpu.services.admin import hub as admin_hub

    # its entry last, as the usage services' (calling configure twice gives the same order); its role in place
    services = [s for s in _current(c.JupyterHub, "services") if s.get("name") != ADMIN_SERVICE]
    roles = _current(c.JupyterHub, "load_roles")
    if not admin_hub.admin_enabled(admin, env):
        roles = [r for r in roles if r.get("name") != admin_hub.ROLE]
    else:
        last = c.JupyterHub.last_activity_interval if "last_activity_interval" in c.JupyterHub else None
        service, role = admin_hub.admin_service(
            path, env=env, host=host, port=ports.get(ADMIN_SERVICE), options=options.get(ADMIN_SERVICE),
            environment=environment.get(ADMIN_SERVICE),
            activity_interval=hub_activity_interval(last, _spawner_environment(c)))
        services, roles = _replace(services, service), _replace(roles, role)
    c.JupyterHub.services = services
    c.JupyterHub.load_roles = roles


def _per_service(value: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    """A per-service mapping, refusing names of services this package does not configure (typos)."""
    value = dict(value or {})
    unknown = sorted(set(value) - set(SERVICES))
    if unknown:
        raise ValueError(f"configure({what}=...): unknown service(s) {', '.join(unknown)}; "
                         f"the services are {', '.join(SERVICES)}")
    return value


def _current(section, name: str) -> list:
    """A list setting as set so far; unset (or appended to lazily, as z2jh's config does) reads right too."""
    value = section[name] if name in section else []
    if isinstance(value, LazyConfigValue):
        value = value.get_value([])
    return list(value) if isinstance(value, (list, tuple)) else []


def _replace(entries: list[dict], entry: dict) -> list[dict]:
    """`entries` with `entry` in place of the one of the same name (or appended)."""
    out = [e for e in entries if e.get("name") != entry["name"]]
    at = next((i for i, e in enumerate(entries) if e.get("name") == entry["name"]), len(out))
    return out[:at] + [entry] + out[at:]


def _with_user_access(roles: list[dict], scope: str) -> list[dict]:
    """The `user` role (the admin's, or JupyterHub's default `self`) with `scope` added once."""
    user = next((r for r in roles if r.get("name") == "user"), {"name": "user", "scopes": ["self"]})
    scopes = list(user.get("scopes") or [])
    return _replace(roles, {**user, "scopes": scopes + [scope] * (scope not in scopes)})


def _with_scope(token_scopes, scope: str):
    """Server token scopes (a list, a callable, or unset: JupyterHub's `server` role) plus `scope`."""
    if callable(token_scopes):
        if getattr(token_scopes, "_gpuhub_adds", None) == scope:
            return token_scopes
        original = token_scopes

        def with_scope(spawner):
            scopes = list(original(spawner))
            return scopes + [scope] * (scope not in scopes)

        with_scope._gpuhub_adds = scope
        return with_scope
    scopes = list(token_scopes) if isinstance(token_scopes, (list, tuple)) else list(SERVER_TOKEN_SCOPES)
    return scopes + [scope] * (scope not in scopes)


def _spawner_environment(c) -> dict:
    """Servers' environment as GPUSpawner would get it: traitlets lets a subclass's section replace (not
    merge) its parents' dict, so the Spawner/KubeSpawner values (z2jh's singleuser.extraEnv) are merged in."""
    env: dict = {}
    for section in ("Spawner", "KubeSpawner", "GPUSpawner"):
        value = c[section]["environment"] if "environment" in c[section] else None
        if isinstance(value, LazyConfigValue):
            value = value.get_value({})
        if isinstance(value, dict):
            env.update(value)
    return env


def exit_on_conflicts(c) -> None:
    """Stop the hub when a profiles file and an admin's KubeSpawner `profile_list` are both configured: the
    file makes the profile list, so the admin's list would be shown and then every choice refused."""
    from jupyterhub_gpu.hub.spawner import profile_list_conflict

    sections = [c[name] for name in ("KubeSpawner", "GPUSpawner") if name in c]
    profile_list = next((s["profile_list"] for s in reversed(sections) if "profile_list" in s), None)
    profiles_file = c["GPUSpawner"].get("profiles_file") if "GPUSpawner" in c else None
    message = profile_list_conflict(profiles_file or profiles_path(), profile_list)
    if message:
        print(f"jupyterhub-gpu: refusing to start: {message}", file=sys.stderr)
        raise SystemExit(2)
