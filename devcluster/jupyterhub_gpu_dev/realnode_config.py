"""What a real dev node is made of, as data: its addresses, and the files its containerd, kubelet, kube-proxy and
CNI read (pure functions; `realnodes.py` writes them and runs the processes).

A real node is a network namespace of this machine with one veth on the bridge `NODE_BRIDGE` (the host end holds
`HOST_IP`, where the API server and CoreDNS answer), its own containerd (state under the node's folder) and a
kubelet whose cgroups live under a root of its own, so two nodes on one machine never see each other's pods. Pod
IPs come from the CNI bridge plugin, one /24 per node; every node and the host route the others' /24s, so pod
addresses are real end to end (no masquerading).
"""
from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyterhub_gpu.model.profiles import Pool
from jupyterhub_gpu_dev.nodes import AGENTPOOL, SIMULATED_LABEL, node_name, pool_labels
from jupyterhub_gpu_dev.pki import NODE_HOST_IP

NODE_BRIDGE = "gpuhub-br0"
NODE_NETWORK = ipaddress.ip_network("10.201.0.0/24")
HOST_IP = NODE_HOST_IP
POD_NETWORK = "10.244.0.0/16"
CLUSTER_DNS_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
KUBELET_PORT, KUBELET_HEALTH_PORT, PROXY_HEALTH_PORT = 10250, 10248, 10256
#: CoreDNS's probes on the host address (its `health` and `ready` plugins).
DNS_HEALTH_PORT, DNS_READY_PORT = 18080, 18181
#: The pod sandbox image (devcluster/jupyterhub_gpu_dev/go/node/pause), imported into each node's containerd,
#: never pulled.
PAUSE_IMAGE = "gpuhub.dev/pause:1"
#: The Debian package containernetworking-plugins puts bridge, host-local, loopback and portmap here.
CNI_BIN_DIR = "/usr/lib/cni"
#: Labels a kubelet sets itself or refuses from --node-labels (the kubernetes.io namespace it does not own).
KUBELET_OWN_LABELS = ("kubernetes.io/os", "kubernetes.io/arch", "kubernetes.io/hostname")
#: Marks a Node served by a real kubelet of the dev cluster (its GPU, if any, is still simulated).
REAL_NODE_LABEL = "gpuhub.dev/real-kubelet"


@dataclass(frozen=True)
class RealNode:
    """One kubelet node: `index` ≥ 1 picks its addresses; `pool` its labels, taints and GPU resource."""

    pool_name: str
    pool: Pool | None  # None: the dev agent's host (no kubelet; its pod IPs are the KWOK pools')
    index: int
    root: Path
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return node_name(self.pool_name, self.index - 1) if self.pool else "gpuhub-dev-agent"

    @property
    def ip(self) -> str:
        return str(NODE_NETWORK.network_address + 10 + self.index)

    @property
    def pod_cidr(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def netns(self) -> str:
        return f"gpuhub-node{self.index}"

    @property
    def veth(self) -> str:  # interface names are at most 15 characters
        return f"gpuhub-veth{self.index}"

    @property
    def cgroup_root(self) -> str:
        return f"/gpuhub-node{self.index}"

    @property
    def socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def device_root(self) -> Path:  # agent_env.simulated_gpu writes dev/ and bin/ here
        return self.root / "gpus" / self.name

    @property
    def gpu(self) -> tuple[str, int] | None:
        """(resource, count) the device plugin advertises on this node, or None for a CPU node."""
        slots = self.pool.slots_per_node() if self.pool else {}
        if not slots:
            return None
        ((resource, count),) = slots.items()
        return resource, count

    def node_labels(self) -> dict[str, str]:
        """The pool's labels as AKS and GPU feature discovery would put them, less those the kubelet owns."""
        labels = {k: v for k, v in pool_labels(self.pool_name, self.pool).items()
                  if k not in KUBELET_OWN_LABELS and k != SIMULATED_LABEL}
        return {**labels, REAL_NODE_LABEL: "true", **self.labels}


def agent_host(root: Path) -> RealNode:
    """The namespace the dev agent (SIMULATOR) runs the KWOK pools' pods in beside real nodes: on the bridge like a
    node, with kube-proxy (Services) and the cluster's DNS, and a /24 of pod IPs routed to it."""
    return RealNode("kwok", None, 3, root / "agent")


def agent_resolv_conf(namespace: str) -> str:
    """What the agent's processes resolve names with: the cluster's DNS and a pod's search path in `namespace`."""
    return (f"nameserver {CLUSTER_DNS_IP}\nsearch {namespace}.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} "
            f"{CLUSTER_DOMAIN}\noptions ndots:5\n")


def taints_flag(node: RealNode) -> str:
    return ",".join(f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
                    for t in node.pool.effective_taints)


def kubeconfig(server: str, ca: Path, cert: Path, key: Path) -> str:
    """A client's kubeconfig (JSON is YAML); the node components reach the API server at the host address."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "clusters": [{"name": "dev", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "dev", "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": "dev"}}],
    }, indent=1)


def cni_conflist(node: RealNode) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "gpuhub-pods", "plugins": [
        {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": node.pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}],
                  "dataDir": str(node.root / "ipam")}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ]}


def containerd_config(node: RealNode, state: Path) -> str:
    """containerd 2 (config version 3). `restrict_oom_score_adj`: this machine lacks CAP_SYS_RESOURCE, so a
    pod's negative oom_score_adj (the kubelet's -998 for sandboxes) is refused; capped at containerd's own."""
    return f'''version = 3
root = "{node.root / 'containerd-root'}"
state = "{state}"
[grpc]
  address = "{node.socket}"
[ttrpc]
  address = "{node.socket}.ttrpc"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "/usr/sbin/runc"
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["{CNI_BIN_DIR}"]
  conf_dir = "{node.root / 'cni'}"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{PAUSE_IMAGE}"
'''


