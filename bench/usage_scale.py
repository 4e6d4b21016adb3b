"""Showback over its retention (issue 30): the SQLite usage store at 10 k, 200 k and 2 M finished lifetimes.

    .venv/bin/python bench/usage_scale.py [--sizes 10000,200000,2000000] [--days 400] [--rounds 5] [--views 200]

Each size is `days` days × size/days users (25, 500, 5,000 at the defaults): one two-hour lifetime per user
per day, on odd days a job of the user's team (25 users a team), else a server; one open lifetime per tenth
user. So one user's page (7 days) and one team's report (30 days) show as many rows at every size, and the
admins' org-wide report for 30 days shows every user's (it grows with the org, not with the history).

Views, all through the product's code: the usage page of one user (`web.usage_view`, its query in a thread
as on the page's loop), a team's `gpuhub report` for 30 days (`collect.all_lifetimes` with the team over a
`UsageReader`, then `collect.report`), the org-wide report for 30 days by team, and the store read of a
picker hint (`StoreAndPrometheus.lifetimes`: that user's 30 days). They run in rounds, the sizes side by
side in a rotating order within each round, so the machine's load falls on every size alike; the ratios
(each size's p95 over the smallest's) are per round, given as the median and the spread (min–max).
Collector memory: a fresh process per size opens the store and runs one cycle's writes (`--batch` lifetimes
appended, open.json saved) and a prune of the `--batch` oldest (the same work at every size); its peak RSS
over its RSS before it opened the store. And the upgrade: a fresh collector importing a `finished.jsonl` of
`--import-at` lifetimes written as the JSON-lines store wrote them (time, memory growth).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import write_result  # noqa: E402
from jupyterhub_gpu.hub.usage_hints import StoreAndPrometheus  # noqa: E402
from jupyterhub_gpu.services.usage import accounting as acc  # noqa: E402
from jupyterhub_gpu.services.usage import collect  # noqa: E402
from jupyterhub_gpu.services.usage.live import UsageReader  # noqa: E402
from jupyterhub_gpu.services.usage.store import UsageStore, from_us  # noqa: E402
from jupyterhub_gpu.services.usage.web import usage_view  # noqa: E402

PROFILES = (("h100-full", 1, 6.98), ("a100-mig-1g10gb", 1, 0.52), ("t4-shared", 1, 0.13))
TEAM_SIZE = 25


def lifetimes(users: int, days: int, until: datetime, first_day: int = 1, tag: str = "d"):
    """One two-hour lifetime per user per day, oldest day first (as the collector writes them)."""
    for d in range(days - 1, first_day - 1, -1):
        for u in range(users):
            end = until - timedelta(days=d, hours=1, seconds=u)  # a second apart: the oldest are distinct
            slug, gpus, cost = PROFILES[u % len(PROFILES)]
            job = d % 2 == 1
            yield acc.Lifetime(f"{tag}{d}-u{u}", "job" if job else "server",
                               f"team-{u // TEAM_SIZE}" if job else "jhub",
                               f"run-{d}-{u}" if job else f"jupyter-user{u}", f"user{u}",
                               f"team{u // TEAM_SIZE}" if job else "", slug, f"run-{d}" if job else "", gpus, cost,
                               end - timedelta(hours=2), end, node=f"node-{u % 40}")


def write_store(directory: Path, users: int, days: int, until: datetime) -> dict:
    t = time.perf_counter()
    store = UsageStore(directory)
    n = store.append_finished(lifetimes(users, days + 1, until))  # one transaction, streamed
    store.save_open({f"open-{u}": acc.Lifetime(f"open-{u}", "server", "jhub", f"jupyter-user{u}", f"user{u}", "",
                                               "h100-full", "", 1, 6.98, until - timedelta(hours=3))
                     for u in range(0, users, 10)}, until)
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return {"lifetimes": n, "users": users, "write_s": round(time.perf_counter() - t, 1),
            "store_mib": round(sum(p.stat().st_size for p in directory.glob("usage.sqlite*")) / 2**20, 1)}


def rss_kib(field: str) -> int:
    """VmRSS / VmHWM of this process (Linux), KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def collector_cycle(directory: str, batch: int) -> dict:
    """One collector cycle's writes (`batch` lifetimes appended, open.json saved) and a prune of the `batch`
    oldest, in this (fresh) process: its memory. The same work at every store size, so what grows is the
    store's doing. The peak RSS is reset first (/proc/self/clear_refs): the imports' peak hides nothing."""
    Path("/proc/self/clear_refs").write_text("5")
    before = rss_kib("VmRSS")
    until = datetime.now(timezone.utc)
    t = time.perf_counter()
    store = UsageStore(directory)
    store.append_finished(lifetimes(batch, 1, until + timedelta(days=1), first_day=0, tag="new"))
    store.save_open({}, until)
    cycle_s = time.perf_counter() - t
    t = time.perf_counter()
    cutoff = store.conn.execute("SELECT end_us FROM finished ORDER BY end_us LIMIT 1 OFFSET ?",
                                (batch,)).fetchone()[0]
    pruned = store.prune(from_us(cutoff))  # the `batch` oldest
    prune_s = time.perf_counter() - t
    store.close()
    peak = rss_kib("VmHWM")
    return {"rss_before_mib": round(before / 1024, 1), "peak_rss_mib": round(peak / 1024, 1),
            "growth_mib": round((peak - before) / 1024, 1), "cycle_s": round(cycle_s, 4), "pruned": pruned,
            "prune_s": round(prune_s, 3)}


