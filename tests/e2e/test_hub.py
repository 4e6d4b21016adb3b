"""The real hub on the real dev cluster: picker with live numbers, forged choices refused, spawn on the
right pool, plain-language Pending, fail fast, GPU health check, metrics."""
from __future__ import annotations

import html
import re
import time

import pytest
import requests

pytestmark = pytest.mark.cluster

MIG = "nvidia.com/mig-1g.10gb"
SKU = [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]


def hog(cluster, namespace, name, pool, resource, count):
    """A plain pod that takes `count` of a pool's GPU resource (someone else's workload)."""
    cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                    "spec": {"nodeSelector": {"kubernetes.azure.com/agentpool": pool}, "tolerations": SKU,
                             "containers": [{"name": "c", "image": "busybox", "resources": {
                                 "limits": {resource: str(count), "cpu": "100m", "memory": "64Mi"}}}]}})
    return cluster.wait_bound(namespace, name)


def cards(page: str) -> dict[str, dict[str, str]]:
    out = {}
    for m in re.finditer(r'data-profile="([^"]+)"(.*?)(?=<div class="gpuhub-card"|</fieldset>)', page, re.S):
        body = m.group(2)
        cap = re.search(r'data-free="(\d+)"\s+data-total="(\d+)"\s+data-waiting="(\d+)">([^<]*)<', body)
        out[m.group(1)] = {"text": html.unescape(re.sub(r"<[^>]+>", " ", body)),
                           **({"free": cap.group(1), "total": cap.group(2), "waiting": cap.group(3),
                               "summary": html.unescape(cap.group(4))} if cap else {})}
    return out


def mig_numbers(cluster) -> tuple[int, int]:
    """(free, total) MIG 1g.10gb slices, counted from the API the slow way."""
    nodes = [n for n in cluster.core.list_node().items if n.metadata.labels.get("kubernetes.azure.com/agentpool")
             == "gpumig"]
    total = sum(int(n.status.allocatable.get(MIG, 0)) for n in nodes)
    names = {n.metadata.name for n in nodes}
    used = 0
    for p in cluster.core.list_pod_for_all_namespaces().items:
        if p.spec.node_name in names and p.status.phase not in ("Succeeded", "Failed"):
            used += sum(int((c.resources.limits or {}).get(MIG, 0)) for c in p.spec.containers)
    return total - used, total


def test_picker_shows_the_groups_profiles_with_live_numbers(hub, cluster, namespace):
    hog(cluster, namespace, "someone-else", "gpumig", MIG, 3)
    session = hub.login("alice")
    expected = mig_numbers(cluster)
    deadline = time.monotonic() + 20
    while True:
        page = session.get(f"{hub.url}/hub/spawn", timeout=30).text
        mig = cards(page).get("a100-mig-1g10gb", {})
        if (int(mig.get("free", -1)), int(mig.get("total", -1))) == expected or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    got = cards(page)
    assert list(got) == ["cpu", "t4-shared", "a100-mig-1g10gb"]  # alice is in data-science only
    assert (int(mig["free"]), int(mig["total"])) == expected == (11, 14)
    assert mig["summary"] == "11 of 14 A100 80GB MIG 1g.10gb slices free"
    assert "$0.52/hour" in mig["text"] and "10 GB GPU memory" in mig["text"]


def test_forged_form_post_is_refused_and_creates_nothing(hub, cluster):
    session = hub.login("alice")
    page = session.get(f"{hub.url}/hub/spawn", timeout=30).text
    r = session.post(f"{hub.url}/hub/spawn", data={"profile": "h100-full", "_xsrf": hub.xsrf(session, page)},
                     timeout=60, allow_redirects=False)
    assert r.status_code == 403
    assert "is not available to alice: it is for members of ml-research" in html.unescape(r.text)
    assert not cluster.core.list_namespaced_pod("jhub", label_selector="hub.jupyter.org/username=alice").items
    assert hub.server("alice") is None


def test_forged_api_request_is_refused(hub, cluster):
    hub.login("alice")  # alice exists, with her groups, whatever ran before
    r = hub.api("POST", "/users/alice/server", json={"profile": "h100-full"})
    assert r.status_code == 403, r.text
    r = hub.api("POST", "/users/alice/server", json={"profile": "cpu", "image": "evil/miner"})
    assert r.status_code == 403 and "Unknown server option(s) 'image'" in r.text
    assert not cluster.core.list_namespaced_pod("jhub", label_selector="hub.jupyter.org/username=alice").items


def test_valid_choice_lands_on_the_right_pool_and_jupyterlab_answers(hub, cluster):
    session = hub.login("alice")
    page = session.get(f"{hub.url}/hub/spawn", timeout=30).text
    r = session.post(f"{hub.url}/hub/spawn", data={"profile": "a100-mig-1g10gb", "_xsrf": hub.xsrf(session, page)},
                     timeout=60)
    assert r.ok
    try:
        node = cluster.wait_bound("jhub", "jupyter-alice", timeout=60)
        assert cluster.node_labels(node)["kubernetes.azure.com/agentpool"] == "gpumig"
        deadline = time.monotonic() + 150
        while not (hub.server("alice") or {}).get("ready"):
            assert time.monotonic() < deadline, "alice's server never became ready"
            time.sleep(1)
        lab = session.get(f"{hub.url}/user/alice/lab", timeout=60)
        assert lab.status_code == 200 and "JupyterLab" in lab.text
        metrics = requests.get(f"{hub.url}/hub/metrics", timeout=30).text
        assert 'gpuhub_running_servers{profile="a100-mig-1g10gb"} 1.0' in metrics
    finally:
        hub.stop("alice")


