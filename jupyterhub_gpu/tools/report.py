"""`gpuhub report`: GPU showback over a time range from the live cluster, Prometheus and the collector's
store (services/usage). Table, CSV or JSON on stdout."""
from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone
from typing import Any

from jupyterhub_gpu.services.usage.accounting import GROUPINGS

FORMATS = ("table", "csv", "json")
COLUMNS = ("key", "gpu_hours_held", "gpu_hours_used", "utilisation_pct", "cost", "pods", "peak_memory_mib",
           "gpu_hours_shared", "evidence", "spot_evictions", "preemptions")
MAX_RANGE = timedelta(days=400)


class ReportError(ValueError):
    """Bad input (exit 2)."""


def add_arguments(p) -> None:
    p.add_argument("file", help="the profiles file (prices, GPUs per profile, teams)")
    p.add_argument("--since", help="how far back, e.g. 7d, 12h (default 7d; with --suggest-warm 28d)")
    p.add_argument("--by", choices=GROUPINGS, default="user")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--kubeconfig", help="default: $KUBECONFIG, ~/.kube/config, or in-cluster")
    p.add_argument("--hub-namespace", default="jhub", help="where server pods run (default jhub)")
    p.add_argument("--prometheus-url", help="Prometheus with the DCGM exporter's series; without it GPU "
                                            "use is reported as unknown, never as 0")
    p.add_argument("--scrape-interval", type=float, default=30.0,
                   help="Prometheus' scrape interval for the DCGM exporter, seconds (default 30)")
    p.add_argument("--store", help="the usage collector's directory (finished pods' lifetimes; read only)")
    p.add_argument("--user", help="only this user's pods (the store reads only their rows of the range)")
    p.add_argument("--team", help="only this team's jobs (the store reads only its rows of the range)")
    p.add_argument("--suggest-warm", action="store_true",
                   help="instead of the showback: per autoscaled GPU pool at min_nodes 0, a `warm:` schedule to "
                        "paste from the servers' starts in --store (weekday and hour in the pool's time zone), "
                        "with the node-hours it costs and the starts it meets with a ready node")
    p.add_argument("--min-starts", type=float, default=0.5,
                   help="with --suggest-warm: mean starts per weekday-hour that make the hour warm (default 0.5)")
    p.add_argument("--lead", type=int, default=15,
                   help="with --suggest-warm: minutes warm before the first busy hour (default 15, 0..120)")


#: The longest --user / --team accepted (JupyterHub names and team names are far shorter).
MAX_NAME = 256


def name_of(flag: str, text: str | None) -> str | None:
    """A --user / --team value: bounded, printable (it is only ever a query parameter, never SQL)."""
    if text is None:
        return None
    if not 0 < len(text) <= MAX_NAME or not text.isprintable():
        raise ReportError(f"{flag} {text[:40]!r}: a name of 1 to {MAX_NAME} printable characters")
    return text


def since_of(text: str, now: datetime) -> datetime:
    from jupyterhub_gpu.model.durations import parse

    try:
        seconds = parse(text or "")
    except ValueError:
        seconds = None
    if seconds is None or seconds <= 0 or timedelta(seconds=seconds) > MAX_RANGE:
        raise ReportError(f"--since {text!r}: a duration such as 7d or 12h, at most {MAX_RANGE.days}d")
    return now - timedelta(seconds=seconds)


def render(rep: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(rep, indent=2)
    rows = rep["rows"] + [rep["total"]]
    if fmt == "csv":
        out = io.StringIO()
        w = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        return out.getvalue().rstrip("\n")
    head = [rep["by"], "GPU-h held", "GPU-h used", "util %", "$", "pods", "peak MiB", "use from"]
    cells = [[str(r["key"]), f"{r['gpu_hours_held']:.2f}",
              f"{r['gpu_hours_used']:.2f}" if rep["gpu_use_known"] else "?",
              "?" if r["utilisation_pct"] is None or not rep["gpu_use_known"] else f"{r['utilisation_pct']:.1f}",
              f"{r['cost']:.2f}", str(r["pods"]),
              "" if r["peak_memory_mib"] is None else f"{r['peak_memory_mib']:.0f}", r.get("evidence") or ""]
             for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *cells)]
    lines = ["  ".join(c.ljust(w) if i in (0, len(head) - 1) else c.rjust(w)
                       for i, (c, w) in enumerate(zip(line, widths))).rstrip()
             for line in [head, *cells]]
    q = rep["queue_wait_s"]
    wait = (f"queue wait p50 {q['p50'] / 60:.1f} min, p90 {q['p90'] / 60:.1f} min ({q['count']} jobs)"
            if q["count"] else "queue wait: no job admitted in the range")
    ev = ", ".join(f"{k} {v}" for k, v in sorted(rep["evictions"].items())) or "none"  # Kueue's, of jobs
    rec = rep["culler_gpu_hours_reclaimed"]
    return "\n".join([f"GPU showback {rep['since']} → {rep['until']}", *lines, "", wait,
                      f"evictions: {ev}",
                      f"spot evictions: {rep.get('spot_evictions', 0)} pods · preempted by the scheduler: "
                      f"{rep.get('pod_preemptions', 0)} pods",
                      f"reclaimed by the culler: {'?' if rec is None else f'{rec:.2f}'} GPU-h",
                      *(f"hint: {h}" for h in rep.get("hints", []))])


