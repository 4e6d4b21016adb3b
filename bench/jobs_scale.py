"""Benchmark: gpu-jobs' reads at 500 and at 10,000 jobs across teams, in one run (no cluster needed).

The service's `JobsCache` is filled as its watches would fill it (each store's `replace`, which keeps
the indexes) with Jobs, Kueue Workloads and pods of many users in several team namespaces: queued
(pending Workloads, with an admission history per LocalQueue for the ETA), running and finished jobs.
One user, `bench`, has the same --mine jobs at every size. Each figure is the service's real code
(`Kube` over the cache), without HTTP:
  list        GET /jobs?cells=0: the user's jobs, then their statuses (queue positions and ETAs included)
  status      GET /jobs/<name>: one job, then its status
  positions   the queue position and ETA of each of the user's queued jobs
  limit       max_per_user counting: the user's unfinished jobs per profile (as POST /jobs counts them)
`scan_*` is the same list done as before the indexes (every read scans all jobs, Workloads and pods of the
cache), side by side. API requests are counted on the client (must stay 0).

    python bench/jobs_scale.py [--jobs 500,10000] [--mine 20] [--rounds 200] [--scan-every 10]
"""
from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes_asyncio import client  # noqa: E402

from jupyterhub_gpu.contract import FINISHED, JOB_LABEL, PROFILE_LABEL, QUEUE_LABEL, USER_ANNOTATION  # noqa: E402
from jupyterhub_gpu.services.jobs.cache import JobsCache  # noqa: E402
from jupyterhub_gpu.services.jobs.kube import Kube  # noqa: E402

TEAMS = ["team-a", "team-b", "team-c", "team-d"]
PROFILES = ["t4-shared", "a100-mig-1g10gb", "h100-full"]


class CountingClient(client.ApiClient):
    """No request may leave: each one is counted and refused."""

    calls = 0

    async def request(self, *args, **kwargs):
        CountingClient.calls += 1
        raise RuntimeError("unexpected API request")


def stamp(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_780_000_000 + seconds))


def objects(i: int, ns: str, user: str, state: str) -> tuple[dict, dict, list[dict]]:
    """A Job, its Workload and its pods in `state` (queued, running, done)."""
    name, created = f"job-{i:05d}", i * 30
    profile = PROFILES[i % len(PROFILES)]
    labels = {JOB_LABEL: name, PROFILE_LABEL: profile, QUEUE_LABEL: "gpu"}
    job = {"metadata": {"name": name, "namespace": ns, "labels": labels, "creationTimestamp": stamp(created),
                        "annotations": {USER_ANNOTATION: user}},
           "spec": {"suspend": state == "queued"}, "status": {}}
    wl = {"metadata": {"name": f"job-{name}", "namespace": ns, "creationTimestamp": stamp(created),
                       "ownerReferences": [{"kind": "Job", "name": name}]},
          "spec": {"queueName": "gpu", "priority": 1000 if i % 7 else 10000}, "status": {"conditions": []}}
    pods = []
    if state != "queued":
        admitted = stamp(created + 60 + (i * 37) % 900)
        wl["status"]["conditions"] = [{"type": "QuotaReserved", "status": "True", "lastTransitionTime": admitted},
                                      {"type": "Admitted", "status": "True", "lastTransitionTime": admitted}]
        phase = "Running" if state == "running" else "Succeeded"
        pods.append({"metadata": {"name": f"{name}-x", "namespace": ns, "labels": {JOB_LABEL: name},
                                  "creationTimestamp": admitted},
                     "spec": {"nodeName": "n1"}, "status": {"phase": phase}})
        if state == "done":
            job["status"] = {"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": admitted}]}
    return job, wl, pods