def test_full_pool_streams_a_plain_language_pending_message(hub, cluster, namespace):
    for i, node in enumerate(n.metadata.name for n in cluster.core.list_node(
            label_selector="kubernetes.azure.com/agentpool=gpuh100").items):
        hog(cluster, namespace, f"h100-hog-{i}", "gpuh100", "nvidia.com/gpu", 1)
    hub.login("rita")  # creates rita with her groups (ml-research)
    r = hub.api("POST", "/users/rita/server", json={"profile": "h100-full"})
    assert r.status_code in (201, 202), r.text
    try:
        events = hub.progress("rita", lambda e: "in use" in e.get("message", ""))
        # then the pool's queue ETA (`PoolHistory`; test_picker_eta.py): none yet, or an estimate
        assert re.fullmatch(r"All 2 H100 NVL GPUs are in use; you are waiting for one to free up\. "
                            r"(No estimate yet|Usually frees in .+)\.", events[-1]["message"]), events[-1]
        assert hub.server("rita") and not hub.server("rita")["ready"]
        metrics = requests.get(f"{hub.url}/hub/metrics", timeout=30).text
        assert 'gpuhub_pending_spawns{profile="h100-full"} 1.0' in metrics
    finally:
        hub.stop("rita")


def spawn_failure(hub, user: str, profile: str, status: int) -> str:
    """The failure message of a spawn that must fail fast: in the API answer when it fails within JupyterHub's
    slow-spawn window, else as the progress stream's last event (well before start_timeout either way)."""
    r = hub.api("POST", f"/users/{user}/server", json={"profile": profile})
    if r.status_code in (201, 202):
        events = hub.progress(user, lambda e: e.get("failed"), timeout=120)
        assert events[-1].get("failed"), events
        message = events[-1]["message"]
    else:
        assert r.status_code == status, r.text
        message = r.json()["message"]
    hub.wait_stopped(user)
    return message


def test_impossible_profile_fails_fast_with_a_clear_message(hub):
    hub.login("rita")
    message = spawn_failure(hub, "rita", "h200-ghost", 409)
    assert "The H200-141GB pool (gpughost) has no nodes and cannot grow, so 'H200 (retired pool)' can never " \
           "start. Choose another profile" in message


def test_gpu_health_check_failure_says_it_shortly_and_the_retry_lands_on_another_node(hub, cluster):
    from jupyterhub_gpu_dev.simulator_keys import SIMULATE_GPU_ANNOTATION

    t4 = sorted(n.metadata.name for n in cluster.core.list_node(
        label_selector="kubernetes.azure.com/agentpool=gput4").items)
    broken, other = t4[0], t4[1]
    cluster.core.patch_node(broken, {"metadata": {"annotations": {SIMULATE_GPU_ANNOTATION: "missing"}}})
    cluster.core.patch_node(other, {"spec": {"unschedulable": True}})
    try:
        session = hub.login("bob")
        r = hub.api("POST", "/users/bob/server", json={"profile": "t4-shared"})
        if r.status_code in (201, 202):
            last = hub.progress("bob", lambda e: e.get("failed"), timeout=120)[-1]
            message, page = last["message"], last.get("html_message", "")
            # the spawn page shows the HTML: the short sentence first, announced, the check's words folded
            assert page.startswith('<div role="alert"') and "<details><summary>Details</summary>" in page
            assert page.index("isn&#x27;t working") < page.index("<details>") < page.index(broken)
        else:
            assert r.status_code == 503, r.text
            message = r.json()["message"]
        assert "This T4 node's GPU isn't working; pick another profile or start again — you'll get another " \
               "node." in message
        assert message.index("another node.") < message.index(f"GPU check failed on node {broken}: this server "
                                                               "was given 1 x nvidia.com/gpu")
        hub.wait_stopped("bob")
        # the failed server was cleaned up: no pod is left holding the GPU
        assert not cluster.core.list_namespaced_pod("jhub", label_selector="hub.jupyter.org/username=bob").items
        # the picker marks the T4 pool as degraded while its node is failing
        t4_card = cards(session.get(f"{hub.url}/hub/spawn", timeout=30).text)["t4-shared"]["text"]
        assert "degraded: 1 node's GPU is failing its check (of 2); new servers keep off it" in t4_card
        # start again: the hub keeps the new server off the failing node
        cluster.core.patch_node(other, {"spec": {"unschedulable": False}})
        r = hub.api("POST", "/users/bob/server", json={"profile": "t4-shared"})
        assert r.status_code in (201, 202), r.text
        assert cluster.wait_bound("jhub", "jupyter-bob", timeout=90) == other
    finally:
        hub.stop("bob")
        cluster.core.patch_node(broken, {"metadata": {"annotations": {SIMULATE_GPU_ANNOTATION: None}}})
        cluster.core.patch_node(other, {"spec": {"unschedulable": False}})
