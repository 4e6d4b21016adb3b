"""Multi-node jobs on the dev cluster: the real JobSet controller and Kueue's JobSet integration, a real hub
and gpu-jobs, and the dev node agent (SIMULATOR) running every rank as a local process with the pod
hostnames a headless Service gives. The pure half is tests/jobs/test_multinode.py."""
from __future__ import annotations

import json
import time

import pytest

from jupyterhub_gpu.contract import JOB_LABEL, JOBSET_API, JOBSET_NAME_LABEL
from jupyterhub_gpu_dev.testing import JobsHub, jobs_hub, write_profiles

pytestmark = pytest.mark.cluster

NS = "team-gang"
#: Two H100 nodes' worth of quota (the dev cluster has 2 nodes per pool): a 2-node job fits only when
#: no other H100 job holds one.
GANG = {"namespace": NS, "quota": {"gpuh100": 2}}
GROUPS = {"gina": ["gang"], "gus": ["gang"], "alice": ["data-science"]}

#: A small all-reduce over TCP sockets, using only the env contract: every rank sends (rank + 1)^2 to rank
#: 0 at MASTER_ADDR:MASTER_PORT; rank 0 sums and sends the total back. 2 ranks: 1 + 4 = 5.
ALLREDUCE = """\
import os, socket, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
assert os.environ["NODE_RANK"] == str(rank) and os.environ["LOCAL_RANK"] == "0"
mine = (rank + 1) ** 2
if rank == 0:
    # bind rank 0's own address (its stable hostname), as every rank reaches it
    with socket.create_server((socket.gethostbyname(addr), port)) as srv:
        conns = [srv.accept()[0] for _ in range(world - 1)]
        total = mine + sum(int(c.makefile().readline()) for c in conns)
        for c in conns:
            c.sendall(f"{total}\\n".encode())
            c.close()
else:
    deadline = time.time() + 120
    while True:
        try:
            c = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.5)
    c.sendall(f"{mine}\\n".encode())
    total = int(c.makefile().readline())
print(f"rank {rank} of {world}: reduced {total}")
"""
CELL = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
ALLREDUCE_NB = {"nbformat": 4, "nbformat_minor": 5, "metadata": KERNEL,
                "cells": [{**CELL, "id": "a", "source": ALLREDUCE}]}
#: Runs until cancelled, checkpointing one step a second in the shared CHECKPOINT_DIR (rank 0 writes).
SLOW_NB = {"nbformat": 4, "nbformat_minor": 5, "metadata": KERNEL, "cells": [{**CELL, "id": "s", "source": (
    "import os, pathlib, time\nck = pathlib.Path(os.environ['CHECKPOINT_DIR']) / 'step'\n"
    "start = int(ck.read_text() or 0) if ck.exists() else 0\nprint('resumed at', start)\n"
    "for i in range(start, 100000):\n    time.sleep(1)\n"
    "    if os.environ['RANK'] == '0':\n        ck.write_text(str(i + 1))\n")}]}


def gang_team(data: dict) -> None:
    data["teams"]["gang"] = GANG
    h100 = next(p for p in data["profiles"] if p["slug"] == "h100-full")
    h100["groups"] = ["ml-research", "gang"]
    assert h100["max_nodes"] == 2


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory) -> JobsHub:
    profiles = write_profiles(cluster, tmp_path_factory.mktemp("gangprofiles") / "profiles.yaml", gang_team)
    with jobs_hub(cluster, tmp_path_factory.mktemp("ganghub"), profiles, GROUPS) as hub:
        yield hub


def ours(cluster, ns: str) -> dict[str, set]:
    """JobSets, Jobs, pods and ConfigMaps of gpu-jobs in a namespace."""
    sets = cluster.custom.list_namespaced_custom_object(*JOBSET_API.split("/"), ns, "jobsets")["items"]
    return {"jobsets": {j["metadata"]["name"] for j in sets},
            "jobs": {j.metadata.name for j in cluster.batch.list_namespaced_job(ns).items},
            "pods": {p.metadata.name for p in cluster.core.list_namespaced_pod(ns).items},
            "configmaps": {c.metadata.name for c in cluster.core.list_namespaced_config_map(
                ns, label_selector=JOB_LABEL).items}}


