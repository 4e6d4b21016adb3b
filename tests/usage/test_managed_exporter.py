"""AKS's managed DCGM exporter against the real Prometheus (Debian's): its series name a node (`instance`) and a
GPU but no pod, as Azure Managed Prometheus keeps them; with kube-state-metrics' pod series beside them,
`dcgm_nodes.node_range` gives each sample the pod that is the only running GPU pod on its node, and no one
where two GPU pods share a node or the pod no longer runs; showback's GPU-hours used and the culler's evidence
read them so."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
import requests
from culler.fixtures import NAMESPACE as CULLER_NS
from culler.fixtures import exporter, prometheus, serve_metrics  # noqa: F401 (fixtures)

from jupyterhub_gpu.cluster.dcgm import PROF_METRIC, pod_of
from jupyterhub_gpu.cluster.dcgm_nodes import node_range, presence_query
from jupyterhub_gpu.services.culler import decide as D
from jupyterhub_gpu.services.usage import collect

SCRAPE = 1
NS = "jhub"


class ManagedExporter:
    """One target serving what Azure Managed Prometheus would hold: the managed exporter's node series and
    kube-state-metrics' pod series (honor_labels keeps their own `instance`)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.server = serve_metrics(lambda: "\n".join(self.lines) + "\n")
        self.port = self.server.server_address[1]

    def gpu(self, node: str, gpu: int, prof: float, util: float, mem: float) -> None:
        at = f'gpu="{gpu}",instance="{node}"'
        self.lines += [f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{at}}} {prof}", f"DCGM_FI_DEV_GPU_UTIL{{{at}}} {util}",
                       f"DCGM_FI_DEV_FB_USED{{{at}}} {mem}"]

    def pod(self, pod: str, node: str, gpus: int = 1, phase: str = "Running") -> None:
        who = f'namespace="{NS}",pod="{pod}"'
        self.lines += [f'kube_pod_info{{{who},node="{node}",uid="{pod}-uid",host_ip="10.0.0.1"}} 1']
        self.lines += [f'kube_pod_status_phase{{{who},phase="{p}"}} {int(p == phase)}'
                       for p in ("Pending", "Running", "Succeeded")]
        if gpus:
            self.lines.append(f'kube_pod_container_resource_requests{{{who},container="notebook",'
                              f'resource="nvidia_com_gpu",unit="integer",node="{node}"}} {gpus}')
        self.lines.append(f'kube_pod_container_resource_requests{{{who},container="notebook",resource="cpu",'
                          f'unit="core",node="{node}"}} 2')


def wait_for_samples(url: str, n: int, timeout: float = 60) -> None:
    query = f'count_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{instance="aks-managed-0"}}[{n}s])'
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = requests.get(f"{url}/api/v1/query", params={"query": query}, timeout=10).json()["data"]["result"]
        if result and float(result[0]["value"][1]) >= n:
            return
        time.sleep(0.5)
    raise AssertionError(f"Prometheus did not hold {n} s of samples in {timeout} s")


@pytest.fixture(scope="module")
def managed(tmp_path_factory):
    from jupyterhub_gpu_dev import prometheus as prom

    e = ManagedExporter()
    e.gpu("aks-managed-0", 0, 0.8, 90, 5000)            # alice alone on her node (1 GPU)
    e.gpu("aks-managed-1", 0, 0.0, 0, 100)              # bob and carol share a 2-GPU node
    e.gpu("aks-managed-1", 1, 0.9, 95, 9000)
    e.gpu("aks-managed-2", 0, 0.0, 0, 300)              # dave, with a CPU-only pod beside him
    e.gpu("aks-managed-2", 1, 0.0, 0, 200)
    e.gpu("aks-managed-3", 0, 0.7, 70, 4000)            # erin's pod has finished; something else runs there
    e.gpu("aks-managed-4", 0, 0.6, 60, 1000)            # gina alone, until a second GPU pod comes (a test)
    e.pod("jupyter-alice", "aks-managed-0")
    e.pod("jupyter-bob", "aks-managed-1")
    e.pod("jupyter-carol", "aks-managed-1")
    e.pod("jupyter-dave", "aks-managed-2", gpus=2)
    e.pod("cpu-only", "aks-managed-2", gpus=0)
    e.pod("jupyter-erin", "aks-managed-3", phase="Succeeded")
    e.pod("jupyter-gina", "aks-managed-4")
    # an operator exporter's series with a pod label, on another node: read as before
    e.lines.append(f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="0",instance="aks-gput4-0",namespace="{NS}",'
                   'pod="jupyter-frank"} 0.5')
    try:
        proc, url = prom.start(tmp_path_factory.mktemp("prometheus-managed"), e.port, SCRAPE, honor_labels=True)
    except prom.PrometheusMissing as err:
        pytest.skip(str(err))
    try:
        wait_for_samples(url, 10)  # > the window below: every step of it has a sample
        yield url, e
    finally:
        prom.stop(proc)
        e.server.shutdown()


def query(url: str, q: str) -> dict[tuple[str, str, str], float]:
    """(namespace, pod, gpu) → value of an instant query's series."""
    result = requests.get(f"{url}/api/v1/query", params={"query": q}, timeout=30).json()
    assert result["status"] == "success", result
    return {(*pod_of(r["metric"]), r["metric"]["gpu"]): float(r["value"][1]) for r in result["data"]["result"]}


