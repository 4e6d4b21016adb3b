"""devcluster/jupyterhub_gpu_dev/realnode_config.py: what a real dev node is made of, as data (addresses, labels,
taints, the files its containerd, kubelet, kube-proxy and CoreDNS read, the kube-dns and RBAC objects). Pure: no root,
no cluster."""
from __future__ import annotations

import ipaddress
import json
import re
import tomllib
from pathlib import Path

import pytest

from jupyterhub_gpu.contract import SIMULATED_NODE_LABEL
from jupyterhub_gpu.model.node_facts import gpu_labels
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu_dev import pki
from jupyterhub_gpu_dev import realnode_config as rc
from jupyterhub_gpu_dev.nodes import AGENTPOOL, with_system_pool

GPU_POOLS = ("gput4", "gpumig", "gpuh100", "spota100", "gput4mps")


@pytest.fixture(scope="module")
def pools():
    return with_system_pool(load_profiles(EXAMPLE_PROFILES))


def node(pools, pool: str, index: int, root: Path = Path("/state/real"), **kw) -> rc.RealNode:
    return rc.RealNode(pool, pools[pool], index, root / f"node{index}", **kw)


def test_the_host_address_is_the_one_in_the_api_servers_certificate():
    assert pki.NODE_HOST_IP == rc.HOST_IP
    assert ipaddress.ip_address(rc.HOST_IP) in rc.NODE_NETWORK


# ------------------------------------------------------------------------------------------------ addresses
@pytest.mark.parametrize("index", range(1, 10))
def test_addresses_of_node_index(pools, index):
    n = node(pools, "gput4", index)
    assert n.ip == f"10.201.0.{10 + index}"
    assert ipaddress.ip_address(n.ip) in rc.NODE_NETWORK and n.ip != rc.HOST_IP
    assert n.pod_cidr == f"10.244.{index}.0/24"
    assert ipaddress.ip_network(n.pod_cidr).subnet_of(ipaddress.ip_network(rc.POD_NETWORK))
    assert n.netns == f"gpuhub-node{index}"
    assert n.veth == f"gpuhub-veth{index}"
    # Linux interface names (IFNAMSIZ - 1) and the bridge's name: at most 15 characters
    assert len(n.veth) <= 15 and len(rc.NODE_BRIDGE) <= 15
    assert n.cgroup_root == f"/gpuhub-node{index}"
    assert n.socket == Path(f"/state/real/node{index}/containerd.sock")
    assert n.kubelet_dir == n.root / "kubelet"


def test_addresses_never_collide_between_nodes(pools):
    nodes = [node(pools, "gput4", i) for i in range(1, 10)]
    for attr in ("ip", "pod_cidr", "netns", "veth", "cgroup_root", "name"):
        values = [getattr(n, attr) for n in nodes]
        assert len(set(values)) == len(values), attr
    cidrs = [ipaddress.ip_network(n.pod_cidr) for n in nodes]
    assert not any(a.overlaps(b) for i, a in enumerate(cidrs) for b in cidrs[i + 1:])
    dns = ipaddress.ip_address(rc.CLUSTER_DNS_IP)
    assert not any(dns in c for c in cidrs) and dns not in rc.NODE_NETWORK


# ------------------------------------------------------------------------------------------------ labels
#: The kubelet refuses --node-labels in the kubernetes.io / k8s.io namespaces except these (and its own).
KUBELET_ALLOWED_PREFIXES = ("kubelet.kubernetes.io/", "node.kubernetes.io/")


def kubelet_would_refuse(key: str) -> bool:
    prefix = key.split("/", 1)[0] if "/" in key else ""
    restricted = prefix in ("kubernetes.io", "k8s.io") or prefix.endswith((".kubernetes.io", ".k8s.io"))
    return restricted and not key.startswith(KUBELET_ALLOWED_PREFIXES)


@pytest.mark.parametrize("pool", ["system", *GPU_POOLS])
def test_node_labels_leave_out_what_the_kubelet_owns_and_the_simulated_mark(pools, pool):
    labels = node(pools, pool, 2).node_labels()
    for own in ("kubernetes.io/os", "kubernetes.io/arch", "kubernetes.io/hostname"):
        assert own not in labels
    assert SIMULATED_NODE_LABEL not in labels
    assert labels[rc.REAL_NODE_LABEL] == "true"
    assert labels[AGENTPOOL] == pool
    assert not [k for k in labels if kubelet_would_refuse(k)]
    # --node-labels is key=value,...: nothing in a label may break that
    assert all("," not in k + v and "=" not in k + v for k, v in labels.items())


@pytest.mark.parametrize("pool", GPU_POOLS)
def test_a_gpu_nodes_labels_carry_the_gfd_labels(pools, pool):
    labels = node(pools, pool, 2).node_labels()
    gfd = gpu_labels(pools[pool])
    assert gfd and {k: labels.get(k) for k in gfd} == gfd
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["kubernetes.azure.com/accelerator"] == "nvidia"