def reader(directory: str):
    """The collector's store, read only; one not yet upgraded is named, never read as empty."""
    from jupyterhub_gpu.services.usage.live import UsageReader

    store = UsageReader(directory)
    if store.unimported():
        raise ReportError(f"--store {directory}: only a finished.jsonl of the version before; the usage "
                          "collector imports it when it starts (or run it once with --once)")
    return store


def suggest_warm(args, now: datetime) -> int:
    """`--suggest-warm`: the store's finished servers only (no cluster, no Prometheus)."""
    from jupyterhub_gpu.model.profiles_file import load_profiles
    from jupyterhub_gpu.tools.suggest_warm import MAX_WEEKS, suggest, text

    since = since_of(args.since or "28d", now)
    if now - since > timedelta(weeks=MAX_WEEKS):
        raise ReportError(f"--since: at most {MAX_WEEKS * 7}d of history for --suggest-warm")
    if not args.store:
        raise ReportError("--suggest-warm reads the servers' starts from the usage store: give --store DIR")
    if args.min_starts <= 0 or not 0 <= args.lead <= 120:
        raise ReportError("--min-starts must be above 0 and --lead between 0 and 120 minutes")
    cfg = load_profiles(args.file)
    store = reader(args.store)
    read = store.finished(since, now)
    starts = [(lt.profile, lt.start) for lt in read if lt.kind == "server" and lt.start >= since]
    # the weeks the history covers, not the weeks asked for: a store a week old asked for 28d is one week of starts
    # (its earliest lifetime, server or job, is where its record begins; at least a day)
    first = max(since, min((lt.start for lt in read), default=since))
    weeks = max(now - first, timedelta(days=1)) / timedelta(weeks=1)
    print(text(suggest(cfg, starts, weeks, args.min_starts, args.lead)), end="")
    return 0


def run(args) -> int:
    from jupyterhub_gpu.kubeio.clients import api_client
    from jupyterhub_gpu.model.profiles_file import load_profiles
    from jupyterhub_gpu.services.usage import accounting as acc
    from jupyterhub_gpu.services.usage import collect

    now = datetime.now(timezone.utc)
    if args.suggest_warm:
        return suggest_warm(args, now)
    since = since_of(args.since or "7d", now)
    user, team = name_of("--user", args.user), name_of("--team", args.team)
    if not 0 < args.scrape_interval <= 3600:
        raise ReportError("--scrape-interval must be between 0 and 3600 seconds")
    cfg = load_profiles(args.file)
    try:
        live, workloads = collect.read_cluster(api_client(args.kubeconfig), cfg, args.hub_namespace, now)
    except FileNotFoundError as e:
        raise ReportError(str(e)) from None
    used = reclaimed = None
    if args.prometheus_url:
        used = collect.used_from_prometheus(args.prometheus_url, since, now, args.scrape_interval)
        reclaimed = collect.reclaimed_from_prometheus(args.prometheus_url, since, now)
    if team is not None:  # the queue figures of that team's namespaces only
        namespaces = {ns for ns, t in acc.rules_and_teams(cfg)[1].items() if t == team}
        workloads = [w for w in workloads if (w.get("metadata") or {}).get("namespace") in namespaces]
    store = reader(args.store) if args.store else None
    lifetimes = collect.all_lifetimes(live, store, since, now, user, team)
    print(render(collect.report(lifetimes, workloads, since, now, args.by, used, reclaimed, cfg), args.format))
    return 0
