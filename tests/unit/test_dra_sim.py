"""The simulated NVIDIA DRA driver (devcluster/jupyterhub_gpu_dev/dra_driver.py) and the dev agent's view of a claim
(devcluster/jupyterhub_gpu_dev/agent_dra.py), the pure parts: each dra node's ResourceSlice with devices named and
attributed as the real driver does, MIG placements that fit one GPU, no device-plugin resources on dra nodes, and a
container's devices from its claims' allocation results (CDI-like: only those, NVIDIA_VISIBLE_DEVICES=void).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.builders.dra import driver_device_classes
from jupyterhub_gpu.cluster.dra_devices import slice_devices
from jupyterhub_gpu.model import dra
from jupyterhub_gpu.model.gpus import GPU_COMPUTE_SLICES, GPU_MODELS, MIG_PROFILE_RE
from jupyterhub_gpu.model.validation import parse_profiles
from jupyterhub_gpu.tools.doctor_dra import devices_by_node, node_problems
from jupyterhub_gpu_dev import agent_dra, dra_driver, nodes

DRA_EXAMPLE = Path(__file__).resolve().parents[2] / "jupyterhub_gpu" / "examples" / "profiles-dra.yaml"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MIG_NAME = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")  # the driver's ToCanonicalName, parsed back


def cfg():
    return parse_profiles(yaml.safe_load(DRA_EXAMPLE.read_text()), "profiles-dra.yaml")


def slices_by_pool(c, per_pool: int = 2) -> dict[str, list[dict]]:
    manifests = nodes.build_nodes(c, per_pool)
    out: dict[str, list[dict]] = {}
    for s in dra_driver.build_slices(c, manifests):
        node = next(m for m in manifests if m["metadata"]["name"] == s["spec"]["nodeName"])
        out.setdefault(node["metadata"]["labels"][nodes.AGENTPOOL], []).append(s)
    return out


def test_one_slice_per_dra_node_pool_named_after_the_node():
    c = cfg()
    by_pool = slices_by_pool(c)
    assert set(by_pool) == {"draa100", "draa100mig"}  # the device-plugin and system pools publish none
    for slices in by_pool.values():
        assert len(slices) == 2
        for s in slices:
            spec = s["spec"]
            assert s["apiVersion"] == "resource.k8s.io/v1" and s["kind"] == "ResourceSlice"
            assert spec["driver"] == "gpu.nvidia.com"
            assert spec["pool"] == {"name": spec["nodeName"], "generation": 1, "resourceSliceCount": 1}
            assert len(spec["devices"]) <= 128


def test_full_gpus_as_the_driver_publishes_them():
    devices = slices_by_pool(cfg())["draa100"][0]["spec"]["devices"]
    assert [d["name"] for d in devices] == ["gpu-0", "gpu-1"]
    for d in devices:
        attrs = d["attributes"]
        assert set(dra.GPU_ATTRIBUTES) <= set(attrs)
        assert "index" not in attrs and "minor" not in attrs  # the driver publishes neither
        assert attrs["type"] == {"string": "gpu"}
        assert attrs["productName"] == {"string": "NVIDIA A100 80GB PCIe"}
        assert attrs["architecture"] == {"string": "Ampere"}
        for v in ("cudaComputeCapability", "driverVersion", "cudaDriverVersion"):
            assert re.fullmatch(r"\d+\.\d+\.\d+", attrs[v]["version"]), v
        assert re.fullmatch(r"GPU-[0-9a-f-]{36}", attrs["uuid"]["string"])
        assert d["capacity"] == {"memory": {"value": str(80 * 2**30)}}


def test_mig_pool_publishes_its_static_slices_not_the_gpus():
    devices = slices_by_pool(cfg())["draa100mig"][0]["spec"]["devices"]
    assert [d["name"] for d in devices] == ["gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4"]
    parent = dra_driver.gpu_uuid(slices_by_pool(cfg())["draa100mig"][0]["spec"]["nodeName"], 0)
    for d in devices:
        attrs = d["attributes"]
        assert set(dra.MIG_ATTRIBUTES) <= set(attrs)
        assert attrs["type"] == {"string": "mig"} and attrs["profile"] == {"string": "3g.40gb"}
        assert attrs["parentUUID"] == {"string": parent}
        assert attrs["uuid"]["string"].startswith("MIG-")
        assert d["capacity"]["memory"] == {"value": str(40 * 2**30)}
        assert sum(k.startswith("memorySlice") for k in d["capacity"]) == 4


@pytest.mark.parametrize("model", [m for m in GPU_MODELS.values() if m.mig])
@pytest.mark.parametrize("layout", ["all-balanced", "each-alone"])
def test_mig_placements_fit_one_gpu(model, layout):
    layouts = [model.balanced_layout()] if layout == "all-balanced" else [{s: n} for s, n in model.mig.items()]
    for lay in layouts:
        placed = dra_driver.placements(model, lay)
        assert sorted(s for s, _ in placed) == sorted(s for s, n in lay.items() for _ in range(n))
        used: list[int] = []
        for s, start in placed:
            size = model.mig_memory_units(s)
            assert start % size == 0 and start + int(MIG_PROFILE_RE.match(s)["g"]) <= GPU_COMPUTE_SLICES
            used += range(start, start + size)
        assert len(used) == len(set(used)), (lay, placed)  # no memory slice used twice


def test_device_names_attributes_and_uuids_are_valid_and_unique():
    c = cfg()
    d = yaml.safe_load(DRA_EXAMPLE.read_text())
    d["pools"]["dra-a100mig"]["sharing"] = {"strategy": "mig", "layout": "all-balanced"}
    d["pools"]["dra-a100mig"]["gpu"]["count_per_node"] = 2
    for c in (c, parse_profiles(d, "x.yaml")):
        seen: set[str] = set()
        for slices in slices_by_pool(c).values():
            for s in slices:
                names = [dev["name"] for dev in s["spec"]["devices"]]
                assert len(names) == len(set(names))
                for dev in s["spec"]["devices"]:
                    assert DNS_LABEL.match(dev["name"]), dev["name"]
                    if dev["attributes"]["type"]["string"] == "mig":
                        assert MIG_NAME.match(dev["name"]), dev["name"]
                    assert len(dev["attributes"]) + len(dev["capacity"]) <= 32  # the API's limit per device
                    assert all(len(v.get("string", "")) <= 64 for v in dev["attributes"].values())
                    seen.add(dev["attributes"]["uuid"]["string"])
        assert len(seen) == sum(len(s["spec"]["devices"]) for sl in slices_by_pool(c).values() for s in sl)


def test_dra_nodes_advertise_no_device_plugin_resources():
    c = cfg()
    for m in nodes.build_nodes(c, 1):
        pool = m["metadata"]["labels"][nodes.AGENTPOOL]
        gpu_resources = {k for k in m["status"]["allocatable"] if k.startswith("nvidia.com/")}
        if pool.startswith("dra"):
            assert gpu_resources == set(), pool
            assert m["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"  # GFD's labels stay
            assert agent_dra.is_dra_node(m)
        elif pool == "gput4":
            assert gpu_resources == {"nvidia.com/gpu"}  # time-slicing without renaming: replicas of nvidia.com/gpu
            assert not agent_dra.is_dra_node(m)


def test_driver_device_classes_select_their_type():
    classes = {c["metadata"]["name"]: c for c in driver_device_classes()}
    assert set(classes) == {"gpu.nvidia.com", "mig.nvidia.com"}
    assert "== 'gpu'" in classes["gpu.nvidia.com"]["spec"]["selectors"][0]["cel"]["expression"]
    assert "== 'mig'" in classes["mig.nvidia.com"]["spec"]["selectors"][0]["cel"]["expression"]


# ---------------------------------------------------------------- the agent's view of a claim
def pod_with_claim() -> dict:
    return {"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpuhub-a100-dra"},
                                        {"name": "other", "resourceClaimName": "shared"}],
                     "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}]},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x7k2"}]}}


def test_container_claims_follow_the_pod_status_and_the_containers_own_claims():
    pod = pod_with_claim()
    main = pod["spec"]["containers"][0]
    assert agent_dra.container_claims(pod, main) == [("p-gpu-x7k2", None)]
    main["resources"]["claims"].append({"name": "other", "request": "r1"})
    assert agent_dra.container_claims(pod, main) == [("p-gpu-x7k2", None), ("shared", "r1")]
    assert agent_dra.container_claims(pod, {"name": "sidecar"}) == []  # a container without claims sees none
    pod["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "p-extended-resources-abc",
        "requestMappings": [{"containerName": "sidecar", "resourceName": "nvidia.com/gpu", "requestName": "c-0"}]}
    assert agent_dra.container_claims(pod, {"name": "sidecar"}) == [("p-extended-resources-abc", "c-0")]


def test_allocated_devices_of_a_request_and_its_subrequests():
    claim = {"status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"},
        {"request": "gpu/c1-mig-3g-40gb", "driver": "gpu.nvidia.com", "pool": "n2", "device": "gpu-0-mig-3g40gb-9-0"},
        {"request": "nic", "driver": "other.example.com", "pool": "n1", "device": "eth0"}]}}}}
    assert agent_dra.allocated(claim, None) == [("n1", "gpu-1"), ("n2", "gpu-0-mig-3g40gb-9-0")]
    assert agent_dra.allocated(claim, "gpu") == [("n1", "gpu-1"), ("n2", "gpu-0-mig-3g40gb-9-0")]
    assert agent_dra.allocated(claim, "gp") == []
    assert agent_dra.allocated({"status": {}}, None) == []  # not allocated (yet)


def test_container_sees_only_its_allocated_devices(tmp_path):
    c = cfg()
    by_pool = slices_by_pool(c)
    full = by_pool["draa100"][0]["spec"]["devices"][1]  # gpu-1 of a 2-GPU node
    env = agent_dra.write_devices(tmp_path / "full", [full])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"  # as the driver's CDI spec sets it
    dev = Path(env["GPUHUB_DEVICE_ROOT"])
    assert sorted(p.name for p in dev.glob("nvidia[0-9]*")) == ["nvidia1"]
    assert (dev / "nvidiactl").exists()
    out = subprocess.run([str(Path(env["GPUHUB_SIM_PATH"]) / "nvidia-smi"), "-L"], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == f"GPU 0: NVIDIA A100 80GB PCIe (UUID: {full['attributes']['uuid']['string']})"

    mig = by_pool["draa100mig"][0]["spec"]["devices"][1]
    env = agent_dra.write_devices(tmp_path / "mig", [mig])
    out = subprocess.run([str(Path(env["GPUHUB_SIM_PATH"]) / "nvidia-smi"), "-L"], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0].startswith("GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-")
    assert out[1:] == [f"  MIG 3g.40gb      Device  0: (UUID: {mig['attributes']['uuid']['string']})"]
    assert sorted(p.name for p in Path(env["GPUHUB_DEVICE_ROOT"]).glob("nvidia[0-9]*")) == ["nvidia0"]


# ---------------------------------------------------------------- what the product reads of them
@pytest.mark.parametrize("model", list(GPU_MODELS.values()), ids=lambda m: m.name)
def test_product_selector_matches_the_simulated_product_name(model):
    assert dra.product_matches(model.product, dra_driver.product_name(model))


def test_product_finds_each_node_as_its_pool_promises():
    """The doctor's per-node check and the capacity reader (the product's own readers of the driver's slices) find
    the simulated ones complete: the pool's GPUs or MIG slices, counted under the quota names."""
    c = cfg()
    manifests = nodes.build_nodes(c, 2)
    by_node = devices_by_node(dra_driver.build_slices(c, manifests))
    for m in manifests:
        pool = dra_driver.dra_pool_of(m, c.pools)
        if pool is None:
            continue
        assert node_problems(pool, by_node[m["metadata"]["name"]]) == []
    for s in dra_driver.build_slices(c, manifests):
        node, devices = slice_devices(s)
        assert node == s["spec"]["nodeName"]
        quotas = sorted(q for _, q in devices)
        assert quotas in (["nvidia.com/gpu"] * 2, ["nvidia.com/mig-3g.40gb"] * 2), quotas
