"""The I/O around accounting.py: read pods, their DRA claims and Kueue Workloads from the cluster and DCGM use from
Prometheus, and fold them with the stored lifetimes into one report (a dict the CLI prints as a table, CSV
or JSON). Synchronous (kubernetes + requests): the CLI and the collector loop are not on an event loop.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

import requests

from jupyterhub_gpu.cluster.dcgm_nodes import presence_query
from jupyterhub_gpu.cluster.dra_devices import pod_claim_names
from jupyterhub_gpu.contract import JOB_LABEL, KUEUE_GROUP, KUEUE_VERSION, PROFILE_LABEL
from jupyterhub_gpu.services.usage import accounting as acc
from jupyterhub_gpu.services.usage.rightsize import hints

log = logging.getLogger("gpuhub.usage")

#: The culler's counter of GPU-hours it reclaimed (services/culler/service.py).
RECLAIMED_METRIC = "gpuhub_culler_gpu_hours_reclaimed_total"


def pod_sources(cfg, hub_namespace: str) -> dict[str, str]:
    """namespace → label selector of the GPU pods the collector follows: servers in the hub's namespace, jobs'
    pods in each team's."""
    _, teams = acc.rules_and_teams(cfg)
    return {hub_namespace: PROFILE_LABEL, **{ns: JOB_LABEL for ns in sorted(teams) if ns != hub_namespace}}


def read_cluster(api_client, cfg, hub_namespace: str, now: datetime, timeout: float = 30,
                 positions: dict[str, str] | None = None) -> tuple[list[acc.Lifetime], list[dict[str, Any]]]:
    """(lifetimes of the GPU pods there now, the team namespaces' Workloads), as API JSON. `positions`, when
    given, gets each namespace's list resourceVersion: where the next cycle's watch (`pods_since`) starts."""
    from kubernetes import client

    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    rules, teams = acc.rules_and_teams(cfg)
    items: list[dict[str, Any]] = []
    workloads: list[dict[str, Any]] = []
    claims: dict[str, dict[str, dict[str, Any]]] = {}
    for ns, selector in pod_sources(cfg, hub_namespace).items():
        try:
            listed = _json(core.list_namespaced_pod(ns, label_selector=selector, _request_timeout=timeout,
                                                    _preload_content=False))
            items += listed["items"]
            if any(p.is_dra for p in cfg.pools.values()) and any(pod_claim_names(p) for p in listed["items"]):
                claims[ns] = claims_in(api_client, ns, timeout)
            if positions is not None:
                positions[ns] = listed["metadata"]["resourceVersion"]
            if ns in teams:
                workloads += custom.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, ns, "workloads",
                                                                  _request_timeout=timeout).get("items", [])
        except client.ApiException as e:
            if e.status != 404 or ns == hub_namespace:  # a team namespace not created yet holds nothing
                raise
    spot = acc.spot_profiles(cfg)
    lifetimes = [lt for p in items
                 if (lt := acc.lifetime_of(p, rules, teams, now, spot, claims.get(p["metadata"].get("namespace"))))]
    return lifetimes, workloads


def claims_in(api_client, namespace: str, timeout: float = 30) -> dict[str, dict[str, Any]]:
    """The namespace's ResourceClaims by name (one list, only where a followed pod has a claim): which devices
    each pod got. A refusal (an RBAC rendered before DRA, a cluster without resource.k8s.io/v1) costs only that
    detail, said in the log: the hours and $ never wait on it."""
    from kubernetes import client

    try:
        listed = _json(client.ResourceV1Api(api_client).list_namespaced_resource_claim(
            namespace, _request_timeout=timeout, _preload_content=False))
    except client.ApiException as e:
        log.warning("cannot list the ResourceClaims of %s (HTTP %s %s): the devices its pods got are not recorded",
                    namespace, e.status, e.reason)
        return {}
    return {c["metadata"]["name"]: c for c in listed.get("items") or []}


def pods_since(api_client, cfg, hub_namespace: str, positions: dict[str, str], now: datetime,
               wait_s: int = 1) -> list[acc.Lifetime]:
    """The started GPU pods that changed since each namespace's position (the last list's resourceVersion, kept
    in the store across restarts): one short watch per namespace, side by side, that replays the events since
    and ends after `wait_s`. A pod that started and went between two lists (or while the collector was down)
    is in it, with its end. Where the position is too old for the API server (410: its watch window, minutes),
    the pods of that gap are not known: said in the log, and the next list starts afresh."""
    from concurrent.futures import ThreadPoolExecutor

    rules, teams = acc.rules_and_teams(cfg)
    spot = acc.spot_profiles(cfg)
    sources = {ns: sel for ns, sel in pod_sources(cfg, hub_namespace).items() if positions.get(ns)}

    def watch(ns: str) -> list[dict[str, Any]]:
        return _events(api_client, ns, sources[ns], positions[ns], wait_s)

    with ThreadPoolExecutor(max_workers=min(8, len(sources) or 1)) as pool:
        pods = [p for got in pool.map(watch, sources) for p in got]
    return [lt for p in pods if (lt := acc.lifetime_of(p, rules, teams, now, spot)) is not None]


def _events(api_client, namespace: str, selector: str, since: str, wait_s: int) -> list[dict[str, Any]]:
    from kubernetes import client

    try:
        r = client.CoreV1Api(api_client).list_namespaced_pod(
            namespace, label_selector=selector, watch=True, resource_version=since, timeout_seconds=wait_s,
            allow_watch_bookmarks=False, _request_timeout=wait_s + 30, _preload_content=False)
        lines = r.data.splitlines()
    except client.ApiException as e:
        if e.status == 404:
            return []
        raise
    pods = []
    for line in lines:
        event = json.loads(line)
        if event.get("type") == "ERROR":
            log.warning("pod events of %s since resourceVersion %s are gone from the API server (%s): a GPU pod "
                        "that started and ended meanwhile is not in the store", namespace, since,
                        (event.get("object") or {}).get("message", "expired"))
            break
        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
            pods.append(event["object"])
    return pods


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