def fill(cache: JobsCache, jobs: int, mine: int, seed: int = 3) -> None:
    rnd = random.Random(seed)
    kinds: dict[tuple[str, str], list[dict]] = {(k, ns): [] for (k, ns) in cache.stores}
    users = [f"user{u}" for u in range(max(jobs // 50, 1))]
    for i in range(jobs):
        ns = TEAMS[i % len(TEAMS)]
        user = "bench" if i < mine else rnd.choice(users)
        state = ("queued", "running", "done")[i % 3] if i < mine else rnd.choice(["queued", "running", "done", "done"])
        job, wl, pods = objects(i, ns, user, state)
        kinds[("jobs", ns)].append(job)
        kinds[("workloads", ns)].append(wl)
        kinds[("pods", ns)].extend(pods)
    for key, items in kinds.items():
        cache.stores[key].replace(items)
    for informer in cache.informers:
        informer.synced.set()


async def unfinished(kube: Kube, user: str) -> Counter:
    """What POST /jobs counts against max_per_user (JobsHandler.unfinished, without the gate)."""
    jobs = await kube.jobs(user)
    statuses = await kube.statuses(jobs, with_logs=False)
    return Counter((j["metadata"].get("labels") or {}).get(PROFILE_LABEL, "")
                   for j, s in zip(jobs, statuses) if s["state"] not in FINISHED)


class ScanKube(Kube):
    """The service before its indexes: a user's jobs by scanning every Job, statuses from whole lists."""

    async def jobs(self, user=None):
        return [j for j in self.cache.objects("jobs", self.namespaces)
                if (j["metadata"].get("annotations") or {}).get(USER_ANNOTATION) == user]

    def _cached_parts(self, jobs):
        namespaces = sorted({j["metadata"]["namespace"] for j in jobs})
        return self.scan_parts(self.cache.objects("workloads", namespaces), self.cache.objects("pods", namespaces))


def pcts(times: list[float]) -> dict:
    times = sorted(times)
    return {"p50_ms": round(statistics.median(times), 3),
            "p95_ms": round(times[max(0, round(len(times) * 0.95) - 1)], 3)}


async def measure(jobs: int, mine: int, rounds: int, scan_every: int) -> dict:
    api = CountingClient()
    cache = JobsCache(api, TEAMS)
    fill(cache, jobs, mine)
    kube, scan = Kube(api, TEAMS, cache=cache), ScanKube(api, TEAMS, cache=cache)
    mine_jobs = await kube.jobs("bench")
    assert len(mine_jobs) == mine and sorted(map(str, await scan.statuses(mine_jobs, False))) == \
        sorted(map(str, await kube.statuses(mine_jobs, False))), "the indexes must answer as the scan does"
    one = mine_jobs[0]["metadata"]["name"]
    queued_wls = [w for j in mine_jobs if j["spec"]["suspend"]
                  for w in cache.indexed("workloads", [j["metadata"]["namespace"]], j["metadata"]["name"])]

    async def list_(k):
        return await k.statuses(await k.jobs("bench"), with_logs=False)

    async def status():
        return await kube.statuses([await kube.job(one)], with_logs=False)

    async def positions():
        return [cache.position(w) for w in queued_wls]

    steps = {"list": lambda: list_(kube), "status": status, "positions": positions,
             "limit": lambda: unfinished(kube, "bench"), "scan_list": lambda: list_(scan)}
    times: dict[str, list[float]] = {k: [] for k in steps}
    before = CountingClient.calls
    # the indexed steps interleaved, so load on the machine hits each alike; the scan (the old way) after
    # them, on fewer rounds: it is slow, and its throw-away histories would evict the ETA's memo of the
    # cache's own (model/wait_estimate.py remembers a few calibrations), which the service never does
    for i in range(rounds):
        for name, step in steps.items():
            if name.startswith("scan"):
                continue
            t0 = time.perf_counter()
            await step()
            times[name].append((time.perf_counter() - t0) * 1000)
    for i in range(max(rounds // scan_every, 2)):
        t0 = time.perf_counter()
        await steps["scan_list"]()
        times["scan_list"].append((time.perf_counter() - t0) * 1000)
    await api.close()
    out = {"jobs": jobs, "mine": mine, "pods": sum(len(cache.stores[("pods", ns)].by_name) for ns in TEAMS),
           "api_requests": CountingClient.calls - before}
    for name, t in times.items():
        out.update({f"{name}_{k}": v for k, v in pcts(t).items()})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", default="500,10000", help="sizes, comma-separated (all in this run)")
    p.add_argument("--mine", type=int, default=20, help="the measured user's jobs (the same at every size)")
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--scan-every", type=int, default=10, help="time the scan (the old way) rounds/N times")
    args = p.parse_args()
    results = []
    for n in (int(x) for x in args.jobs.split(",")):
        results.append(asyncio.run(measure(n, args.mine, args.rounds, args.scan_every)))
        for k, v in results[-1].items():
            print(f"{k:>18}: {v}")
        print()
    if len(results) > 1:
        for name in ("list", "status", "positions", "limit", "scan_list"):
            print(f"{name + '_p95_ratio':>18}: {results[-1][name + '_p95_ms'] / results[0][name + '_p95_ms']:.2f}")


if __name__ == "__main__":
    main()
