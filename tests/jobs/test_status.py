"""Status derivation (pure): Job + Kueue Workload + pods + log → the state users see."""
from __future__ import annotations

from jupyterhub_gpu.services.jobs.status import current_cell, derive_status, queue_positions

from .conftest import job, pod, workload

LOG = ("[dev-agent SIMULATOR] starting\n[gpuhub-runner] 10:05:01 running 2 code cells\n"
       "[gpuhub-runner] 10:05:03 cell 1/3 running\nhello\n[gpuhub-runner] 10:05:09 cell 2/3 running\n")


def test_current_cell_is_the_last_progress_line():
    assert current_cell(LOG) == {"cell": 2, "of": 3, "since": "10:05:09"}
    assert current_cell("nothing yet") is None


def test_queued_without_workload_yet():
    s = derive_status(job())
    assert s["state"] == "Queued" and s["position"] is None and "Kueue" in s["message"]
    assert s["user"] == "alice" and s["profile"] == "a100-mig-1g10gb" and s["notebook"] == "work/nb.ipynb"


#: Too little history for a wait estimate (`wait_estimate.estimate`): said as None, not guessed.
NO_ETA = {"eta_p50_s": None, "eta_p90_s": None, "eta_samples": 0}


def test_queue_positions_follow_priority_then_age_per_local_queue():
    wls = [workload("a", created="2026-01-01T10:00:00Z"),
           workload("b", created="2026-01-01T09:00:00Z"),
           workload("c", created="2026-01-01T11:00:00Z", priority=10000),
           workload("d", admitted=True),
           workload("e", queue="ml-research", ns="team-mlr")]
    pos = queue_positions(wls)
    assert pos["c"] == {"position": 1, "of": 3, **NO_ETA}
    assert pos["b"] == {"position": 2, "of": 3, **NO_ETA}
    assert pos["a"] == {"position": 3, "of": 3, **NO_ETA}
    assert "d" not in pos and pos["e"] == {"position": 1, "of": 1, **NO_ETA}


def test_queued_with_position_and_kueue_reason():
    j = job()
    wl = workload(j["metadata"]["name"])
    s = derive_status(j, wl, [], {"position": 2, "of": 5})
    assert s["state"] == "Queued" and s["position"] == 2 and s["queue_length"] == 5
    assert "insufficient quota" in s["message"]


def test_admitted_before_the_pod_runs():
    j = job(suspend=False, start="2026-01-01T10:04:00Z")
    wl = workload(j["metadata"]["name"], admitted=True)
    s = derive_status(j, wl, [pod("p1", phase="Pending")])
    assert s["state"] == "Admitted" and s["cluster_queue"] == "team-data-science"
    assert derive_status(j, wl, [])["state"] == "Admitted"


def test_running_with_current_cell_and_node():
    j = job(suspend=False)
    s = derive_status(j, workload(j["metadata"]["name"], admitted=True), [pod("p1")], None, LOG)
    assert s["state"] == "Running" and s["cell"]["cell"] == 2 and s["message"] == "cell 2 of 3"
    assert s["pod"] == "p1" and s["node"] == "kwok-gpumig-0" and s["preempted"] == 0


def test_preempted_and_resumed_when_a_new_pod_runs_after_an_interrupted_one():
    j = job(suspend=False)
    wl = workload(j["metadata"]["name"], admitted=True, evicted=True)
    old = pod("p1", phase="Failed", exit_code=143, disrupted=True, created="2026-01-01T10:05:00Z")
    new = pod("p2", created="2026-01-01T10:40:00Z")
    s = derive_status(j, wl, [new, old], None, LOG)
    assert s["state"] == "Preempted-and-resumed" and s["preempted"] == 1 and s["pod"] == "p2"


def test_preempted_and_waiting_again_is_queued_with_a_note():
    j = job(suspend=True)
    wl = workload(j["metadata"]["name"], evicted=True)
    s = derive_status(j, wl, [pod("p1", phase="Failed", exit_code=143)], {"position": 1, "of": 1})
    assert s["state"] == "Queued" and s["preempted"] == 1 and s["message"].startswith("preempted")


