"""Kueue admits suspended Jobs against the quota `gpuhub render kueue` sets, and places them on the
flavor's pool (it copies the flavor's node labels and tolerations into the pod template)."""
from __future__ import annotations

import secrets
import time

import pytest
import yaml

from jupyterhub_gpu.builders.hardening import harden
from jupyterhub_gpu.builders.kueue import local_queue_name
from jupyterhub_gpu.model.profiles_file import load_profiles
from jupyterhub_gpu_dev import cluster as dc

pytestmark = pytest.mark.cluster

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

#: Small quotas on the example's T4 pool (8 slots), easy to exhaust; applied next to the example's teams.
QUOTA_TEAMS = {
    "solo": {"namespace": "team-solo", "quota": {"gput4": 2}},
    "lender": {"namespace": "team-lender", "cohort": "share", "quota": {"gput4": 2}},
    "borrower": {"namespace": "team-borrower", "cohort": "share", "quota": {"gput4": 1}, "borrowing_limit": 1},
}


def job(name: str, namespace: str, queue: str, resource: str, count: int = 1) -> dict:
    """A suspended batch/v1 Job asking for `count` of a GPU resource, queued in `queue` (its pod hardened like
    the product's: team namespaces enforce Pod Security `restricted`)."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0,
            "template": {"spec": harden({"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "busybox", "command": ["sleep", "3600"],
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi", resource: str(count)},
                              "limits": {resource: str(count)}},
            }]}, "1Gi")},
        },
    }


def submit(cluster, namespace: str, queue: str, resource: str, n: int) -> list[str]:
    names = []
    for _ in range(n):
        name = f"job-{secrets.token_hex(3)}"
        cluster.create(job(name, namespace, queue, resource))
        names.append(name)
    return names


def admitted(cluster, namespace: str, name: str) -> bool:
    wl = cluster.workload_of(namespace, name)
    return bool(wl) and dc.condition_true(wl, "Admitted")


def pods_of(cluster, namespace: str, name: str):
    return cluster.core.list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={name}").items


def assert_running_on_pool(cluster, namespace: str, name: str, pool) -> None:
    """Admitted → unsuspended → a pod the scheduler bound to a node of the flavor's pool."""
    cluster.wait_until(lambda: admitted(cluster, namespace, name), 30, f"Job {name} to be admitted")
    cluster.wait_until(lambda: cluster.batch.read_namespaced_job(name, namespace).spec.suspend is False, 30,
                       f"Job {name} to be unsuspended")
    pod = cluster.wait_until(lambda: pods_of(cluster, namespace, name), 30, f"a pod of Job {name}")[0]
    node = cluster.wait_bound(namespace, pod.metadata.name)
    labels = cluster.node_labels(node)
    assert all(labels.get(k) == v for k, v in pool.node_selector.items()), (node, labels)


def assert_stays_queued(cluster, namespace: str, names: list[str], queue: str, seconds: float = 3) -> None:
    """Still suspended, not admitted, no pod, and counted as pending in the LocalQueue."""
    cluster.wait_until(lambda: all(cluster.workload_of(namespace, n) for n in names), 30, "their Workloads")
    time.sleep(seconds)
    for name in names:
        assert cluster.batch.read_namespaced_job(name, namespace).spec.suspend is True
        wl = cluster.workload_of(namespace, name)
        assert not dc.condition_true(wl, "QuotaReserved") and not dc.condition_true(wl, "Admitted"), wl["status"]
        assert not pods_of(cluster, namespace, name)
    cluster.wait_until(lambda: (cluster.custom.get_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", namespace, "localqueues", queue).get("status") or {})
        .get("pendingWorkloads") == len(names), 15, f"{len(names)} pending workload(s) in LocalQueue {queue}")


@pytest.fixture
def team_ns(cluster):
    """Team namespaces used by a test, emptied afterwards so quota is free for the next one."""
    used: list[str] = []
    yield used.append
    for ns in used:
        cluster.clean(ns)


@pytest.fixture(scope="module")
def quota_cfg(cluster, tmp_path_factory):
    """A profiles file with the example's pools and profiles and small-quota teams, applied to the cluster."""
    data = yaml.safe_load(cluster.profiles.read_text())
    data["teams"] = QUOTA_TEAMS
    data.pop("datasets", None)  # the example gives its datasets to its own teams
    path = tmp_path_factory.mktemp("quota") / "profiles.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = load_profiles(path)
    kube = cluster.kube()
    try:
        dc.apply_kueue_objects(kube, cfg)
    finally:
        kube.close()
    return cfg


def test_example_team_job_within_quota_is_admitted_onto_the_mig_pool(cluster, team_ns):
    cfg = load_profiles(cluster.profiles)
    team = cfg.teams["data-science"]
    team_ns(team.namespace)
    pool = cfg.pools["gpumig"]
    (name,) = submit(cluster, team.namespace, local_queue_name("data-science"), pool.resource_name(), 1)
    assert_running_on_pool(cluster, team.namespace, name, pool)
    wl = cluster.workload_of(team.namespace, name)
    assert wl["status"]["admission"]["clusterQueue"] == "team-data-science"
    flavors = wl["status"]["admission"]["podSetAssignments"][0]["flavors"]
    assert flavors[pool.resource_name()] == "gpumig"


def test_beyond_quota_stays_suspended_and_pending(cluster, quota_cfg, team_ns):
    ns = quota_cfg.teams["solo"].namespace
    team_ns(ns)
    pool = quota_cfg.pools["gput4"]
    names = submit(cluster, ns, local_queue_name("solo"), pool.resource_name(), 3)
    within, beyond = names[:2], names[2:]
    cluster.wait_until(lambda: all(cluster.workload_of(ns, n) for n in names), 30, "the Workloads")
    for name in within:
        assert_running_on_pool(cluster, ns, name, pool)
    assert_stays_queued(cluster, ns, beyond, local_queue_name("solo"))


def test_cohort_borrowing_up_to_the_limit(cluster, quota_cfg, team_ns):
    """`borrower` has 1 T4 slot of its own and may borrow 1 of `lender`'s idle ones, not more."""
    ns = quota_cfg.teams["borrower"].namespace
    team_ns(ns)
    pool = quota_cfg.pools["gput4"]
    names = submit(cluster, ns, local_queue_name("borrower"), pool.resource_name(), 3)
    for name in names[:2]:
        assert_running_on_pool(cluster, ns, name, pool)
    assert_stays_queued(cluster, ns, names[2:], local_queue_name("borrower"))
    cq = cluster.custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", "team-borrower")
    usage = {r["name"]: r for f in cq["status"]["flavorsUsage"] if f["name"] == "gput4" for r in f["resources"]}
    assert usage[pool.resource_name()]["total"] in (2, "2")
    assert usage[pool.resource_name()]["borrowed"] in (1, "1")


def test_kueue_webhooks_are_served_on_loopback(cluster, team_ns):
    """Kueue's mutating webhook (URL client config, our CA) suspends a queued Job created unsuspended."""
    cfg = load_profiles(cluster.profiles)
    ns = cfg.teams["data-science"].namespace
    team_ns(ns)
    manifest = job(f"job-{secrets.token_hex(3)}", ns, local_queue_name("data-science"), "nvidia.com/gpu")
    manifest["spec"]["suspend"] = False
    created = cluster.create(manifest)
    assert created["spec"]["suspend"] is True