def pods_of(cluster, name: str) -> list:
    return cluster.core.list_namespaced_pod(NS, label_selector=f"{JOB_LABEL}={name}").items


def gang_policies(cluster, name: str) -> list:
    """The NetworkPolicies in the namespace that select the ranks of JobSet `name`."""
    from kubernetes import client

    pols = client.NetworkingV1Api(cluster.core.api_client).list_namespaced_network_policy(NS).items
    return [p for p in pols if (p.spec.pod_selector.match_labels or {}).get(JOBSET_NAME_LABEL) == name]


def submit(hub: JobsHub, user: str, nb: dict, **kw) -> str:
    r = hub.submit(user, profile="h100-full", notebook=nb, notebook_path="work/train.ipynb", **kw)
    assert r.status_code == 201, r.text
    return r.json()["name"]


def cancel_and_wait(cluster, hub: JobsHub, user: str, name: str) -> None:
    r = hub.call(user, "DELETE", f"/jobs/{name}")
    assert r.status_code == 200, r.text
    cluster.wait_until(lambda: not pods_of(cluster, name), 90, f"every pod of {name} to go")


def test_forged_nodes_are_refused_and_nothing_is_created(cluster, hub):
    hub.token("gina")
    hub.token("alice")
    before = ours(cluster, NS), ours(cluster, "team-ds")
    for user, kw, needle in [("gina", {"profile": "h100-full", "nodes": 3}, "nodes must be from 1 to 2"),
                             ("gina", {"profile": "h100-full", "nodes": "2; rm -rf"}, "nodes must be a whole number"),
                             ("alice", {"profile": "a100-mig-1g10gb", "nodes": 2}, "runs on one node")]:
        r = hub.submit(user, **kw)
        assert r.status_code == 400 and needle in r.json()["message"], r.text
    r = hub.call("gina", "GET", "/jobs/no-such-job/logs", params={"rank": "1"})
    assert r.status_code == 404
    assert (ours(cluster, NS), ours(cluster, "team-ds")) == before


def test_a_gang_waits_for_all_its_nodes_then_its_ranks_all_reduce(cluster, hub):
    """With one H100 of the team's two held, the 2-node job is queued with no pod at all; once the H100
    is free, Kueue admits both ranks at once and they all-reduce over TCP with the env contract only."""
    blocker = submit(hub, "gus", SLOW_NB)
    cluster.wait_until(lambda: hub.status("gus", blocker)["state"] == "Running", 90, "the single-node job to run")
    name = submit(hub, "gina", ALLREDUCE_NB, nodes=2)
    try:
        queued = cluster.wait_until(lambda: (s := hub.status("gina", name))["state"] == "Queued"
                                    and "insufficient" in s.get("kueue_message", "") and s, 30, "Kueue's verdict")
        assert queued["nodes"] == 2 and queued["message"].startswith("waiting for 2 nodes"), queued
        assert [r["state"] for r in queued["ranks"]] == ["waiting", "waiting"]
        wl = cluster.wait_until(lambda: cluster.workloads(NS) and [w for w in cluster.workloads(NS) if any(
            o["name"] == name for o in w["metadata"].get("ownerReferences") or [])], 30, "the JobSet's Workload")[0]
        assert sum(ps["count"] for ps in wl["spec"]["podSets"]) == 2  # one Workload for the whole gang
        time.sleep(3)  # a pod created in this window would be the gang admitted partly
        assert not pods_of(cluster, name)
        ranks = cluster.batch.list_namespaced_job(NS, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}").items
        assert all(j.spec.suspend for j in ranks)  # the JobSet controller keeps its Jobs suspended too
        t0 = time.monotonic()
        cancel_and_wait(cluster, hub, "gus", blocker)

        def done():
            s = hub.status("gina", name)
            return s if s["state"] in ("Succeeded", "Failed") else None

        final = cluster.wait_until(done, 180, "the 2-node job to finish", interval=0.5)
        rank1 = hub.call("gina", "GET", f"/jobs/{name}/logs", params={"rank": "1"}).text
        assert final["state"] == "Succeeded", (final, hub.call("gina", "GET", f"/jobs/{name}/logs").text, rank1)
        print(f"admitted and finished {time.monotonic() - t0:.1f} s after the quota freed")
        assert len({r["node"] for r in final["ranks"]}) == 2, final["ranks"]  # one rank per node
        out = hub.process.share / "gina" / "gpu-jobs" / name
        text = json.dumps(json.loads((out / "train.ipynb").read_text())["cells"])
        assert "rank 0 of 2: reduced 5" in text
        assert "rank 1 of 2: reduced 5" in json.dumps(json.loads((out / "rank-1" / "train.ipynb").read_text()))
        assert "[gpuhub-runner]" in rank1
    finally:
        for job in (blocker, name):
            hub.call("gus" if job == blocker else "gina", "DELETE", f"/jobs/{job}")
        cluster.wait_until(lambda: not pods_of(cluster, blocker) and not pods_of(cluster, name), 90, "cleanup")