def test_succeeded_and_failed_with_reasons():
    assert derive_status(job(suspend=False, conditions=[("Complete", "", "")]))["state"] == "Succeeded"
    f = derive_status(job(suspend=False,
                          conditions=[("Failed", "PodFailurePolicy", "Container runner ... exit code 3")]))
    assert f["state"] == "Failed" and "cell" in f["message"]
    d = derive_status(job(suspend=False, conditions=[("Failed", "DeadlineExceeded", "")]))
    assert "timeout" in d["message"]


def test_a_replaced_pod_the_job_controller_counted_is_a_resume():
    j = job(suspend=False)
    j["status"]["failed"] = 1
    s = derive_status(j, workload(j["metadata"]["name"], admitted=True), [pod("p2")], None, LOG)
    assert s["state"] == "Preempted-and-resumed" and s["preempted"] == 1


def test_the_pods_own_end_is_final_before_the_job_controller_catches_up():
    """Between the runner's exit and the Job's Complete/Failed condition the widget must not say
    "Admitted — pod Succeeded"."""
    j = job(suspend=False)
    wl = workload(j["metadata"]["name"], admitted=True)
    done = pod("p1", phase="Succeeded", exit_code=0)
    assert derive_status(j, wl, [done], None, LOG)["state"] == "Succeeded"
    broken = derive_status(j, wl, [pod("p1", phase="Failed", exit_code=3)], None, LOG)
    assert broken["state"] == "Failed" and "cell" in broken["message"]
    # an infrastructure failure (exit 4) or a SIGTERM (143) is retried by the Job: not final
    for code in (4, 143):
        assert derive_status(j, wl, [pod("p1", phase="Failed", exit_code=code)], None, LOG)["state"] == "Admitted"


def test_kueue_evictions_still_count_after_readmission():
    """After a Kueue preemption the Workload is admitted again and its Evicted condition turns False;
    `schedulingStats.evictions` keeps the count, so the job stays Preempted-and-resumed."""
    j = job(suspend=False)
    wl = workload(j["metadata"]["name"], admitted=True)
    wl["status"]["schedulingStats"] = {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 2}]}
    s = derive_status(j, wl, [pod("p2")], None, LOG)
    assert s["state"] == "Preempted-and-resumed" and s["preempted"] == 2
    j["status"]["conditions"] = [{"type": "Complete", "status": "True"}]
    assert derive_status(j, wl, [])["preempted"] == 2


def test_queued_status_is_explained_in_plain_words_with_kueues_text_kept():
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
    from jupyterhub_gpu.services.jobs.words import explain

    cfg = load_profiles(EXAMPLE_PROFILES)
    j = job()
    wl = workload(j["metadata"]["name"])
    wl["status"]["conditions"][0]["message"] = ("couldn't assign flavors to pod set main: flavor gpuh100 doesn't "
                                                "match node affinity, insufficient unused quota for "
                                                "nvidia.com/mig-1g.10gb in flavor gpumig, 1 more needed")
    s = explain(cfg, derive_status(j, wl, [], {"position": 1, "of": 2}))
    assert s["message"] == "your team's 14 A100 80GB MIG slices are in use; starts when one finishes — 1 of 2 waiting"
    assert s["kueue_message"].startswith("couldn't assign flavors") and s["kueue_reason"] == "Pending"
    preempted = explain(cfg, derive_status(job(suspend=True), workload(j["metadata"]["name"], evicted=True),
                                           [pod("p1", phase="Failed", exit_code=143)], {"position": 1, "of": 1}))
    assert preempted["message"].startswith("preempted; waiting to resume — ")
    running = derive_status(job(suspend=False), workload(j["metadata"]["name"], admitted=True), [pod("p1")])
    assert explain(cfg, running) == running