def test_t4_labels_say_time_slicing(pools):
    labels = node(pools, "gput4", 2).node_labels()
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.product"].endswith("-SHARED")  # rename_by_default: false


def test_cpu_node_has_no_nvidia_labels(pools):
    labels = node(pools, "system", 1).node_labels()
    assert not [k for k in labels if k.startswith("nvidia.com/")]
    assert labels["kubernetes.azure.com/mode"] == "system"


def test_extra_labels_are_added_and_win(pools):
    n = node(pools, "gput4", 2, labels={"team": "a", AGENTPOOL: "other"})
    labels = n.node_labels()
    assert labels["team"] == "a" and labels[AGENTPOOL] == "other"


# ------------------------------------------------------------------------------------------------ GPUs, taints
@pytest.mark.parametrize("pool, gpu", [
    ("gput4", ("nvidia.com/gpu", 4)),          # 1 T4 x 4 time-slicing replicas
    ("gpumig", ("nvidia.com/mig-1g.10gb", 7)),  # mixed strategy, all-1g.10gb
    ("gpuh100", ("nvidia.com/gpu", 1)),
    ("spota100", ("nvidia.com/gpu", 1)),
    ("gput4mps", ("nvidia.com/gpu", 4)),       # 1 T4 x 4 MPS replicas
    ("system", None),
])
def test_gpu_resource_and_count(pools, pool, gpu):
    assert node(pools, pool, 2).gpu == gpu


def test_taints_flag(pools):
    assert rc.taints_flag(node(pools, "gput4", 2)) == "sku=gpu:NoSchedule"
    assert rc.taints_flag(node(pools, "spota100", 2)) == (
        "sku=gpu:NoSchedule,kubernetes.azure.com/scalesetpriority=spot:NoSchedule")
    assert rc.taints_flag(node(pools, "system", 1)) == ""