def test_an_evicted_rank_restarts_the_gang_from_the_checkpoint_and_cancel_removes_every_rank(cluster, hub):
    name = submit(hub, "gina", SLOW_NB, nodes=2)
    step = hub.process.share / "gina" / "gpu-jobs" / name / "checkpoint" / "step"
    try:
        cluster.wait_until(lambda: hub.status("gina", name)["state"] == "Running", 120, "both ranks to run")
        cluster.wait_until(lambda: step.exists() and int(step.read_text() or 0) >= 3, 60, "3 checkpointed steps",
                           interval=0.5)
        # the gang's own NetworkPolicy (the dev cluster does not enforce NetworkPolicies: the rendered policy
        # is what is checked here, the ranks' traffic is not): exactly this JobSet's pods, from each other only
        (pol,) = gang_policies(cluster, name)
        gang = {"matchLabels": {JOBSET_NAME_LABEL: name}}
        assert pol.spec.pod_selector.to_dict()["match_labels"] == gang["matchLabels"]
        assert pol.spec.pod_selector.match_expressions is None and pol.spec.policy_types == ["Ingress"]
        (rule,) = pol.spec.ingress
        assert [(f.pod_selector.match_labels, f.namespace_selector, f.ip_block) for f in rule._from] == [
            (gang["matchLabels"], None, None)]
        jobset = cluster.custom.get_namespaced_custom_object(*JOBSET_API.split("/"), NS, "jobsets", name)
        assert [(o.kind, o.uid) for o in pol.metadata.owner_references] == [("JobSet", jobset["metadata"]["uid"])]
        assert all(pol.spec.pod_selector.match_labels.items() <= (p.metadata.labels or {}).items()
                   for p in pods_of(cluster, name))  # the JobSet controller labels its ranks so
        (rank1,) = [p for p in pods_of(cluster, name) if p.metadata.labels.get("jobset.sigs.k8s.io/job-index") == "1"]
        cluster.core.delete_namespaced_pod(rank1.metadata.name, NS, grace_period_seconds=5)  # an eviction
        resumed = cluster.wait_until(lambda: (s := hub.status("gina", name))["state"] == "Preempted-and-resumed"
                                     and s, 120, "the whole gang to restart", interval=0.5)
        assert resumed["restarts"] == 1 and resumed["preempted"] >= 1
        assert rank1.metadata.name not in {r["pod"] for r in resumed["ranks"]}

        def resumed_at() -> list[int]:
            log = hub.call("gina", "GET", f"/jobs/{name}/logs").text  # rank 0's (the old pod went with its Job)
            return [int(ln.rsplit(" ", 1)[1]) for ln in log.splitlines() if ln.startswith("resumed at ")]

        starts = cluster.wait_until(resumed_at, 60, "rank 0's new attempt to start", interval=0.5)
        assert starts[-1] >= 3, starts  # the new gang resumed from the checkpoint, not from 0
    finally:
        cancel_and_wait(cluster, hub, "gina", name)
    left = ours(cluster, NS)
    assert name not in left["jobsets"] and not {p for p in left["pods"] if p.startswith(name)}
    # the policy went with its JobSet (the real garbage collector, through the ownerReference)
    cluster.wait_until(lambda: not gang_policies(cluster, name), 60, "the gang's NetworkPolicy to be collected")
    assert not {j for j in left["jobs"] if j.startswith(name)}