def test_a_progress_line_with_a_huge_cell_number_is_not_progress():
    """A job prints anything: 5,000 digits made int() raise (Python's 4,300-digit limit), failing the list."""
    hostile = f"[gpuhub-runner] 10:05:03 cell {'9' * 5000}/{'9' * 5000} running\n"
    assert current_cell(LOG + hostile) == {"cell": 2, "of": 3, "since": "10:05:09"}
    assert current_cell("[gpuhub-runner] 10:05:03 cell ٣/٣ running") is None  # digits, but not 0-9
    assert current_cell("[gpuhub-runner] 10:05:03 cell 999999/1000000 running") is None
    assert current_cell("[gpuhub-runner] 10:05:03 cell 999999/999999 running")["cell"] == 999999


class OneBadLog:
    """A LogSource (kube.LogSource): one pod prints a hostile progress line, another's kubelet fails."""

    def __init__(self, logs: dict):
        self.logs = logs

    async def fetch(self, namespace, pod, tail_lines, limit_bytes):
        found = self.logs[pod]
        if isinstance(found, Exception):
            raise found
        return found.encode()


async def test_one_jobs_unreadable_status_never_fails_the_list():
    import aiohttp
    from kubernetes_asyncio import client

    from jupyterhub_gpu.services.jobs.cache import JobsCache
    from jupyterhub_gpu.services.jobs.kube import Kube

    jobs = [job(name=n, suspend=False) for n in ("gpu-a-1", "gpu-a-2", "gpu-a-3")]
    pods = [pod(f"p{i}", job_name=j["metadata"]["name"]) for i, j in enumerate(jobs, 1)]
    cache = JobsCache(client.ApiClient(), ["team-ds"])  # the real cache, as its watches would fill it
    cache.stores[("jobs", "team-ds")].replace(jobs)
    cache.stores[("pods", "team-ds")].replace(pods)
    cache.stores[("workloads", "team-ds")].replace([workload(j["metadata"]["name"], admitted=True) for j in jobs])
    for informer in cache.informers:
        informer.synced.set()
    kube = Kube(client.ApiClient(), ["team-ds"], OneBadLog({
        "p1": LOG, "p2": f"[gpuhub-runner] 10:05:03 cell {'9' * 5000}/3 running\n",
        "p3": aiohttp.ClientConnectionError("kubelet of kwok-gpumig-0 not answering")}), cache)
    got = {s["name"]: s for s in await kube.statuses(jobs)}
    assert [got[n]["state"] for n in ("gpu-a-1", "gpu-a-2", "gpu-a-3")] == ["Running"] * 3
    assert got["gpu-a-1"]["cell"]["cell"] == 2 and got["gpu-a-2"]["cell"] is None and got["gpu-a-3"]["cell"] is None
    odd = {**jobs[0], "status": "not an object"}  # what no derivation can read: listed as Unknown, not a 500
    assert (await kube.statuses([odd], with_logs=False))[0]["state"] == "Unknown"


def test_a_running_job_carries_the_notebooks_throughput_from_its_report_lines():
    j = job(suspend=False)
    reports = ('[gpuhub-runner] 10:00:10 report {"t":1000,"step":10,"samples":320,"total_steps":110}\n'
               'print("[gpuhub-runner] 10:00:15 report {\\"t\\":1,\\"step\\":999}")\n'  # not a whole line
               '[gpuhub-runner] 10:00:20 report {"t":1010,"step":60,"samples":1920,"total_steps":110,"loss":0.5}\n')
    s = derive_status(j, workload(j["metadata"]["name"], admitted=True), [pod("p1")], None, LOG + reports)
    assert s["throughput"] == {"step": 60, "total_steps": 110, "samples": 1920, "loss": 0.5, "reported_at": 1010.0,
                               "samples_per_s": 160.0, "step_s": 0.2, "eta_s": 10.0}
    assert "throughput" not in derive_status(j, workload(j["metadata"]["name"], admitted=True), [pod("p1")], None, LOG)
    done = derive_status(job(suspend=False, conditions=[("Complete", "", "")]), None, [pod("p1", phase="Succeeded")],
                         None, LOG + reports)
    assert "throughput" not in done  # the job's own speed, while it runs
