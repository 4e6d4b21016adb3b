"""`python -m jupyterhub_gpu.services.usage`: the usage collector. Every cycle it lists the GPU pods and
Workloads, closes the lifetimes of pods that ended or vanished into the store (store.py) and updates the
metrics (metrics.py) it serves on /metrics for Prometheus. Between two lists it follows the pods' events
from the last list's resourceVersion, so a pod shorter than a cycle is counted too. Restart-safe: it reloads
the open lifetimes, the last-seen time and the watch positions from the store (the events of the time it was
down are replayed, within the API server's watch window), and observes only waits of Workloads admitted after
that time."""
from __future__ import annotations

import argparse
import logging
import sqlite3
import time
from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.contract import adopt_hub_api_url
from jupyterhub_gpu.kubeio.clients import api_client
from jupyterhub_gpu.model.durations import parse
from jupyterhub_gpu.model.profiles_file import load_profiles
from jupyterhub_gpu.services.loopguard import LoopGuard
from jupyterhub_gpu.services.usage import accounting as acc
from jupyterhub_gpu.services.usage import collect
from jupyterhub_gpu.services.usage.metrics import UsageMetrics
from jupyterhub_gpu.services.usage.metrics_http import ENV_TOKEN, metrics_token, serve_metrics
from jupyterhub_gpu.services.usage.store import UsageStore

log = logging.getLogger("gpuhub.usage")


def cycle(api, cfg, hub_namespace: str, store: UsageStore, metrics: UsageMetrics,
          open_: dict[str, acc.Lifetime], last: datetime | None) -> tuple[dict[str, acc.Lifetime], datetime]:
    """Watch from the last list's positions (what started and went since), list, close what is gone."""
    now = datetime.now(timezone.utc)
    positions = store.load_positions()
    watched = collect.pods_since(api, cfg, hub_namespace, positions, now)
    live, workloads = collect.read_cluster(api, cfg, hub_namespace, now, positions=positions)
    known, ends = acc.fold_watched(open_, watched, datetime.now(timezone.utc))
    still, done = acc.close_missing(known, live, last or now, collect.node_names(api), ends)
    done = [lt for lt in done if lt.uid not in store.stored(lt.uid for lt in done)]  # replayed after a restart
    store.append_finished(done)
    store.save_open(still, now)
    store.save_positions(positions)
    metrics.update(still.values(), workloads, (now - last).total_seconds() if last else 0.0, last)
    metrics.finished(done)
    return still, now


#: How often the store is pruned (and once at start).
PRUNE_EVERY_S = 24 * 3600


def retention_of(text: str) -> timedelta | None:
    """'400d' → 400 days; None for anything unparsable or under a day (that would drop today's usage)."""

    try:
        seconds = parse(text)
    except ValueError:
        return None
    return timedelta(seconds=seconds) if seconds and seconds >= 86400 else None


def main(argv: list[str] | None = None) -> int:
    adopt_hub_api_url()
    p = argparse.ArgumentParser(prog="gpuhub-usage", description=__doc__)
    p.add_argument("--profiles-file", required=True)
    p.add_argument("--store", required=True, help="directory for usage.sqlite and open.json (a volume)")
    p.add_argument("--hub-namespace", default="jhub")
    p.add_argument("--kubeconfig")
    p.add_argument("--every", type=float, default=60.0, help="seconds between cycles (default 60)")
    p.add_argument("--port", type=int, default=9402, help="/metrics port (default 9402)")
    p.add_argument("--metrics-token-file", help="file whose first line is the bearer token Prometheus sends "
                                                "(default $GPUHUB_USAGE_METRICS_TOKEN); none: loopback only")
    p.add_argument("--once", action="store_true", help="one cycle, then exit (tests, cron)")
    p.add_argument("--retention", default="400d",
                   help="keep finished lifetimes this long (default 400d: a year's showback and then some); "
                        "older ones are pruned at start and daily")
    args = p.parse_args(argv)
    if not 1 <= args.every <= 3600:
        p.error("--every must be between 1 and 3600 seconds")
    retention = retention_of(args.retention)
    if retention is None:
        p.error(f"--retention {args.retention!r}: a duration of at least 1d, such as 90d or 400d")
    try:
        token = metrics_token(token_file=args.metrics_token_file)
    except (OSError, ValueError) as e:
        p.error(f"--metrics-token-file / ${ENV_TOKEN}: {e}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    cfg, store, metrics = load_profiles(args.profiles_file), UsageStore(args.store), UsageMetrics()
    LoopGuard(metrics.registry).start_in_thread()  # no event loop here: the GIL stalls its /metrics thread
    api = api_client(args.kubeconfig)
    open_, last = store.load_open()
    if not args.once:
        serve_metrics(metrics.registry, args.port, token)
    pruned_at = None
    while True:
        if pruned_at is None or time.monotonic() - pruned_at >= PRUNE_EVERY_S:
            pruned_at = time.monotonic()
            try:
                if n := store.prune(datetime.now(timezone.utc) - retention):
                    log.info("pruned %d finished lifetimes older than %s", n, args.retention)
            except (OSError, sqlite3.Error):
                log.exception("pruning the store failed; retrying in a day")
        try:
            open_, last = cycle(api, cfg, args.hub_namespace, store, metrics, open_, last)
        except Exception:  # the cluster not answering is a missed cycle, not a crash: the store keeps all
            if args.once:
                raise
            log.exception("usage cycle failed; retrying in %.0f s", args.every)
        if args.once:
            return 0
        time.sleep(args.every)


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # the hub stops its managed services with SIGINT: a stop, not a crash
        from jupyterhub_gpu.services.stopped import exit_now

        exit_now()
