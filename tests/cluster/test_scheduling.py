"""GPUSpawner's pods, created through the API, scheduled by the real kube-scheduler onto KWOK pools."""
from __future__ import annotations

import secrets
import time

import pytest
from kubernetes.utils.quantity import parse_quantity

from jupyterhub_gpu.model.profiles_file import load_profiles
from jupyterhub_gpu_dev.testing import pod_outside_jhub

pytestmark = pytest.mark.cluster

#: (profile, groups that may use it)
PROFILES = [
    ("cpu", []),
    ("t4-shared", []),
    ("a100-mig-1g10gb", ["data-science"]),
    ("h100-full", ["ml-research"]),
    ("a100-spot", ["ml-research"]),
]
GROUPS = dict(PROFILES)


async def spawner_pod(cluster, namespace: str, slug: str) -> dict:
    """The pod GPUSpawner builds for `slug`, named uniquely in `namespace`: scheduling onto pools is what is tested
    here (a GPU server's admission through its team's queue in the hub namespace is tests/queue's)."""
    user = f"u{secrets.token_hex(3)}"
    return await pod_outside_jhub(cluster, namespace, slug, user, GROUPS[slug], f"jupyter-{slug}-{user}")


def create(cluster, namespace: str, pod: dict) -> str:
    cluster.create(pod)
    return pod["metadata"]["name"]


def pool_of(cluster, slug: str):
    cfg = load_profiles(cluster.profiles)
    return cfg.pool_of(cfg.profile(slug))


def on_pool(labels: dict[str, str], pool) -> bool:
    return all(labels.get(k) == v for k, v in pool.node_selector.items())


def capacity(cluster, pool, pod: dict) -> int:
    """How many such pods the pool's nodes hold, from their allocatable and the pod's requests."""
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    selector = ",".join(f"{k}={v}" for k, v in pool.node_selector.items())
    total = 0
    for node in cluster.core.list_node(label_selector=selector).items:
        alloc = node.status.allocatable
        total += min(int(parse_quantity(alloc[r]) // parse_quantity(q)) for r, q in requests.items())
    return total


@pytest.mark.parametrize("slug", [p for p, _ in PROFILES])
async def test_profile_pod_is_bound_to_a_node_of_its_pool(cluster, namespace, slug):
    name = create(cluster, namespace, await spawner_pod(cluster, namespace, slug))
    node = cluster.wait_bound(namespace, name)
    labels = cluster.node_labels(node)
    pool = pool_of(cluster, slug)
    assert on_pool(labels, pool), f"{slug} landed on {node} with labels {labels}"
    assert labels["gpuhub.io/simulated"] == "true"
    if pool.is_gpu:
        assert labels["nvidia.com/gpu.present"] == "true"
    else:
        assert "kubernetes.azure.com/accelerator" not in labels
    # KWOK plays the kubelet: the bound pod becomes Running and Ready
    cluster.wait_until(lambda: cluster.core.read_namespaced_pod(name, namespace).status.phase == "Running", 20,
                       f"{name} to be Running")


async def test_cpu_pod_stays_pending_when_the_cpu_pool_is_full(cluster, namespace):
    """Free GPU nodes never take a CPU profile's pod: their taints are not tolerated."""
    first = await spawner_pod(cluster, namespace, "cpu")
    pool = pool_of(cluster, "cpu")
    fits = capacity(cluster, pool, first)
    assert fits > 0
    names = [create(cluster, namespace, first)]
    names += [create(cluster, namespace, await spawner_pod(cluster, namespace, "cpu")) for _ in range(fits)]
    extra = names[-1]
    for name in names[:-1]:
        assert on_pool(cluster.node_labels(cluster.wait_bound(namespace, name)), pool)
    failures = cluster.wait_until(lambda: cluster.scheduling_failures(namespace, extra), 30,
                                  f"a FailedScheduling event for {extra}")
    assert "untolerated taint" in failures[-1] and "Insufficient" in failures[-1], failures[-1]
    time.sleep(2)
    assert cluster.core.read_namespaced_pod(extra, namespace).spec.node_name is None
    assert cluster.core.read_namespaced_pod(extra, namespace).status.phase == "Pending"


@pytest.mark.parametrize("slug", ["a100-mig-1g10gb", "t4-shared", "h100-full"])
async def test_gpu_pod_beyond_the_pools_capacity_stays_pending_naming_the_gpu_resource(cluster, namespace, slug):
    first = await spawner_pod(cluster, namespace, slug)
    pool = pool_of(cluster, slug)
    resource = load_profiles(cluster.profiles).resource_name(load_profiles(cluster.profiles).profile(slug))
    fits = capacity(cluster, pool, first)
    names = [create(cluster, namespace, first)]
    names += [create(cluster, namespace, await spawner_pod(cluster, namespace, slug)) for _ in range(fits)]
    extra = names[-1]
    for name in names[:-1]:
        assert on_pool(cluster.node_labels(cluster.wait_bound(namespace, name)), pool)
    failures = cluster.wait_until(lambda: cluster.scheduling_failures(namespace, extra), 30,
                                  f"a FailedScheduling event for {extra}")
    assert f"Insufficient {resource}" in failures[-1], failures[-1]
    assert cluster.core.read_namespaced_pod(extra, namespace).spec.node_name is None
