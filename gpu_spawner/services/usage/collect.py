"""The I/O around accounting.py: read pods and Kueue Workloads from the cluster and DCGM use from
Prometheus, and fold them with the stored lifetimes into one report (a dict the CLI prints as a table, CSV
or JSON). Synchronous (kubernetes + requests): the CLI and the collector loop are not on an event loop.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import requests

from gpu_spawner.cluster.dcgm_nodes import presence_query
from gpu_spawner.contract import JOB_LABEL, KUEUE_GROUP, KUEUE_VERSION, PROFILE_LABEL
from gpu_spawner.services.usage import accounting as acc
from gpu_spawner.services.usage.rightsize import hints

#: The culler's counter of GPU-hours it reclaimed (services/culler/service.py).
RECLAIMED_METRIC = "gpuhub_culler_gpu_hours_reclaimed_total"


def read_cluster(api_client, cfg, hub_namespace: str, now: datetime,
                 timeout: float = 30) -> tuple[list[acc.Lifetime], list[dict[str, Any]]]:
    """(lifetimes of the GPU pods there now, the team namespaces' Workloads), as API JSON."""
    from kubernetes import client

    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    rules, teams = acc.rules_and_teams(cfg)
    pods = core.list_namespaced_pod(hub_namespace, label_selector=PROFILE_LABEL, _request_timeout=timeout,
                                    _preload_content=False)
    items = _json(pods)["items"]
    workloads: list[dict[str, Any]] = []
    for ns in sorted(teams):
        try:
            items += _json(core.list_namespaced_pod(ns, label_selector=JOB_LABEL, _request_timeout=timeout,
                                                    _preload_content=False))["items"]
            workloads += custom.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, ns, "workloads",
                                                              _request_timeout=timeout).get("items", [])
        except client.ApiException as e:
            if e.status != 404:  # a team namespace not created yet holds nothing (gpuhub doctor says so)
                raise
    spot = acc.spot_profiles(cfg)
    lifetimes = [lt for p in items if (lt := acc.lifetime_of(p, rules, teams, now, spot)) is not None]
    return lifetimes, workloads


def node_names(api_client, timeout: float = 30) -> set[str]:
    """The nodes there now: a spot pod that vanished with its node was evicted (accounting.close_missing)."""
    from kubernetes import client

    nodes = client.CoreV1Api(api_client).list_node(_request_timeout=timeout, _preload_content=False)
    return {n["metadata"]["name"] for n in _json(nodes)["items"]}


def _json(response) -> dict[str, Any]:
    return json.loads(response.data)


def prometheus_query(url: str, query: str, at: datetime, timeout: float = 30) -> list[dict[str, Any]]:
    """An instant query's vector; raises on an error answer (a report must not pretend zero use)."""
    r = requests.get(f"{url.rstrip('/')}/api/v1/query", params={"query": query, "time": at.timestamp()},
                     timeout=timeout)
    r.raise_for_status()
    body = r.json()
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus: {body.get('error') or body}")
    return body["data"]["result"]


def used_from_prometheus(url: str, since: datetime, until: datetime,
                         scrape_interval: float) -> dict[tuple[str, str], acc.PodUse]:
    window = max(int((until - since).total_seconds()), 1)
    # series that name a node but no pod (AKS's managed exporter): their parts only when there are any
    step = scrape_interval if prometheus_query(url, presence_query(window), until) else None
    return acc.parse_used(prometheus_query(url, acc.used_query(window, step), until), scrape_interval)


def reclaimed_from_prometheus(url: str, since: datetime, until: datetime) -> float | None:
    window = max(int((until - since).total_seconds()), 1)
    result = prometheus_query(url, f"sum(increase({RECLAIMED_METRIC}[{window}s]))", until)
    return float(result[0]["value"][1]) if result else None


def report(lifetimes: list[acc.Lifetime], workloads: list[dict[str, Any]], since: datetime, until: datetime,
           by: str, used: dict[tuple[str, str], acc.PodUse] | None, reclaimed: float | None,
           cfg=None) -> dict[str, Any]:
    """Everything `gpuhub report` prints (pure); right-sizing hints need `cfg` and DCGM use."""

    shared = acc.shared_profiles(acc.rules_and_teams(cfg)[0]) if cfg is not None else frozenset()
    rows = acc.aggregate(lifetimes, since, until, by, used, shared)
    costs = {slug: r.hourly_cost for slug, r in acc.rules_and_teams(cfg)[0].items()} if cfg is not None and used \
        else None
    total = acc.Row("total", use_known=used is not None)
    for r in rows:
        total.gpu_hours_held += r.gpu_hours_held
        total.gpu_hours_shared += r.gpu_hours_shared
        total.gpu_hours_used += r.gpu_hours_used
        total.cost += r.cost
        total.pods += r.pods
        total.spot_evictions += r.spot_evictions
        total.preemptions += r.preemptions
        if r.peak_memory_mib is not None:
            total.peak_memory_mib = max(total.peak_memory_mib or 0.0, r.peak_memory_mib)
    return {"since": since.isoformat(), "until": until.isoformat(), "by": by,
            "gpu_use_known": used is not None,
            "rows": [r.as_dict() for r in rows], "total": total.as_dict(),
            "queue_wait_s": acc.percentiles(acc.queue_waits(workloads, since, until)),
            "evictions": acc.evictions(workloads),  # Kueue's, of jobs' Workloads, by reason ('Preempted', ...)
            "spot_evictions": total.spot_evictions, "pod_preemptions": total.preemptions,
            "culler_gpu_hours_reclaimed": reclaimed,
            "hints": [h.text for h in hints(lifetimes, used, cfg, costs, since, until)] if costs else []}


def all_lifetimes(live: list[acc.Lifetime], store, since: datetime | None = None, until: datetime | None = None,
                  user: str | None = None, team: str | None = None) -> list[acc.Lifetime]:
    """The stored finished lifetimes and the live ones (live wins for a uid in both). `store`: a UsageStore
    or a live.UsageReader (or None); with a range only its rows are read (an index range, `store.query`),
    and `user` / `team` narrow both."""
    out = {lt.uid: lt for lt in (store.finished(since, until, user, team) if store else [])}
    out.update({lt.uid: lt for lt in live
                if (user is None or lt.user == user) and (team is None or lt.team == team)})
    return list(out.values())
