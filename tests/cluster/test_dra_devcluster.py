"""DRA on the dev cluster: a pool with `allocation: dra` gets its GPUs from the simulated NVIDIA DRA driver's
ResourceSlices (devcluster/jupyterhub_gpu_dev/dra_driver.py), the real kube-scheduler (DynamicResources plugin, on by
default in 1.36) allocates a device to the claim the real resourceclaim-controller made from the product's
ResourceClaimTemplate, and the dev agent's process sees only that device, as the driver's CDI spec gives it (the
product's GPU check passes on it); the scheduler and Kueue (deviceClassMappings) count the devices.

Its own cluster (a profiles file with one dra pool beside a device-plugin pool), so Kueue runs with the product's
Configuration fragment (`gpuhub render kueue-config`) from the start.
"""
from __future__ import annotations

import asyncio
import sys
import time

import pytest
import yaml

from jupyterhub_gpu.builders import dra
from jupyterhub_gpu.builders.hardening import harden
from jupyterhub_gpu.builders.kueue import local_queue_name
from jupyterhub_gpu.contract import GPU_CHECK_CONTAINER, QUEUE_LABEL
from jupyterhub_gpu.model.profiles_file import load_profiles
from jupyterhub_gpu_dev import cluster as dc
from jupyterhub_gpu_dev.components import Layout
from jupyterhub_gpu_dev.nodes import AGENTPOOL
from jupyterhub_gpu_dev.simulator_keys import DEV_AGENT_LABEL
from jupyterhub_gpu_dev.testing import DevCluster, dev_agent, pod_outside_jhub

pytestmark = pytest.mark.cluster

RESOURCE = ("resource.k8s.io", "v1")
PROFILES = {
    "pools": {
        "system": {"node_selector": {"kubernetes.azure.com/agentpool": "system"}, "instance_type": "Standard_D8s_v5"},
        "gput4": {"node_selector": {"kubernetes.azure.com/agentpool": "gput4"},
                  "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
                  "instance_type": "Standard_NC4as_T4_v3", "gpu": {"model": "T4", "count_per_node": 1}},
        "dra-a100": {"allocation": "dra", "node_selector": {"kubernetes.azure.com/agentpool": "draa100"},
                     "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
                     "instance_type": "Standard_NC48ads_A100_v4",
                     "gpu": {"model": "A100-80GB", "count_per_node": 2}},
        "dra-mig": {"allocation": "dra", "node_selector": {"kubernetes.azure.com/agentpool": "dramig"},
                    "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
                    "instance_type": "Standard_NC24ads_A100_v4", "gpu": {"model": "A100-80GB", "count_per_node": 1},
                    "sharing": {"strategy": "mig", "layout": "all-3g.40gb"}},
    },
    "profiles": [
        {"slug": "cpu", "display_name": "CPU", "pool": "system", "cpu": 1, "memory": "2Gi", "default": True},
        {"slug": "t4", "display_name": "T4", "pool": "gput4", "gpu": {"kind": "full", "count": 1},
         "cpu": 2, "memory": "8Gi"},
        {"slug": "a100-dra", "display_name": "A100 (DRA)", "pool": "dra-a100", "gpu": {"kind": "full", "count": 1},
         "cpu": 4, "memory": "16Gi"},
        {"slug": "a100-3g", "display_name": "A100 3g.40gb (DRA)", "pool": "dra-mig",
         "gpu": {"kind": "mig", "profile": "3g.40gb", "count": 1}, "cpu": 2, "memory": "8Gi"},
    ],
    "teams": {"data-science": {"namespace": "team-ds", "quota": {"gput4": 1, "dra-a100": 2}, "default": True}},
}
DRA_NODES = 2  # x 2 GPUs


def custom(c: DevCluster, plural: str, namespace: str | None = None) -> list[dict]:
    if namespace:
        return c.custom.list_namespaced_custom_object(*RESOURCE, namespace, plural)["items"]
    return c.custom.list_cluster_custom_object(*RESOURCE, plural)["items"]


