"""GPUs through DRA end to end (issue 29): the example profiles-dra.yaml on a dev cluster of its own (Kueue started
with the product's deviceClassMappings), a real hub and its gpu-jobs service, the dev agent running the pods.
What a user sees and gets: the picker's live numbers come from the ResourceSlices and claims; an `a100-dra` server
and jobs get their GPU through a ResourceClaim the real scheduler allocates on their node's slice; Kueue counts
the devices against the team's `dra-a100: 2`, so a third holder waits until one ends; with every whole A100 taken
an `a100-any` server gets its prioritized list's 3g.40gb slice; a 2-node job takes both, one claim per rank on two
nodes. The pieces alone: tests/cluster/test_dra_devcluster.py.
"""
from __future__ import annotations

import html
import re
import sys
import time
from pathlib import Path

import pytest
import requests
from cluster.test_dra_devcluster import allocation_of, custom

from jupyterhub_gpu.builders import dra
from jupyterhub_gpu.contract import GPU_CHECK_CONTAINER, JOB_LABEL
from jupyterhub_gpu.model.profiles_file import load_profiles
from jupyterhub_gpu_dev import cluster as dc
from jupyterhub_gpu_dev.devhub import NAMESPACE as HUB_NS
from jupyterhub_gpu_dev.testing import DevCluster, JobsHub, jobs_hub

pytestmark = pytest.mark.cluster

PROFILES = Path(__file__).resolve().parents[2] / "jupyterhub_gpu" / "examples" / "profiles-dra.yaml"
NODES = {"system": 1, "gput4": 1, "dra-a100": 2, "dra-a100mig": 1}  # 4 whole A100s, 2 x 3g.40gb
TEAM_NS = "team-ds"
USERS = ["ana", "ben", "cy", "dee", "eve"]
KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
#: A job that holds its GPU until cancelled.
SLEEP_NB = {"nbformat": 4, "nbformat_minor": 5, "metadata": KERNEL, "cells": [
    {"cell_type": "code", "id": "s", "metadata": {}, "outputs": [], "execution_count": None,
     "source": "import time\ntime.sleep(3600)"}]}


def cards(page: str) -> dict[str, tuple[int, int] | str]:
    """Each picker card's (free, total), or its text where it shows no numbers."""
    out: dict[str, tuple[int, int] | str] = {}
    for m in re.finditer(r'data-profile="([^"]+)"(.*?)(?=<div class="gpuhub-card"|</fieldset>)', page, re.S):
        cap = re.search(r'data-free="(\d+)"\s+data-total="(\d+)"', m.group(2))
        out[m.group(1)] = (int(cap.group(1)), int(cap.group(2))) if cap else html.unescape(
            re.sub(r"<[^>]+>", " ", m.group(2)))
    return out


def card_text(page: str, slug: str) -> str:
    """The words of one picker card."""
    m = re.search(rf'data-profile="{re.escape(slug)}"(.*?)(?=<div class="gpuhub-card"|</fieldset>)', page, re.S)
    assert m, f"no card for {slug}"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", m.group(1))).split())


def picker(hub: JobsHub, user: str) -> dict:
    return cards(hub.login(user).get(f"{hub.url}/hub/spawn", timeout=30).text)


def picker_shows(hub: JobsHub, slug: str, numbers: tuple[int, int], what: str) -> dict:
    """The picker once `slug`'s card shows (free, total) `numbers` (the last page's cards in the failure)."""
    last: list[dict] = [{}]

    def shows():
        last[0] = picker(hub, "ben")  # ben runs jobs only: with a server, /hub/spawn sends to it
        return last[0].get(slug) == numbers and last[0]

    try:
        return hub_wait(shows, 30, what)
    except AssertionError as e:
        raise AssertionError(f"{e}; the picker showed {last[0]}") from None


def hub_wait(check, timeout: float, what: str):
    from jupyterhub_gpu_dev.testing import wait_until

    return wait_until(check, timeout, what, 0.5)


def start_server(hub: JobsHub, user: str, profile: str) -> None:
    hub.token(user)  # logs in: the DevAuthenticator gives the groups
    r = requests.post(f"{hub.url}/hub/api/users/{user}/server", headers=hub.auth(hub.admin_token),
                      json={"profile": profile}, timeout=60)
    assert r.status_code in (201, 202), r.text


def server_ready(hub: JobsHub, user: str) -> bool:
    model = requests.get(f"{hub.url}/hub/api/users/{user}", headers=hub.auth(hub.admin_token), timeout=30).json()
    return bool((model.get("servers") or {}).get("", {}).get("ready"))