def kubelet_config(node: RealNode, ca: Path, serving_cert: Path, serving_key: Path, resolv_conf: Path) -> dict:
    """KubeletConfiguration. cgroups here are v1 (hybrid): `failCgroupV1: false`; cgroupfs under a root of the
    node's own; eviction thresholds low (the machine's disk is shared with everything else)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False, "failSwapOn": False, "cgroupDriver": "cgroupfs", "cgroupRoot": node.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "address": node.ip, "port": KUBELET_PORT, "readOnlyPort": 0,
        "healthzBindAddress": node.ip, "healthzPort": KUBELET_HEALTH_PORT,
        "tlsCertFile": str(serving_cert), "tlsPrivateKeyFile": str(serving_key),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca)}},
        "authorization": {"mode": "Webhook"},
        "clusterDomain": CLUSTER_DOMAIN, "clusterDNS": [CLUSTER_DNS_IP], "resolvConf": str(resolv_conf),
        "podCIDR": node.pod_cidr, "maxPods": 110, "serializeImagePulls": False,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "nodeStatusReportFrequency": "10s", "syncFrequency": "10s", "fileCheckFrequency": "5s",
        "shutdownGracePeriod": "0s", "rotateCertificates": False, "serverTLSBootstrap": False,
    }


def kube_proxy_config(node: RealNode, kubeconfig_path: Path, hostname: str | None = None) -> dict:
    """iptables mode in the node's namespace; conntrack sysctls left as the machine has them. `hostname`: the
    Node it serves (kube-proxy waits for that Node to exist; the agent's host names a KWOK node it stands in for)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig_path)}, "hostnameOverride": hostname or node.name,
        "bindAddress": node.ip, "healthzBindAddress": f"{node.ip}:{PROXY_HEALTH_PORT}",
        "metricsBindAddress": "127.0.0.1:10249", "mode": "iptables", "clusterCIDR": POD_NETWORK,
        "nodePortAddresses": [f"{node.ip}/32"],
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def corefile(kubeconfig_path: Path, upstream: str) -> str:
    """The cluster's DNS as on AKS: Service and pod names from the API, the rest forwarded to this machine's
    resolver."""
    return f""".:53 {{
    bind {HOST_IP}
    errors
    health {HOST_IP}:{DNS_HEALTH_PORT}
    ready {HOST_IP}:{DNS_READY_PORT}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig_path} dev
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    forward . {upstream}
    cache 5
    loadbalance
}}
"""


def dns_objects() -> list[dict]:
    """kube-dns as every cluster names it: a Service at the kubelets' clusterDNS address whose endpoints are
    CoreDNS on the host address (a Service without selector plus its EndpointSlice)."""
    ports = [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]
    return [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
         "spec": {"clusterIP": CLUSTER_DNS_IP, "ports": [{**p, "targetPort": 53} for p in ports]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "kube-dns-host", "namespace": "kube-system",
                      "labels": {"kubernetes.io/service-name": "kube-dns",
                                 "endpointslice.kubernetes.io/managed-by": "gpuhub-devcluster"}},
         "addressType": "IPv4", "endpoints": [{"addresses": [HOST_IP], "conditions": {"ready": True}}],
         "ports": ports},
    ]


def rbac_objects() -> list[dict]:
    """Without the Node authorizer, nodes get `system:node` by group; kube-proxy its own role; CoreDNS reads."""
    def binding(name: str, role: str, kind: str, subject: str) -> dict:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject}]}
    return [binding("gpuhub-dev-nodes", "system:node", "Group", "system:nodes"),
            binding("gpuhub-dev-kube-proxy", "system:node-proxier", "User", "system:kube-proxy"),
            binding("gpuhub-dev-coredns", "view", "User", "system:coredns"),
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": "gpuhub-dev-coredns-discovery"},
             "rules": [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                        "verbs": ["list", "watch"]},
                       {"apiGroups": [""], "resources": ["namespaces", "services", "pods"],
                        "verbs": ["list", "watch"]}]},
            binding("gpuhub-dev-coredns-discovery", "gpuhub-dev-coredns-discovery", "User", "system:coredns")]


def real_nodes(pools: dict[str, Pool], gpu_pool: str, root: Path) -> list[RealNode]:
    """The system pool's node (untainted: hub, proxy, gpu-jobs, CPU servers), one node of `gpu_pool`, and the dev
    agent's host (the file's other pools stay KWOK pools, whose pods the agent runs)."""
    system = next(n for n, p in pools.items() if not p.is_gpu)
    if gpu_pool not in pools or not pools[gpu_pool].is_gpu:
        gpus = ", ".join(n for n, p in pools.items() if p.is_gpu)
        raise ValueError(f"--gpu-pool {gpu_pool!r} is not a GPU pool of the profiles file (its GPU pools: {gpus})")
    if len(pools[gpu_pool].slots_per_node()) != 1:  # the node's device plugin serves one resource
        kinds = ", ".join(sorted(pools[gpu_pool].slots_per_node()))
        raise ValueError(f"--gpu-pool {gpu_pool!r} offers several GPU resources per node ({kinds}: a mixed MIG "
                         "layout); the real node's device plugin serves one, so choose a pool with one GPU resource")
    return [RealNode(system, pools[system], 1, root / "node1"), RealNode(gpu_pool, pools[gpu_pool], 2, root / "node2"),
            agent_host(root)]



__all__ = ["RealNode", "real_nodes", "NODE_BRIDGE", "HOST_IP", "AGENTPOOL"]
