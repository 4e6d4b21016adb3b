"""Queue ETA for a full pool on the real hub and dev cluster (`PoolHistory`): pods really queue on the
H100 pool and the real scheduler binds them as slots free; the hub learns the waits from its one pod watch,
and the picker and the spawn progress say how long a slot usually takes to free."""
from __future__ import annotations

import re
import time

import pytest

from jupyterhub_gpu_dev.testing import wait_until

from .test_hub import SKU, cards, hog

pytestmark = pytest.mark.cluster

POOL = "kubernetes.azure.com/agentpool"
#: Each queued pod must wait longer than wait_estimate.QUEUED_S (5 s) to count as queue history.
QUEUED_FOR = 6.5


def queued_pod(cluster, namespace, name):
    cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                    "spec": {"nodeSelector": {POOL: "gpuh100"}, "tolerations": SKU, "terminationGracePeriodSeconds": 0,
                             "containers": [{"name": "c", "image": "busybox", "resources": {
                                 "limits": {"nvidia.com/gpu": "1", "cpu": "100m", "memory": "64Mi"}}}]}})


def test_full_pool_shows_its_eta_in_the_picker_and_the_progress(hub, cluster, namespace):
    rita = hub.login("rita")  # ml-research: may use h100-full
    rita.get(f"{hub.url}/hub/spawn", timeout=30).raise_for_status()  # the hub's pod watch runs from here on
    nodes = cluster.core.list_node(label_selector=f"{POOL}=gpuh100").items
    for i in range(len(nodes)):
        hog(cluster, namespace, f"eta-hog-{i}", "gpuh100", "nvidia.com/gpu", 1)
    names = [f"eta-q{i}" for i in range(8)]  # 2 slots: 4 rounds, the pool full at the end
    for name in names:  # a line forms behind the full pool
        queued_pod(cluster, namespace, name)
    created = time.monotonic()

    def pods_now():
        return [(p.metadata.name, p.spec.node_name, p.status.phase, p.spec.scheduling_gates,
                 [(c.type, c.status, c.reason) for c in p.status.conditions or []])
                for p in cluster.core.list_namespaced_pod(namespace).items]

    def bound():
        return {p.metadata.name for p in cluster.core.list_namespaced_pod(namespace).items
                if p.spec.node_name and p.metadata.deletion_timestamp is None}

    wait_until(lambda: time.monotonic() - created > QUEUED_FOR and not bound() & set(names), 60,
               "the queued pods waiting long enough to be queue history")
    seen: set[str] = set()  # the queued pods bound so far
    while True:  # free every slot, round by round, until each queued pod got one
        holding = bound()
        seen |= holding & set(names)  # before deleting: a pod bound since the last look counts too
        if seen == set(names):
            break
        for name in holding:
            cluster.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        # Every freed slot must be taken before the next round: a round that went on after the first of two
        # binds deleted one pod only, and an odd round left the pool half full at the end, waiting forever.
        wanted = min(len(holding), len(set(names) - seen))
        wait_until(lambda: len(bound() & set(names) - seen) >= wanted, 60,
                   f"the next {wanted} queued pods bound (bound so far: {sorted(seen)}; "
                   f"at this round's start: {pods_now()})")
    wait_until(lambda: len(bound()) == len(nodes), 60, "the last queued pods holding the pool: full again")

    def card():
        c = cards(rita.get(f"{hub.url}/hub/spawn", timeout=30).text).get("h100-full", {})
        return c if "usually frees in" in c.get("text", "") else None

    h100 = wait_until(card, 30, "the ETA on the full H100 card")
    assert "pool full" in h100["summary"] and "usually frees in ~1 min" in h100["text"], h100
    page = rita.get(f"{hub.url}/hub/spawn", timeout=30).text
    p50 = re.search(r'data-profile="h100-full".*?data-eta-p50="(\d+)"', page, re.S)
    assert p50 and QUEUED_FOR - 1 <= int(p50.group(1)) <= 90, p50  # the waits were seconds, not minutes

    r = hub.api("POST", "/users/rita/server", json={"profile": "h100-full"})
    assert r.status_code in (201, 202), r.text
    try:
        events = hub.progress("rita", lambda e: "in use" in e.get("message", ""))
        assert events[-1]["message"].startswith("All 2 H100 NVL GPUs are in use; you are waiting for one to free up.")
        assert events[-1]["message"].endswith(" Usually frees in ~1 min."), events[-1]
    finally:
        hub.stop("rita")
