"""A pool's measured time to add a node on the real hub and dev cluster (`hub/node_add_times.py`): the spot A100
pool is emptied, a pod waits unschedulable for it, a KWOK node is added and turns Ready; the hub measured that
from its one node and pod watch, so the picker's card for the pool at zero says "starts in ~1 min (a node is
added)" instead of the old words, and a server started there is counted down on the spawn page."""
from __future__ import annotations

import pytest

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu_dev.nodes import node_manifest
from jupyterhub_gpu_dev.testing import wait_until

from .test_hub import cards

pytestmark = pytest.mark.cluster

POOL = "kubernetes.azure.com/agentpool"
NAME = "spota100"
OLD_WORDS = "the pool scales up from zero: a node takes a few minutes"


def test_a_scale_up_the_hub_watched_becomes_the_pools_time_to_add_a_node(hub, cluster, namespace):
    pool = load_profiles(EXAMPLE_PROFILES).pools[NAME]
    tolerations = [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
                   for t in pool.effective_taints]
    rita = hub.login("rita")  # ml-research: may use a100-spot
    rita.get(f"{hub.url}/hub/spawn", timeout=30).raise_for_status()  # the hub's watches run from here on
    before = [n.metadata.name for n in cluster.core.list_node(label_selector=f"{POOL}={NAME}").items]

    def card():
        return cards(rita.get(f"{hub.url}/hub/spawn", timeout=30).text).get("a100-spot", {})

    def delete_node(name):
        try:
            cluster.core.delete_node(name)
        except Exception as e:  # already gone
            if getattr(e, "status", None) != 404:
                raise

    new = node_manifest(NAME, pool, 7)
    try:
        for name in before:
            delete_node(name)
        at_zero = wait_until(lambda: (c := card()) and "running now" in c.get("text", "") and c, 60,
                             "the spot pool at zero in the picker")
        assert OLD_WORDS in at_zero["text"], at_zero  # no scale-up seen yet: no made-up number

        cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "asks-for-a-node",
                                                                        "namespace": namespace},
                        "spec": {"nodeSelector": {POOL: NAME}, "tolerations": tolerations,
                                 "terminationGracePeriodSeconds": 0,
                                 "containers": [{"name": "c", "image": "busybox", "resources": {
                                     "limits": {"nvidia.com/gpu": "1", "cpu": "100m", "memory": "64Mi"}}}]}})

        def unschedulable():
            conds = cluster.core.read_namespaced_pod("asks-for-a-node", namespace).status.conditions or []
            return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conds)

        wait_until(unschedulable, 60, "the pod waiting unschedulable for the empty pool")
        cluster.create(new)  # the "autoscaler": a KWOK node, made Ready by KWOK
        assert cluster.wait_bound(namespace, "asks-for-a-node", 60) == new["metadata"]["name"]
        cluster.core.delete_namespaced_pod("asks-for-a-node", namespace, grace_period_seconds=0)
        delete_node(new["metadata"]["name"])  # scaled back to zero: the card tells the measured time now
        measured = wait_until(lambda: (c := card()) and "(a node is added)" in c.get("text", "") and c, 60,
                              "the measured time to add a node on the card")
        assert "starts in ~1 min (a node is added)" in measured["text"] and OLD_WORDS not in measured["text"]

        r = hub.api("POST", "/users/rita/server", json={"profile": "a100-spot"})
        assert r.status_code in (201, 202), r.text
        try:
            events = hub.progress("rita", lambda e: "a node is being added" in e.get("message", ""), timeout=120)
            assert events[-1]["message"].startswith("The NVIDIA A100 80GB (spot) pool had no nodes when your "
                                                    "server asked; a node is being added"), events[-1]
        finally:
            hub.stop("rita")
    finally:
        delete_node(new["metadata"]["name"])
        for name in before:
            try:
                cluster.create(node_manifest(NAME, pool, int(name.rsplit("vmss", 1)[1])))
            except Exception as e:
                if getattr(e, "status", None) != 409:
                    raise
        wait_until(lambda: len(cluster.core.list_node(label_selector=f"{POOL}={NAME}").items) == len(before), 60,
                   "the spot pool's nodes back")
