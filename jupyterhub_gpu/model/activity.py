"""A profile's `idle_timeout` against how often JupyterHub learns of activity (pure).

jupyterhub-singleuser reports a server's activity every $JUPYTERHUB_ACTIVITY_INTERVAL seconds and the hub
polls the proxy every `JupyterHub.last_activity_interval` (both 300 s by default). An idle timeout shorter
than that culls a server whose tab is open and busy, before its activity could ever be seen.
"""
from __future__ import annotations

from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.model.validation import Problem

#: JupyterHub's default for both intervals (seconds).
DEFAULT_ACTIVITY_INTERVAL = 300
#: The servers' variable that sets jupyterhub-singleuser's activity report interval.
ACTIVITY_INTERVAL_ENV = "JUPYTERHUB_ACTIVITY_INTERVAL"


def _duration(seconds: int) -> str:
    return f"{seconds} s" if seconds < 120 else f"{seconds / 60:g} min"


def idle_timeout_problems(cfg: ProfilesConfig, interval: int = DEFAULT_ACTIVITY_INTERVAL) -> list[Problem]:
    """One problem per profile whose idle_timeout is shorter than the activity report `interval` (s)."""
    out = []
    for i, p in enumerate(cfg.profiles):
        if p.idle_timeout is not None and p.idle_timeout < interval:
            out.append(Problem(
                f"profiles[{i}].idle_timeout",
                f"{_duration(p.idle_timeout)} is shorter than JupyterHub's activity report interval "
                f"({_duration(interval)}): a server whose tab is open and busy would be stopped before the hub "
                f"could see its activity; valid: at least {_duration(interval)} (or shorten the interval: "
                f"${ACTIVITY_INTERVAL_ENV} for the servers and JupyterHub.last_activity_interval)"))
    return out


def hub_activity_interval(last_activity_interval: int | None, servers_env: dict | None) -> int:
    """The slower of the hub's proxy poll and the servers' report interval (JupyterHub's defaults when unset)."""
    hub = int(last_activity_interval) if last_activity_interval else DEFAULT_ACTIVITY_INTERVAL
    try:
        server = int((servers_env or {}).get(ACTIVITY_INTERVAL_ENV) or DEFAULT_ACTIVITY_INTERVAL)
    except (TypeError, ValueError):  # a template or junk: JupyterHub would fall back to its default
        server = DEFAULT_ACTIVITY_INTERVAL
    return max(hub, server)