def import_child(directory: str) -> dict:
    """The collector's first start on a store of the version before: the import of finished.jsonl."""
    Path("/proc/self/clear_refs").write_text("5")
    before = rss_kib("VmRSS")
    t = time.perf_counter()
    store = UsageStore(directory)
    took = time.perf_counter() - t
    n = store.conn.execute("SELECT count(*) FROM finished").fetchone()[0]
    store.close()
    peak = rss_kib("VmHWM")
    return {"imported": n, "import_s": round(took, 1), "growth_mib": round((peak - before) / 1024, 1)}


def measure_import(tmp: Path, n: int, days: int, until: datetime) -> dict:
    """A finished.jsonl of `n` lifetimes (as the JSON-lines store wrote them) imported by a fresh process."""
    folder = tmp / f"legacy-{n}"
    folder.mkdir()
    with (folder / "finished.jsonl").open("w") as f:
        for lt in lifetimes(max(n // days, 1), days + 1, until):
            f.write(json.dumps(lt.to_json(), sort_keys=True) + "\n")
    size = (folder / "finished.jsonl").stat().st_size
    done = subprocess.run([sys.executable, __file__, "--import-child", str(folder)], capture_output=True,
                          text=True, check=True)
    return {"lifetimes": n, "jsonl_mib": round(size / 2**20, 1), **json.loads(done.stdout)}


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


async def views(reader: UsageReader, hints: StoreAndPrometheus, users: int, n: int, until: datetime) -> dict:
    """One round of each view on one store: seconds per view."""
    week, month = until - timedelta(days=7), until - timedelta(days=30)
    out = {"user_page": [], "team_report": [], "org_report_30d": [], "hint_read": []}
    for i in range(n):
        user = f"user{(7 + 13 * i) % users}"
        t = time.perf_counter()
        await usage_view(reader, None, user, week, until)
        out["user_page"].append(time.perf_counter() - t)
        t = time.perf_counter()
        hints.lifetimes(user, month, until)
        out["hint_read"].append(time.perf_counter() - t)
    for i in range(max(n // 10, 2)):
        t = time.perf_counter()
        team = f"team{i % max(users // TEAM_SIZE, 1)}"
        collect.report(collect.all_lifetimes([], reader, month, until, team=team), [], month, until, "user",
                       None, None)
        out["team_report"].append(time.perf_counter() - t)
    for _ in range(2):
        t = time.perf_counter()
        collect.report(collect.all_lifetimes([], reader, month, until), [], month, until, "team", None, None)
        out["org_report_30d"].append(time.perf_counter() - t)
    return out


async def run(a) -> dict:
    sizes = [int(x) for x in a.sizes.split(",")]
    until = datetime.now(timezone.utc)
    out: dict = {"days": a.days, "rounds": a.rounds, "views_per_round": a.views, "sizes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {}
        for n in sizes:
            dirs[n] = Path(tmp) / str(n)
            out["sizes"][n] = write_store(dirs[n], max(n // a.days, 1), a.days, until)
            print(f"wrote {n}: {out['sizes'][n]}", file=sys.stderr)
        readers = {n: (UsageReader(dirs[n]), StoreAndPrometheus(str(dirs[n]), "http://127.0.0.1:9", 30.0))
                   for n in sizes}
        for n in sizes:  # a first view each (opens the connections), not timed
            await views(*readers[n], out["sizes"][n]["users"], 1, until)
        per_round: dict[int, list[dict]] = {n: [] for n in sizes}
        for r in range(a.rounds):
            order = sizes[r % len(sizes):] + sizes[:r % len(sizes)]
            for n in order:
                per_round[n].append(await views(*readers[n], out["sizes"][n]["users"], a.views, until))
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
        base = sizes[0]
        for n in sizes:
            fig = out["sizes"][n]
            for view in per_round[n][0]:
                every = [s for rnd in per_round[n] for s in rnd[view]]
                fig[view] = {"p50_ms": round(1000 * p(every, 50), 3), "p95_ms": round(1000 * p(every, 95), 3),
                             "count": len(every)}
                ratios = [p(mine[view], 95) / p(theirs[view], 95)
                          for mine, theirs in zip(per_round[n], per_round[base])]
                fig[view][f"p95_ratio_to_{base}"] = {"median": round(statistics.median(ratios), 3),
                                                     "min": round(min(ratios), 3), "max": round(max(ratios), 3)}
            rows = readers[n][0].lifetimes(None, until - timedelta(days=30), until)
            fig["org_report_30d"]["rows_read"] = len(rows)
            fig["team_report"]["rows_read"] = len(readers[n][0].lifetimes(None, until - timedelta(days=30), until,
                                                                          team="team0"))
            fig["user_page"]["rows_read"] = len(readers[n][0].lifetimes(f"user{7 % fig['users']}",
                                                                        until - timedelta(days=7), until))
        for reader, _ in readers.values():
            reader.close()
        for n in sizes:
            done = subprocess.run([sys.executable, __file__, "--collector", str(dirs[n]),
                                   "--batch", str(a.batch)], capture_output=True, text=True, check=True)
            out["sizes"][n]["collector"] = json.loads(done.stdout)
        if a.import_at:
            out["import_jsonl"] = measure_import(Path(tmp), a.import_at, a.days, until)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,200000,2000000", help="finished lifetimes per store, smallest first")
    ap.add_argument("--days", type=int, default=400, help="days of history (the default retention)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--views", type=int, default=200, help="user pages (and hint reads) per size per round")
    ap.add_argument("--import-at", type=int, default=200000,
                    help="also time the one-off import of a finished.jsonl this big (0: not)")
    ap.add_argument("--collector", help=argparse.SUPPRESS)  # the child: one collector cycle on this store
    ap.add_argument("--batch", type=int, default=500,
                    help="lifetimes the collector's measured cycle appends and prunes (default 500)")
    ap.add_argument("--import-child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.import_child:
        print(json.dumps(import_child(a.import_child)))
        return 0
    if a.collector:
        print(json.dumps(collector_cycle(a.collector, a.batch)))
        return 0
    return write_result("usage_scale", asyncio.run(run(a)))


if __name__ == "__main__":
    raise SystemExit(main())