async def test_a_jobset_left_without_its_networkpolicy_is_repaired_or_removed(cluster, tmp_path):
    """What a crash between creating a JobSet and its ranks' NetworkPolicy leaves (the JobSet and its
    ConfigMap, no policy): the reconcile loop creates the policy; where the API server refuses it (here a
    real ResourceQuota of no more NetworkPolicies), it deletes the JobSet, whose ranks could never meet."""
    from kubernetes import client as sync_client
    from kubernetes_asyncio import client, config

    from jupyterhub_gpu.model.profiles_file import load_profiles
    from jupyterhub_gpu.services.jobs.kube import Kube
    from jupyterhub_gpu.services.jobs.lifecycle import reconcile
    from jupyterhub_gpu.services.jobs.submission import plan_submission

    cfg = load_profiles(write_profiles(cluster, tmp_path / "profiles.yaml", gang_team))
    group, version = JOBSET_API.split("/")

    def half_made(name: str) -> str:
        """Created as the service does, up to the crash: ConfigMap, JobSet; no policy, no ownership."""
        objs = plan_submission(cfg, "gina", ["gang"], {"profile": "h100-full", "notebook_path": "w/g.ipynb",
                                                       "notebook": SLOW_NB, "nodes": 2}, 0, name=name)
        js, cm = (next(o for o in objs if o["kind"] == kind) for kind in ("JobSet", "ConfigMap"))
        js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "no-such-queue"  # never admitted: no quota held
        cluster.core.create_namespaced_config_map(NS, cm)
        cluster.custom.create_namespaced_custom_object(group, version, NS, "jobsets", js)
        return js["metadata"]["name"]

    net = sync_client.NetworkingV1Api(cluster.core.api_client)
    kcfg = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=kcfg)
    api = client.ApiClient(kcfg)
    known: set = set()
    try:
        kube = Kube(api, [NS], jobsets=True)
        repaired = half_made("gpu-gina-crash-repair")
        assert gang_policies(cluster, repaired) == []
        done = await reconcile(kube, 0, policies_known=known)
        assert any(f"created the missing NetworkPolicy of JobSet {NS}/{repaired}" in d for d in done), done
        (pol,) = gang_policies(cluster, repaired)
        jobset = cluster.custom.get_namespaced_custom_object(group, version, NS, "jobsets", repaired)
        assert [(o.kind, o.uid) for o in pol.metadata.owner_references] == [("JobSet", jobset["metadata"]["uid"])]
        assert not [d for d in await reconcile(kube, 0, policies_known=known) if repaired in d]  # once is enough
        existing = len(net.list_namespaced_network_policy(NS).items)
        cluster.core.create_namespaced_resource_quota(NS, {"metadata": {"name": "no-more-policies"}, "spec": {
            "hard": {"count/networkpolicies.networking.k8s.io": str(existing)}}})
        try:
            cluster.wait_until(lambda: (cluster.core.read_namespaced_resource_quota("no-more-policies", NS).status.used
                                        or {}), 30, "the quota controller to count NetworkPolicies")
            removed = half_made("gpu-gina-crash-remove")
            done = await reconcile(kube, 0, policies_known=known)
            assert any(f"deleted JobSet {NS}/{removed}" in d and "could not be created" in d for d in done), done
            cluster.wait_until(lambda: removed not in ours(cluster, NS)["jobsets"], 30, "the JobSet to go")
        finally:
            cluster.core.delete_namespaced_resource_quota("no-more-policies", NS)
    finally:
        await api.close()
        for name in ("gpu-gina-crash-repair", "gpu-gina-crash-remove"):
            for call in (lambda: cluster.custom.delete_namespaced_custom_object(group, version, NS, "jobsets", name),
                         lambda: cluster.core.delete_namespaced_config_map(name, NS)):
                try:
                    call()
                except sync_client.ApiException:
                    pass