def test_each_node_series_goes_to_the_sole_gpu_pod_of_its_node_and_no_one_else(managed):
    url, _ = managed
    peak = query(url, node_range("max_over_time", PROF_METRIC, 8, SCRAPE))
    counts = query(url, node_range("count_over_time", PROF_METRIC, 8, SCRAPE))
    assert set(peak) == set(counts)
    assert {(ns, pod) for ns, pod, _ in peak} == {(NS, "jupyter-alice"), (NS, "jupyter-dave"), (NS, "jupyter-gina")}
    assert peak[(NS, "jupyter-alice", "0")] == 0.8 and 7 <= counts[(NS, "jupyter-alice", "0")] <= 9
    # both of dave's GPUs are his (the CPU-only pod beside him is no GPU pod); idle, fully covered
    assert peak[(NS, "jupyter-dave", "0")] == peak[(NS, "jupyter-dave", "1")] == 0.0
    assert min(counts[(NS, "jupyter-dave", g)] for g in "01") >= 7
    # bob and carol share a node, erin's pod finished, frank's series names its pod: none of them here


def test_pod_matchers_narrow_the_pods_never_the_count_of_a_nodes_gpu_pods(managed):
    url, _ = managed
    alice = 'pod="jupyter-alice",namespace="jhub"'
    assert set(query(url, node_range("max_over_time", PROF_METRIC, 5, SCRAPE, alice))) == {(NS, "jupyter-alice", "0")}
    bob = 'pod="jupyter-bob",namespace="jhub"'  # alone among the pods kept, but not alone on his node
    assert query(url, node_range("max_over_time", PROF_METRIC, 5, SCRAPE, bob)) == {}


def test_showback_counts_the_sole_gpu_pods_use_and_no_one_elses(managed):
    url, _ = managed
    until = datetime.now(timezone.utc)
    used = collect.used_from_prometheus(url, until - timedelta(seconds=8), until, SCRAPE)
    alice = used[(NS, "jupyter-alice")]  # 8 steps of 1 s at 0.8 (one step more or less at the edges)
    assert 0.8 * 7 / 3600 <= alice.used_hours <= 0.8 * 9 / 3600 and alice.peak_memory_mib == 5000
    dave = used[(NS, "jupyter-dave")]
    assert dave.used_hours == 0.0 and dave.peak_memory_mib == 300
    assert used[(NS, "jupyter-frank")].used_hours > 0  # a pod-labelled series reads as before
    for unknown in ("jupyter-bob", "jupyter-carol", "jupyter-erin", "cpu-only"):
        assert (NS, unknown) not in used, unknown


def test_the_culler_sees_the_sole_gpu_pod_busy_or_idle_and_the_others_as_unknown(managed):
    url, _ = managed
    evidence = D.parse_evidence(requests.get(f"{url}/api/v1/query", timeout=30, params={
        "query": D.evidence_query(8, step=SCRAPE)}).json()["data"]["result"])
    alice, dave = evidence[(NS, "jupyter-alice")], evidence[(NS, "jupyter-dave")]
    assert alice.state(D.DEFAULT_THRESHOLD, 8) == "busy" and alice.max_activity == pytest.approx(0.9)  # GPU_UTIL
    assert dave.state(D.DEFAULT_THRESHOLD, 8) == "idle" and dave.devices == ("gpu0", "gpu1")
    assert not {(NS, p) for p in ("jupyter-bob", "jupyter-carol", "jupyter-erin")} & set(evidence)
    assert D.evidence_query(8) == D.evidence_query(8, step=None)  # without a step: as before, no node parts
    # a young server's own query: its node's series while it is the only GPU pod there, never a neighbour's
    for pod, found in (("jupyter-alice", True), ("jupyter-bob", False)):
        result = requests.get(f"{url}/api/v1/query", timeout=30, params={
            "query": D.pod_evidence_query(5, pod, NS, SCRAPE)}).json()["data"]["result"]
        assert ((NS, pod) in D.parse_evidence(result)) is found, pod


def test_a_second_gpu_pod_on_the_node_ends_the_attribution_from_then_on(managed):
    url, e = managed
    gina = (NS, "jupyter-gina", "0")
    before = query(url, node_range("count_over_time", PROF_METRIC, 8, SCRAPE))[gina]
    e.pod("jupyter-hank", "aks-managed-4")
    time.sleep(4 * SCRAPE)
    assert gina not in query(url, node_range("count_over_time", PROF_METRIC, 2, SCRAPE))  # now: unknown
    after = query(url, node_range("count_over_time", PROF_METRIC, 8, SCRAPE)).get(gina, 0)
    assert before >= 7 and 1 <= after <= before - 2  # only the steps from before hank came


def test_the_node_parts_are_asked_for_only_where_some_series_names_no_pod(managed, exporter, prometheus):
    url, _ = managed
    assert query_vector(url, presence_query(8))  # the managed exporter's series
    exporter.set_gpu("jupyter-ivan", activity=0.4)  # an operator exporter's: every series names its pod
    try:
        operator_style_reads_as_before(exporter, prometheus)
    finally:  # the exporter is the session's: leave it as found
        with exporter.lock:
            exporter.series = {k: v for k, v in exporter.series.items() if not k.startswith("jupyter-ivan/")}


def operator_style_reads_as_before(exporter, prometheus) -> None:
    deadline = time.monotonic() + 30
    while not query_vector(prometheus, 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{exported_pod="jupyter-ivan"}'):
        assert time.monotonic() < deadline, "the operator-style series never arrived"
        time.sleep(0.5)
    assert query_vector(prometheus, presence_query(8)) == []
    time.sleep(2 * SCRAPE)
    until = datetime.now(timezone.utc)  # and showback there reads as before, without them
    assert collect.used_from_prometheus(prometheus, until - timedelta(seconds=2), until, SCRAPE)[
        (CULLER_NS, "jupyter-ivan")].used_hours > 0


def query_vector(url: str, q: str) -> list:
    result = requests.get(f"{url}/api/v1/query", params={"query": q}, timeout=30).json()
    assert result["status"] == "success", result
    return result["data"]["result"]