def job_pod(c: DevCluster, name: str) -> str:
    pods = c.wait_until(lambda: c.core.list_namespaced_pod(TEAM_NS, label_selector=f"{JOB_LABEL}={name}").items,
                        60, f"the pod of job {name}")
    return pods[0].metadata.name


def on_its_node(c: DevCluster, slices: dict, namespace: str, pod: str) -> dict:
    """The pod's claim's one result: a device of the slice of the node the pod is bound to."""
    node = c.wait_bound(namespace, pod, 60)
    claim, (r, *more) = allocation_of(c, namespace, pod)
    assert not more and r["driver"] == "gpu.nvidia.com" and r["pool"] == node, r
    assert r["device"] in [d["name"] for d in slices[node]["spec"]["devices"]], (r, slices[node])
    assert any(x["name"] == pod for x in claim["status"]["reservedFor"])
    return r


def workload(c: DevCluster, namespace: str, owner: str) -> dict:
    return c.wait_until(lambda: c.workload_of(namespace, owner), 30, f"the Workload of {owner}")


def admitted(w: dict) -> bool:
    return dc.condition_true(w, "Admitted")


def test_dra_gpus_through_the_hub_gpu_jobs_and_kueue(scratch_root, tmp_path):
    t0 = time.monotonic()
    cfg = load_profiles(PROFILES)
    dc.up(PROFILES, NODES, root=scratch_root, say=lambda m: print(f"[devcluster] {m}", file=sys.stderr))
    c = DevCluster(scratch_root, PROFILES)
    slices = {s["spec"]["nodeName"]: s for s in custom(c, "resourceslices")}
    t_up = time.monotonic() - t0
    marks: dict[str, float] = {}
    with jobs_hub(c, tmp_path / "hub", PROFILES, {u: ["data-science"] for u in USERS}) as hub:
        marks["hub"] = time.monotonic() - t0
        # 1. the picker's numbers come from the slices: 4 whole A100s and 2 3g.40gb slices, all free
        seen = c.wait_until(lambda: (p := picker(hub, "ana")) and isinstance(p.get("a100-dra"), tuple) and p, 60,
                            "the picker's numbers for the dra profiles")
        assert seen["a100-dra"] == (4, 4) and seen["a100-3g"] == (2, 2), seen
        marks["picker"] = time.monotonic() - t0

        # 2. a100-dra server: its claim is allocated a device of its node's slice; the GPU check passes
        start_server(hub, "ana", "a100-dra")
        r = on_its_node(c, slices, HUB_NS, "jupyter-ana")
        assert r["request"] == dra.REQUEST_NAME and r["device"] in ("gpu-0", "gpu-1"), r
        c.wait_until(lambda: server_ready(hub, "ana"), 180, "ana's a100-dra server to be ready", 1)
        check = hub.state / "pods" / f"{HUB_NS}_jupyter-ana.init-{GPU_CHECK_CONTAINER}.log"
        assert "GPU check passed" in check.read_text(), check.read_text()
        (ps,) = workload(c, HUB_NS, "jupyter-ana")["status"]["admission"]["podSetAssignments"]
        assert ps["flavors"]["nvidia.com/gpu"] == "dra-a100" and ps["resourceUsage"]["nvidia.com/gpu"] == "1", ps
        marks["server"] = time.monotonic() - t0

        # 3. a job on a100-dra through gpu-jobs runs with its claim allocated (the team's template)
        ra = hub.submit("ben", profile="a100-dra", notebook=SLEEP_NB)
        assert ra.status_code == 201, ra.text
        job_a = ra.json()["name"]
        c.wait_until(lambda: hub.status("ben", job_a)["state"] == "Running", 120, "job A to run", 1)
        pod_a = job_pod(c, job_a)
        assert c.core.read_namespaced_pod(pod_a, TEAM_NS).spec.resource_claims[0].resource_claim_template_name \
            == dra.job_template_name(cfg.profile("a100-dra"))
        on_its_node(c, slices, TEAM_NS, pod_a)
        (ps,) = workload(c, TEAM_NS, job_a)["status"]["admission"]["podSetAssignments"]
        assert ps["resourceUsage"]["nvidia.com/gpu"] == "1", ps
        marks["job"] = time.monotonic() - t0

        # 4. the team's dra-a100: 2 is used (ana's server, job A): job B waits, with no pod, until A ends
        rb = hub.submit("cy", profile="a100-dra", notebook=SLEEP_NB)
        assert rb.status_code == 201, rb.text
        job_b = rb.json()["name"]
        queued = c.wait_until(lambda: (s := hub.status("cy", job_b))["state"] == "Queued" and s, 30, "job B queued")
        time.sleep(3)  # an admission in this window would be the quota not counting the devices
        assert not admitted(workload(c, TEAM_NS, job_b)), queued
        assert not c.core.list_namespaced_pod(TEAM_NS, label_selector=f"{JOB_LABEL}={job_b}").items
        assert hub.call("ben", "DELETE", f"/jobs/{job_a}").status_code == 200
        c.wait_until(lambda: admitted(workload(c, TEAM_NS, job_b)), 60, "job B to be admitted once A ended")
        c.wait_until(lambda: hub.status("cy", job_b)["state"] == "Running", 120, "job B to run", 1)
        on_its_node(c, slices, TEAM_NS, job_pod(c, job_b))
        marks["quota"] = time.monotonic() - t0

        # 5. a100-any (not queued): whole A100s while any is free, then the 3g.40gb slice
        requests_seen = []
        for user in ("dee", "eve"):
            start_server(hub, user, "a100-any")
            requests_seen.append(on_its_node(c, slices, HUB_NS, f"jupyter-{user}")["request"])
        assert requests_seen == [f"{dra.REQUEST_NAME}/c0-dra-a100"] * 2, requests_seen
        full = picker_shows(hub, "a100-dra", (0, 4), "the picker to show no whole A100 free")
        assert full["a100-any"] == (0, 4), full  # its own GPUs: taken; its card says what it gets instead
        said = card_text(hub.login("ben").get(f"{hub.url}/hub/spawn", timeout=30).text, "a100-any")
        assert "2 of 2 A100 80GB MIG (DRA) 3g.40gb slices free instead" in said, said
        assert "starts right away with 1 A100 80GB MIG (DRA) 3g.40gb slice" in said, said
        start_server(hub, "cy", "a100-any")  # cy's job B runs; cy has no server yet
        r = on_its_node(c, slices, HUB_NS, "jupyter-cy")
        assert r["request"] == f"{dra.REQUEST_NAME}/c1-mig-3g-40gb", r
        assert r["device"].startswith("gpu-0-mig-3g40gb"), r
        c.wait_until(lambda: server_ready(hub, "cy"), 180, "cy's a100-any server (on a slice) to be ready", 1)
        check = hub.state / "pods" / f"{HUB_NS}_jupyter-cy.init-{GPU_CHECK_CONTAINER}.log"
        assert "GPU check passed" in check.read_text(), check.read_text()
        after = picker_shows(hub, "a100-3g", (1, 2), "the picker to show one slice taken")
        marks["alternatives"] = time.monotonic() - t0

        # 6. a 2-node job (JobSet): the quota's two GPUs at once, one claim per rank, on two different nodes
        for user in ("ana", "dee", "eve"):
            requests.delete(f"{hub.url}/hub/api/users/{user}/server", headers=hub.auth(hub.admin_token), timeout=60)
        assert hub.call("cy", "DELETE", f"/jobs/{job_b}").status_code == 200
        rg = hub.submit("ben", profile="a100-dra", notebook=SLEEP_NB, nodes=2)
        assert rg.status_code == 201, rg.text
        gang = rg.json()["name"]
        c.wait_until(lambda: hub.status("ben", gang)["state"] == "Running", 180, "the 2-node job to run", 1)
        ranks = c.core.list_namespaced_pod(TEAM_NS, label_selector=f"{JOB_LABEL}={gang}").items
        assert len(ranks) == 2, [p.metadata.name for p in ranks]
        held = [on_its_node(c, slices, TEAM_NS, p.metadata.name) for p in ranks]
        assert held[0]["pool"] != held[1]["pool"], held  # the ranks repel each other by hostname
        (ps,) = workload(c, TEAM_NS, gang)["status"]["admission"]["podSetAssignments"]
        assert ps["count"] == 2 and ps["resourceUsage"]["nvidia.com/gpu"] == "2", ps
        marks["two_nodes"] = time.monotonic() - t0
    print(f"\n[dra e2e] cluster up {t_up:.1f} s; marks {({k: round(v, 1) for k, v in marks.items()})}; "
          f"total {time.monotonic() - t0:.1f} s; picker before {seen}; after {after}", file=sys.stderr)