def test_taints_flag_without_value(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("""pools:
  g:
    node_selector: {agentpool: g}
    taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
    gpu: {model: T4, count_per_node: 1}
profiles:
  - {slug: g, display_name: G, pool: g, gpu: {kind: full, count: 1}}
""")
    pools = with_system_pool(load_profiles(f))
    assert rc.taints_flag(rc.RealNode("g", pools["g"], 2, tmp_path)) == "nvidia.com/gpu:NoSchedule"


# ------------------------------------------------------------------------------------------------ containerd
def test_containerd_config_is_toml_version_3(pools, tmp_path):
    n = node(pools, "gput4", 2, root=tmp_path)
    state = tmp_path / "run" / "containerd"
    cfg = tomllib.loads(rc.containerd_config(n, state))
    assert cfg["version"] == 3
    assert cfg["root"] == str(n.root / "containerd-root") and cfg["state"] == str(state)
    assert cfg["grpc"]["address"] == str(n.socket)
    assert cfg["ttrpc"]["address"] == f"{n.socket}.ttrpc"
    runtime = cfg["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"]["SystemdCgroup"] is False  # cgroupfs, like the kubelet's cgroupDriver
    assert runtime["cni"]["bin_dirs"] == [rc.CNI_BIN_DIR]
    conf_dir = Path(runtime["cni"]["conf_dir"])
    assert conf_dir == n.root / "cni" and conf_dir.is_relative_to(n.root)
    assert cfg["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == rc.PAUSE_IMAGE


def test_two_nodes_containerds_share_nothing(pools, tmp_path):
    a, b = node(pools, "system", 1, root=tmp_path), node(pools, "gput4", 2, root=tmp_path)
    ca = tomllib.loads(rc.containerd_config(a, tmp_path / "sa"))
    cb = tomllib.loads(rc.containerd_config(b, tmp_path / "sb"))
    for key in ("root", "state"):
        assert ca[key] != cb[key]
    assert ca["grpc"]["address"] != cb["grpc"]["address"]


def test_cni_conflist_uses_the_nodes_pod_cidr(pools, tmp_path):
    n = node(pools, "gput4", 3, root=tmp_path)
    conf = rc.cni_conflist(n)
    json.dumps(conf)
    bridge = conf["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["ipMasq"] is False  # pod addresses are real end to end
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.3.0/24"}]]
    assert Path(bridge["ipam"]["dataDir"]).is_relative_to(n.root)


# ------------------------------------------------------------------------------------------------ kubelet, proxy
def test_kubelet_config(pools, tmp_path):
    n = node(pools, "gput4", 2, root=tmp_path)
    ca, crt, key, resolv = (tmp_path / x for x in ("ca.crt", "kubelet.crt", "kubelet.key", "resolv.conf"))
    cfg = rc.kubelet_config(n, ca, crt, key, resolv)
    json.dumps(cfg)
    assert cfg["kind"] == "KubeletConfiguration"
    assert cfg["failCgroupV1"] is False
    assert cfg["cgroupDriver"] == "cgroupfs" and cfg["cgroupRoot"] == n.cgroup_root == "/gpuhub-node2"
    assert cfg["clusterDNS"] == [rc.CLUSTER_DNS_IP] and cfg["clusterDomain"] == rc.CLUSTER_DOMAIN
    assert cfg["address"] == n.ip and cfg["healthzBindAddress"] == n.ip
    assert cfg["port"] == rc.KUBELET_PORT and cfg["healthzPort"] == rc.KUBELET_HEALTH_PORT
    assert cfg["readOnlyPort"] == 0
    assert cfg["containerRuntimeEndpoint"] == f"unix://{n.socket}"
    assert cfg["authentication"]["anonymous"]["enabled"] is False
    assert cfg["authentication"]["x509"]["clientCAFile"] == str(ca)
    assert cfg["authorization"]["mode"] == "Webhook"
    assert cfg["tlsCertFile"] == str(crt) and cfg["tlsPrivateKeyFile"] == str(key)
    assert cfg["resolvConf"] == str(resolv)
    assert cfg["podCIDR"] == n.pod_cidr


def test_kube_proxy_config(pools, tmp_path):
    n = node(pools, "system", 1, root=tmp_path)
    kc = tmp_path / "kube-proxy.kubeconfig"
    cfg = rc.kube_proxy_config(n, kc)
    json.dumps(cfg)
    assert cfg["kind"] == "KubeProxyConfiguration" and cfg["mode"] == "iptables"
    assert cfg["clientConnection"]["kubeconfig"] == str(kc)
    assert cfg["hostnameOverride"] == n.name
    assert cfg["bindAddress"] == n.ip
    assert cfg["healthzBindAddress"] == f"{n.ip}:{rc.PROXY_HEALTH_PORT}"
    assert cfg["clusterCIDR"] == rc.POD_NETWORK
    assert cfg["nodePortAddresses"] == [f"{n.ip}/32"]


def test_kubeconfig_is_json(tmp_path):
    text = rc.kubeconfig(f"https://{rc.HOST_IP}:6443", tmp_path / "ca", tmp_path / "c", tmp_path / "k")
    cfg = json.loads(text)
    assert cfg["clusters"][0]["cluster"] == {"server": f"https://{rc.HOST_IP}:6443",
                                             "certificate-authority": str(tmp_path / "ca")}
    assert cfg["users"][0]["user"] == {"client-certificate": str(tmp_path / "c"), "client-key": str(tmp_path / "k")}
    assert cfg["current-context"] == cfg["contexts"][0]["name"]


# ------------------------------------------------------------------------------------------------ DNS, RBAC
def test_corefile(tmp_path):
    kc = tmp_path / "coredns.kubeconfig"
    text = rc.corefile(kc, "192.0.2.53")
    assert text.count("{") == text.count("}")
    assert re.search(rf"^\s*bind {re.escape(rc.HOST_IP)}\s*$", text, re.M)
    assert f"health {rc.HOST_IP}:{rc.DNS_HEALTH_PORT}" in text
    assert f"ready {rc.HOST_IP}:{rc.DNS_READY_PORT}" in text
    block = re.search(r"kubernetes (\S+)[^{]*\{(.*?)\}", text, re.S)
    assert block and block.group(1) == rc.CLUSTER_DOMAIN
    assert re.search(rf"^\s*kubeconfig {re.escape(str(kc))} dev\s*$", block.group(2), re.M)
    assert re.search(r"^\s*forward \. 192\.0\.2\.53\s*$", text, re.M)


def test_dns_objects():
    svc, eps = rc.dns_objects()
    assert svc["kind"] == "Service" and svc["metadata"]["name"] == "kube-dns"
    assert svc["metadata"]["namespace"] == "kube-system"
    assert svc["spec"]["clusterIP"] == rc.CLUSTER_DNS_IP
    assert "selector" not in svc["spec"]  # its endpoints are the EndpointSlice below
    assert {(p["protocol"], p["port"]) for p in svc["spec"]["ports"]} == {("UDP", 53), ("TCP", 53)}
    assert eps["kind"] == "EndpointSlice" and eps["apiVersion"] == "discovery.k8s.io/v1"
    assert eps["metadata"]["namespace"] == "kube-system"
    assert eps["metadata"]["labels"]["kubernetes.io/service-name"] == "kube-dns"
    assert eps["addressType"] == "IPv4"
    assert [e["addresses"] for e in eps["endpoints"]] == [[rc.HOST_IP]]
    # a Service's port names must match its slice's for kube-proxy to route them
    assert {p["name"] for p in svc["spec"]["ports"]} == {p["name"] for p in eps["ports"]}


def test_rbac_objects_bind_nodes_to_system_node():
    objs = rc.rbac_objects()
    bindings = [o for o in objs if o["kind"] == "ClusterRoleBinding"]
    nodes = [b for b in bindings if b["roleRef"]["name"] == "system:node"]
    assert len(nodes) == 1
    assert nodes[0]["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                     "name": "system:nodes"}]
    assert nodes[0]["roleRef"]["kind"] == "ClusterRole"
    assert len({(o["kind"], o["metadata"]["name"]) for o in objs}) == len(objs)
    # every binding to a role defined here names a role that is defined here
    defined = {o["metadata"]["name"] for o in objs if o["kind"] == "ClusterRole"}
    assert all(b["roleRef"]["name"] in defined for b in bindings if b["roleRef"]["name"].startswith("gpuhub-"))


# ------------------------------------------------------------------------------------------------ real_nodes
def test_real_nodes_for_the_example_profiles(pools, tmp_path):
    system, gpu, _ = rc.real_nodes(pools, "gput4", tmp_path)
    assert (system.pool_name, system.index, system.root) == ("system", 1, tmp_path / "node1")
    assert (gpu.pool_name, gpu.index, gpu.root) == ("gput4", 2, tmp_path / "node2")
    assert system.pool is pools["system"] and gpu.pool is pools["gput4"]
    assert system.gpu is None and gpu.gpu == ("nvidia.com/gpu", 4)
    assert rc.taints_flag(system) == ""  # hub, proxy, gpu-jobs and CPU servers land here
    assert system.name != gpu.name and system.ip != gpu.ip
    assert system.name.startswith("aks-system-") and gpu.name.startswith("aks-gput4-")


@pytest.mark.parametrize("pool", GPU_POOLS)
def test_real_nodes_for_each_gpu_pool(pools, tmp_path, pool):
    _, gpu, _ = rc.real_nodes(pools, pool, tmp_path)
    assert gpu.pool_name == pool and gpu.gpu is not None


@pytest.mark.parametrize("bad", ["system", "nope", ""])
def test_real_nodes_refuses_what_is_not_a_gpu_pool(pools, tmp_path, bad):
    with pytest.raises(ValueError) as e:
        rc.real_nodes(pools, bad, tmp_path)
    msg = str(e.value)
    assert repr(bad) in msg
    for name in GPU_POOLS:
        assert name in msg


def test_real_nodes_with_the_added_system_pool(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("""pools:
  t4:
    node_selector: {agentpool: t4}
    taints: [{key: sku, value: gpu, effect: NoSchedule}]
    gpu: {model: T4, count_per_node: 1}
profiles:
  - {slug: t4, display_name: T4, pool: t4, gpu: {kind: full, count: 1}}
""")
    pools = with_system_pool(load_profiles(f))
    system, gpu, _ = rc.real_nodes(pools, "t4", tmp_path)
    assert not system.pool.is_gpu and system.node_labels()[AGENTPOOL] == system.pool_name
    assert gpu.gpu == ("nvidia.com/gpu", 1)



MIXED_MIG = """pools:
  a100:
    node_selector: {agentpool: a100}
    taints: [{key: sku, value: gpu, effect: NoSchedule}]
    gpu: {model: A100-80GB, count_per_node: 1}
    sharing: {strategy: mig, mig_strategy: mixed, layout: all-balanced}
profiles:
  - {slug: m, display_name: M, pool: a100, gpu: {kind: mig, profile: 1g.10gb, count: 1}}
"""


def test_a_mixed_mig_pool_with_several_slice_kinds_is_refused_up_front(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(MIXED_MIG)
    pools = with_system_pool(load_profiles(f))
    assert len(pools["a100"].slots_per_node()) > 1
    with pytest.raises(ValueError, match="'a100' offers several GPU resources"):
        rc.real_nodes(pools, "a100", tmp_path)


def test_the_dev_agents_host_is_a_node_address_without_a_kubelet(tmp_path):
    pools = with_system_pool(load_profiles(EXAMPLE_PROFILES))
    system, gpu, agent = rc.real_nodes(pools, "gput4", tmp_path)
    assert agent.pool is None and agent.gpu is None and agent.name == "gpuhub-dev-agent"
    assert len({system.pod_cidr, gpu.pod_cidr, agent.pod_cidr}) == 3
    assert ipaddress.ip_network(agent.pod_cidr).subnet_of(ipaddress.ip_network(rc.POD_NETWORK))
    text = rc.agent_resolv_conf("jhub")
    assert f"nameserver {rc.CLUSTER_DNS_IP}" in text and "search jhub.svc.cluster.local svc.cluster.local" in text