def gpu_pod(name: str, namespace: str, template: str, pool, run: bool) -> dict:
    """A pod of the dra pool with the product's claim (`dra.pod_claims`); `run`: the dev agent runs its command,
    which prints what the container sees of its GPU and stays (a done pod's claim is deleted at once)."""
    claims, used = dra.pod_claims(template)
    script = ('echo "VISIBLE=$NVIDIA_VISIBLE_DEVICES"; nvidia-smi -L; '
              'ls "$GPUHUB_DEVICE_ROOT" | grep -E "^nvidia[0-9]+$" | sed "s/^/DEV=/"; echo SEEN; sleep 300')
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {DEV_AGENT_LABEL: "run"} if run else {}},
            "spec": {"restartPolicy": "Never", "nodeSelector": dict(pool.node_selector),
                     "tolerations": pool.tolerations(), "resourceClaims": claims,
                     "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script],
                                     "resources": {"requests": {"cpu": "100m"}, "claims": used}}]}}


def queued_job(name: str, namespace: str, queue: str, template: str, pool) -> dict:
    """A suspended Job in a team's LocalQueue whose pod takes a GPU through the team's claim template (hardened
    like the product's: team namespaces enforce Pod Security `restricted`)."""
    claims, used = dra.pod_claims(template)
    spec = harden({"restartPolicy": "Never", "nodeSelector": dict(pool.node_selector),
                   "tolerations": pool.tolerations(), "resourceClaims": claims,
                   "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"],
                                   "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "claims": used}}]},
                  "1Gi")
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
            "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0,
                     "template": {"spec": spec}}}


def seen(c: DevCluster, agent_state, namespace: str, pod: str) -> str:
    """What the pod's process printed of its GPU (in its log under the agent's state)."""
    log = agent_state / "pods" / f"{namespace}_{pod}.log"
    c.wait_until(lambda: log.is_file() and "\nSEEN" in log.read_text(), 30, f"{pod}'s process to print its GPU")
    return log.read_text()


def workloads_with(c: DevCluster, namespace: str, jobs: list[str], condition: str) -> list[dict]:
    return [w for j in jobs if (w := c.workload_of(namespace, j)) and dc.condition_true(w, condition)]


def allocation_of(c: DevCluster, namespace: str, pod: str) -> tuple[dict, list[dict]]:
    """The pod's generated ResourceClaim once the scheduler allocated it, and its results."""
    def allocated():
        statuses = c.core.read_namespaced_pod(pod, namespace).status.resource_claim_statuses or []
        if not statuses or not statuses[0].resource_claim_name:
            return None
        claim = c.custom.get_namespaced_custom_object(*RESOURCE, namespace, "resourceclaims",
                                                      statuses[0].resource_claim_name)
        return claim if (claim.get("status") or {}).get("allocation") else None

    claim = c.wait_until(allocated, 30, f"the claim of {pod} to be allocated")
    return claim, claim["status"]["allocation"]["devices"]["results"]


def test_scheduler_allocates_a_slice_device_and_the_container_sees_only_it(scratch_root, tmp_path):
    t0 = time.monotonic()
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(yaml.safe_dump(PROFILES, sort_keys=False))
    cfg = load_profiles(profiles)
    dc.up(profiles, {"system": 1, "gput4": 1, "dra-a100": DRA_NODES, "dra-mig": 1}, root=scratch_root,
          say=lambda m: print(f"[devcluster] {m}", file=sys.stderr))
    c = DevCluster(scratch_root, profiles)
    t_up = time.monotonic() - t0
    slices = published(c, scratch_root)
    ns = "t-dra"
    c.core.create_namespace({"metadata": {"name": ns}})
    c.wait_for_service_account(ns)
    template = dra.claim_template(cfg, cfg.profile("a100-dra"), ns)  # the product's, named as the server pod names it
    c.create(template)
    t1 = time.monotonic()
    with dev_agent(c, tmp_path / "agent"):
        containers_see_their_devices(c, cfg, ns, slices, tmp_path / "agent")
    t_agent = time.monotonic() - t1
    failure = devices_are_counted(c, cfg, ns, {n: s for n, s in slices.items() if s["spec"]["devices"][0]["name"]
                                               == "gpu-0"})  # the whole-GPU pool's
    t2 = time.monotonic()
    kueue_counts_dra_gpus(c, cfg)
    print(f"\n[dra] cluster up {t_up:.1f} s; three agent-run pods {t_agent:.1f} s; Kueue {time.monotonic() - t2:.1f} s;"
          f" total {time.monotonic() - t0:.1f} s; the fifth pod: {failure[:160]}", file=sys.stderr)


def published(c: DevCluster, root) -> dict[str, dict]:
    """The driver's slices (by node): one per dra node, pool = node name, its two GPUs or its MIG layout's devices,
    owned by the node; none for the device-plugin pool, whose node keeps nvidia.com/gpu; the driver's classes;
    Kueue's Configuration with the product's fragment."""
    nodes = {n.metadata.name: n for n in c.core.list_node(label_selector=f"{AGENTPOOL} in (draa100,dramig)").items}
    slices = {s["spec"]["nodeName"]: s for s in custom(c, "resourceslices")}
    assert set(slices) == set(nodes) and len(nodes) == DRA_NODES + 1
    for node, s in slices.items():
        assert s["spec"]["driver"] == "gpu.nvidia.com" and s["spec"]["pool"]["name"] == node
        names = [d["name"] for d in s["spec"]["devices"]]
        mig = nodes[node].metadata.labels[AGENTPOOL] == "dramig"
        assert names == (["gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4"] if mig else ["gpu-0", "gpu-1"])
        assert s["metadata"]["ownerReferences"][0]["uid"] == nodes[node].metadata.uid
        assert not any(k.startswith("nvidia.com/") for k in nodes[node].status.allocatable)
    t4 = c.core.list_node(label_selector=f"{AGENTPOOL}=gput4").items[0]
    assert t4.status.allocatable["nvidia.com/gpu"] == "1"  # the device-plugin pool as before
    assert {"gpu.nvidia.com", "mig.nvidia.com", "gpuhub-mig-3g.40gb"} <= {
        d["metadata"]["name"] for d in custom(c, "deviceclasses")}
    kueue_cfg = yaml.safe_load((Layout(root).config / "kueue.yaml").read_text())
    assert kueue_cfg["resources"]["deviceClassMappings"] == [
        {"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]},
        {"name": "nvidia.com/mig-3g.40gb", "deviceClassNames": ["gpuhub-mig-3g.40gb"]}]
    assert kueue_cfg["waitForPodsReady"]["timeout"] == dra.PODS_READY_TIMEOUT
    return slices


def slice_device(slices: dict[str, dict], result: dict) -> dict:
    return next(d for d in slices[result["pool"]]["spec"]["devices"] if d["name"] == result["device"])


def containers_see_their_devices(c: DevCluster, cfg, ns: str, slices: dict[str, dict], agent_state) -> None:
    """A whole GPU, a MIG slice (gpuhub's per-slice DeviceClass) and GPUSpawner's own server pod, run by the dev
    agent: the scheduler allocates a device of the node's slice, and the process sees that device only."""
    pool = cfg.pools["dra-a100"]
    c.create(gpu_pod("gpu-run", ns, dra.claim_template_name(cfg.profile("a100-dra")), pool, run=True))
    node = c.wait_bound(ns, "gpu-run")
    claim, (r, *more) = allocation_of(c, ns, "gpu-run")
    assert not more and (r["driver"], r["pool"], r["request"]) == ("gpu.nvidia.com", node, dra.REQUEST_NAME)
    assert any(x["name"] == "gpu-run" for x in claim["status"]["reservedFor"])
    out = seen(c, agent_state, ns, "gpu-run")
    assert "VISIBLE=void" in out, out  # as the driver's CDI spec sets it
    assert f"GPU 0: NVIDIA A100 80GB PCIe (UUID: {slice_device(slices, r)['attributes']['uuid']['string']})" in out
    assert out.count("(UUID: GPU-") == 1, out  # only its own GPU, not the node's other one
    assert [ln for ln in out.splitlines() if ln.startswith("DEV=")] == [
        f"DEV=nvidia{r['device'].removeprefix('gpu-')}"], out  # its device file only

    mig_template = dra.claim_template(cfg, cfg.profile("a100-3g"), ns)
    c.create(mig_template)
    c.create(gpu_pod("mig-run", ns, mig_template["metadata"]["name"], cfg.pools["dra-mig"], run=True))
    c.wait_bound(ns, "mig-run")
    (m,) = allocation_of(c, ns, "mig-run")[1]
    mig = slice_device(slices, m)
    assert mig["attributes"]["profile"] == {"string": "3g.40gb"}
    out = seen(c, agent_state, ns, "mig-run")
    assert f"  MIG 3g.40gb      Device  0: (UUID: {mig['attributes']['uuid']['string']})" in out, out
    assert out.count("(UUID: MIG-") == 1, out  # not the GPU's other slice

    # the product's GPU check, GPUSpawner's init container with the server's claim, passes on what the claim gave
    server = asyncio.run(pod_outside_jhub(c, ns, "a100-dra", "alice", ["data-science"], "jupyter-alice"))
    server["metadata"]["labels"][DEV_AGENT_LABEL] = "run"
    server["spec"]["containers"][0]["command"] = ["sleep", "300"]  # the check is what is tested, not Jupyter
    check_log = agent_state / "pods" / f"{ns}_jupyter-alice.init-{GPU_CHECK_CONTAINER}.log"
    c.create(server)
    c.wait_until(lambda: check_log.is_file() and "GPU check" in check_log.read_text(), 30, "the GPU check")
    assert "GPU check passed" in check_log.read_text(), check_log.read_text()
    for pod in ("gpu-run", "mig-run", "jupyter-alice"):
        c.core.delete_namespaced_pod(pod, ns, grace_period_seconds=0)
    c.wait_until(lambda: not custom(c, "resourceclaims", ns), 30, "the pods' claims to go with them")


def devices_are_counted(c: DevCluster, cfg, ns: str, slices: dict[str, dict]) -> str:
    """Four pods take the pool's four GPUs, one each; a fifth waits, as the DynamicResources plugin says."""
    pool, template = cfg.pools["dra-a100"], dra.claim_template_name(cfg.profile("a100-dra"))
    for i in range(DRA_NODES * 2):
        c.create(gpu_pod(f"hold-{i}", ns, template, pool, run=False))
    held = [(res["pool"], res["device"]) for i in range(DRA_NODES * 2) for res in allocation_of(c, ns, f"hold-{i}")[1]]
    assert sorted(held) == sorted((n, d["name"]) for n, s in slices.items() for d in s["spec"]["devices"])
    c.create(gpu_pod("waits", ns, template, pool, run=False))
    failures = c.wait_until(lambda: c.scheduling_failures(ns, "waits"), 30, "the fifth pod's FailedScheduling")
    assert c.core.read_namespaced_pod("waits", ns).spec.node_name is None
    assert "cannot allocate all claims" in failures[0]  # the DynamicResources plugin of the default profile
    return failures[0]


def kueue_counts_dra_gpus(c: DevCluster, cfg) -> None:
    """Kueue counts the team's DRA GPUs under nvidia.com/gpu (deviceClassMappings): a quota of 2 admits two of
    three one-GPU jobs, on the dra pool's flavor."""
    team = cfg.teams["data-science"]
    names = [f"dra-job-{i}" for i in range(3)]
    for name in names:
        c.create(queued_job(name, team.namespace, local_queue_name("data-science"),
                            dra.job_template_name(cfg.profile("a100-dra")), cfg.pools["dra-a100"]))
    c.wait_until(lambda: all(c.workload_of(team.namespace, n) for n in names), 30, "the jobs' Workloads")
    admitted = c.wait_until(lambda: len(ws := workloads_with(c, team.namespace, names, "Admitted")) == 2 and ws,
                            30, "two of the three jobs to be admitted")
    for w in admitted:
        (ps,) = w["status"]["admission"]["podSetAssignments"]
        assert ps["flavors"]["nvidia.com/gpu"] == "dra-a100" and ps["resourceUsage"]["nvidia.com/gpu"] == "1", ps
    time.sleep(2)
    assert len(workloads_with(c, team.namespace, names, "QuotaReserved")) == 2  # the third waits for quota
