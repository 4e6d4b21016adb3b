"""Real nodes for the dev cluster: a kubelet with containerd and runc per node, kube-proxy, CoreDNS, and on the
GPU node a device plugin that hands containers simulated NVIDIA device files and `nvidia-smi`.

Unlike the KWOK pools (whose pods the dev agent runs as local processes), these nodes run pods as containers,
from the images `make images` built (imported into each node's containerd under the names the deploy files
use, as if pulled from the registry). Each node is a network namespace of this machine (realnode_config.py);
its processes enter only that namespace (`nsenter --net`), so they see this machine's cgroup and file
mounts as a kubelet on a VM sees its own. Needs root (network namespaces, cgroups, mounts).

Stopping a node stops its processes (recorded like the control plane's), then kills what still runs in its
cgroups (the containers), unmounts what the kubelet mounted, and removes its namespace and routes.
"""
from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Callable

import psutil
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from jupyterhub_gpu.contract import SIMULATED_NODE_LABEL

from . import pki as pki_mod
from . import procs, storage
from .components import Layout, SetupError
from .kube import Kube, condition_true, wait_for
from .procs import probe
from .realnode_config import (
    CLUSTER_DNS_IP,
    DNS_READY_PORT,
    HOST_IP,
    KUBELET_HEALTH_PORT,
    NODE_BRIDGE,
    NODE_NETWORK,
    PAUSE_IMAGE,
    PROXY_HEALTH_PORT,
    RealNode,
    agent_resolv_conf,
    cni_conflist,
    containerd_config,
    corefile,
    dns_objects,
    kube_proxy_config,
    kubeconfig,
    kubelet_config,
    rbac_objects,
    taints_flag,
)

#: cgroup v1 hierarchies a node's root is made in (the kubelet checks each).
CGROUP_SUBSYSTEMS = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd",
                     "hugetlb", "net_cls", "net_prio", "perf_event")
CGROUP_FS = Path("/sys/fs/cgroup")
NODES_FILE = "real-nodes.json"
TOOLS = {"nsenter": "util-linux", "ip": "iproute2", "iptables": "iptables", "runc": "runc",
         "/usr/lib/cni/bridge": "containernetworking-plugins"}


def check_machine() -> None:
    """Real nodes need root and a few Debian packages; say which are missing."""
    if os.geteuid() != 0:
        raise SetupError("real nodes (network namespaces, cgroups, mounts) need root: run as root")
    gone = sorted({pkg for tool, pkg in TOOLS.items()
                   if not (Path(tool).exists() if "/" in tool else shutil.which(tool))})
    if gone:
        raise SetupError(f"real nodes need Debian packages that are missing: apt-get install {' '.join(gone)}")


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise SetupError(f"`{' '.join(cmd)}` failed: {out.stderr.strip()}")
    return out


# ------------------------------------------------------------------------------------------------ network
#: Which state folder's real nodes own this machine's node bridge and addresses (one such cluster at a time).
CLAIM = Path("/run/gpuhub-dev-real-nodes")


def claim_network(layout: Layout) -> None:
    """Refuse when another dev cluster's real nodes still hold the bridge; then record this one as its owner."""
    if CLAIM.is_file():
        other = Path(CLAIM.read_text().strip())
        if other != layout.root.resolve() and (Layout(other).run / NODES_FILE).is_file():
            raise SetupError(f"the real nodes of the dev cluster in {other} hold this machine's node network "
                             f"({NODE_BRIDGE}, {NODE_NETWORK}); stop them first: "
                             f"GPUHUB_CLUSTER_DIR={other} gpuhub cluster down")
    CLAIM.write_text(str(layout.root.resolve()))


def network_up(nodes: list[RealNode]) -> None:
    """The bridge with the host address, then per node its namespace, veth (eth0 inside) and routes."""
    if _ip("link", "show", NODE_BRIDGE, check=False).returncode != 0:
        _ip("link", "add", NODE_BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{HOST_IP}/{NODE_NETWORK.prefixlen}", "dev", NODE_BRIDGE)
    _ip("link", "set", NODE_BRIDGE, "up")
    for node in nodes:  # a crash's leftovers first
        _ip("netns", "del", node.netns, check=False)
        _ip("link", "del", node.veth, check=False)
        _ip("netns", "add", node.netns)
        _ip("link", "add", node.veth, "type", "veth", "peer", "name", f"{node.veth}p")
        _ip("link", "set", f"{node.veth}p", "netns", node.netns)
        _ip("link", "set", node.veth, "master", NODE_BRIDGE, "up")
        _ip("link", "set", f"{node.veth}p", "name", "eth0", netns=node.netns)
        _ip("addr", "add", f"{node.ip}/{NODE_NETWORK.prefixlen}", "dev", "eth0", netns=node.netns)
        _ip("link", "set", "eth0", "up", netns=node.netns)
        _ip("link", "set", "lo", "up", netns=node.netns)
        _ip("route", "add", "default", "via", HOST_IP, netns=node.netns)
        subprocess.run(["nsenter", f"--net=/run/netns/{node.netns}", "sysctl", "-qw", "net.ipv4.ip_forward=1"],
                       check=True)
        _ip("route", "replace", node.pod_cidr, "via", node.ip)
    for node in nodes:  # pod to pod across nodes: straight over the bridge
        for other in nodes:
            if other is not node:
                _ip("route", "replace", other.pod_cidr, "via", other.ip, netns=node.netns)


def network_down(nodes: list[dict]) -> None:
    for node in nodes:
        _ip("route", "del", node["pod_cidr"], check=False)
        _ip("netns", "del", node["netns"], check=False)
        _ip("link", "del", node["veth"], check=False)
    if _ip("link", "show", "master", NODE_BRIDGE, check=False).stdout.strip() == "":
        _ip("link", "del", NODE_BRIDGE, check=False)


# ------------------------------------------------------------------------------------------------ cgroups, mounts
def cgroup_dirs(root: str) -> list[Path]:
    return [CGROUP_FS / s / root.lstrip("/") for s in CGROUP_SUBSYSTEMS if (CGROUP_FS / s).is_dir()]


def cgroups_up(node: RealNode) -> None:
    for d in cgroup_dirs(node.cgroup_root):
        d.mkdir(exist_ok=True)
        if d.parent.name == "cpuset":  # a new cpuset has no CPUs or memory nodes until given its parent's
            for f in ("cpuset.cpus", "cpuset.mems"):
                if not (d / f).read_text().strip():
                    (d / f).write_text((d.parent / f).read_text())


def kill_cgroup_processes(root: str) -> int:
    """SIGKILL every process left in a node's cgroups (its containers, their shims); how many there were."""
    pids: set[int] = set()
    for d in cgroup_dirs(root):
        for procs_file in d.rglob("cgroup.procs"):
            try:
                pids |= {int(p) for p in procs_file.read_text().split()}
            except OSError:
                continue
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    return len(pids)


def remove_cgroups(root: str) -> None:
    for d in cgroup_dirs(root):
        for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            try:
                sub.rmdir()
            except OSError:
                pass
        try:
            d.rmdir()
        except OSError:
            pass


def unmount_under(folder: Path) -> int:
    """Lazily unmount everything mounted under `folder` (the kubelet's volumes, containerd's netns and rootfs
    mounts), deepest first."""
    prefix = str(folder.resolve()) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    for point in sorted(set(points), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
    return len(points)


# ------------------------------------------------------------------------------------------------ files
def _issue(pki: pki_mod.PKI, dest: Path, stem: str, cn: str, org: str | None, usage, sans=None) -> tuple[Path, Path]:
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), None)
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    key, cert = pki_mod._issue(ca_key, ca, pki_mod._name(cn, org), usage, sans)
    pki_mod._write_key(dest / f"{stem}.key", key)
    (dest / f"{stem}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return dest / f"{stem}.crt", dest / f"{stem}.key"


def write_node_files(node: RealNode, pki: pki_mod.PKI, server: str,
                     proxy_hostname: str | None = None) -> dict[str, Path]:
    """Certificates, kubeconfigs and configs of one node, under its folder; returns their paths."""
    d = node.root
    for sub in ("pki", "cni", "ipam"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    client = _issue(pki, d / "pki", "kubelet-client", f"system:node:{node.name}", "system:nodes",
                    ExtendedKeyUsageOID.CLIENT_AUTH)
    serving = _issue(pki, d / "pki", "kubelet-serving", node.name, None, ExtendedKeyUsageOID.SERVER_AUTH,
                     [x509.IPAddress(ipaddress.ip_address(node.ip)), x509.DNSName(node.name)])
    proxy = _issue(pki, d / "pki", "kube-proxy", "system:kube-proxy", None, ExtendedKeyUsageOID.CLIENT_AUTH)
    files = {"kubelet-kubeconfig": d / "kubelet.kubeconfig", "proxy-kubeconfig": d / "kube-proxy.kubeconfig",
             "containerd": d / "containerd.toml", "kubelet": d / "kubelet.yaml", "proxy": d / "kube-proxy.yaml",
             "resolv": d / "resolv.conf"}
    files["kubelet-kubeconfig"].write_text(kubeconfig(server, pki.ca_cert, *client))
    files["proxy-kubeconfig"].write_text(kubeconfig(server, pki.ca_cert, *proxy))
    (d / "cni" / "10-gpuhub.conflist").write_text(json.dumps(cni_conflist(node), indent=1))
    files["containerd"].write_text(containerd_config(node, d / "containerd-state"))
    # pods ask the cluster's DNS; this file is what the kubelet gives pods with dnsPolicy Default
    files["resolv"].write_text(f"nameserver {CLUSTER_DNS_IP}\n")
    files["kubelet"].write_text(yaml.safe_dump(kubelet_config(node, pki.ca_cert, *serving, files["resolv"])))
    files["proxy"].write_text(yaml.safe_dump(kube_proxy_config(node, files["proxy-kubeconfig"], proxy_hostname)))
    return files


def write_gpu_devices(node: RealNode) -> None:
    """The device files and `nvidia-smi` the device plugin mounts into GPU containers (plain files: the GPU is
    simulated; the health check looks for them and runs `nvidia-smi -L`)."""
    from .agent_env import simulated_gpu

    simulated_gpu(node.root, {"metadata": {"name": node.name, "labels": node.node_labels()}})


# ------------------------------------------------------------------------------------------------ processes
def _in_netns(node: RealNode, argv: list[str]) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{node.netns}", *argv]


def _spawn(layout: Layout, name: str, argv: list[str], health: str = "") -> subprocess.Popen:
    _, proc = procs.spawn(name, argv, layout.log(name), layout.root, health, layout.run)
    return proc


def _wait(check: Callable[[], bool], what: str, proc: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise SetupError(f"{what} exited during start (exit {proc.returncode}); its log: {log}\n"
                             + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
        if time.monotonic() > deadline:
            raise SetupError(f"{what} did not become ready within {timeout:.0f} s; its log: {log}")
        time.sleep(0.2)


def ctr(bins: Path, node: RealNode, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(bins / "ctr"), "-a", str(node.socket), "-n", "k8s.io", *args],
                          capture_output=True, text=True)


def import_images(bins: Path, node: RealNode, images: dict[Path, list[str]], say: Callable[[str], None]) -> None:
    """Each docker-archive into the node's containerd once (its root persists across `up`s), and tagged with the
    names the deploy files use (`images` maps archive → those names), as a registry pull would have named it."""
    have = set(ctr(bins, node, "images", "ls", "-q").stdout.split())
    for archive, names in images.items():
        source = _archive_tag(archive)
        if source not in have:
            t0 = time.monotonic()
            out = ctr(bins, node, "images", "import", str(archive))
            if out.returncode != 0:
                raise SetupError(f"importing {archive} into {node.name}'s containerd failed: {out.stderr.strip()}")
            say(f"{node.name}: image {source} imported ({time.monotonic() - t0:.0f} s)")
        for name in names:
            if name != source:
                ctr(bins, node, "images", "tag", "--force", source, name)


def _archive_tag(archive: Path) -> str:
    """The tag inside a docker-archive (`podman save` writes RepoTags in manifest.json)."""
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    return manifest[0]["RepoTags"][0]


def start_node(layout: Layout, bins: Path, node: RealNode, pki: pki_mod.PKI, server: str,
               images: dict[Path, list[str]], say: Callable[[str], None]) -> None:
    """containerd → images → kubelet → kube-proxy (→ device plugin); returns once the Node is registered."""
    files = write_node_files(node, pki, server)
    cgroups_up(node)
    p = _spawn(layout, f"{node.netns}-containerd", _in_netns(node, [  # containerd finds its shim on its PATH
        "env", f"PATH={bins}:{os.environ.get('PATH', '')}", str(bins / "containerd"), "--config",
        str(files["containerd"])]))
    _wait(lambda: ctr(bins, node, "version").returncode == 0, f"{node.name}'s containerd", p,
          layout.log(f"{node.netns}-containerd"), 30)
    import_images(bins, node, images, say)
    labels = ",".join(f"{k}={v}" for k, v in sorted(node.node_labels().items()))
    kubelet = [str(bins / "kubelet"), f"--config={files['kubelet']}", f"--kubeconfig={files['kubelet-kubeconfig']}",
               f"--hostname-override={node.name}", f"--node-ip={node.ip}", f"--root-dir={node.kubelet_dir}",
               f"--cert-dir={node.root / 'pki'}", f"--node-labels={labels}", "--v=1"]
    if taints := taints_flag(node):
        kubelet.append(f"--register-with-taints={taints}")
    p = _spawn(layout, f"{node.netns}-kubelet", _in_netns(node, kubelet),
               f"http://{node.ip}:{KUBELET_HEALTH_PORT}/healthz")
    _wait(lambda: probe(f"http://{node.ip}:{KUBELET_HEALTH_PORT}/healthz"), f"{node.name}'s kubelet", p,
          layout.log(f"{node.netns}-kubelet"))
    p = _spawn(layout, f"{node.netns}-kube-proxy", _in_netns(node, [str(bins / "kube-proxy"),
                                                                     f"--config={files['proxy']}"]),
               f"http://{node.ip}:{PROXY_HEALTH_PORT}/healthz")
    _wait(lambda: probe(f"http://{node.ip}:{PROXY_HEALTH_PORT}/healthz"), f"{node.name}'s kube-proxy", p,
          layout.log(f"{node.netns}-kube-proxy"))
    if node.gpu:
        resource, count = node.gpu
        write_gpu_devices(node)
        _spawn(layout, f"{node.netns}-device-plugin", [
            str(bins / "gpuhub-device-plugin"), f"--resource={resource}", f"--count={count}",
            f"--registry-dir={node.kubelet_dir / 'plugins_registry'}", f"--device-root={node.device_root}"])


def start_dns(layout: Layout, bins: Path, pki: pki_mod.PKI, server: str, kube: Kube) -> None:
    d = layout.root / "coredns"
    d.mkdir(parents=True, exist_ok=True)
    cert = _issue(pki, d, "coredns", "system:coredns", None, ExtendedKeyUsageOID.CLIENT_AUTH)
    (d / "kubeconfig").write_text(kubeconfig(server, pki.ca_cert, *cert))
    upstream = next((ln.split()[1] for ln in Path("/etc/resolv.conf").read_text().splitlines()
                     if ln.startswith("nameserver")), "127.0.0.1")
    (d / "Corefile").write_text(corefile(d / "kubeconfig", upstream))
    for obj in dns_objects():
        kube.apply(obj)
    p = _spawn(layout, "coredns", [str(bins / "coredns"), "-conf", str(d / "Corefile")],
               f"http://{HOST_IP}:{DNS_READY_PORT}/ready")
    _wait(lambda: probe(f"http://{HOST_IP}:{DNS_READY_PORT}/ready"), "CoreDNS", p, layout.log("coredns"))


def start_agent_host(layout: Layout, bins: Path, pki: pki_mod.PKI, server: str, host: RealNode, kube: Kube) -> None:
    """The dev agent's namespace beside real nodes (realnode_config.agent_host): its pod /24 local there, kube-proxy
    for Services, a kubeconfig at the host address and a resolv.conf with the cluster's DNS (see agent_command)."""
    _ip("route", "replace", "local", host.pod_cidr, "dev", "lo", netns=host.netns)
    kwok = kube.list("v1", "Node", label_selector=f"{SIMULATED_NODE_LABEL}=true")
    if not kwok:
        raise SetupError("the dev agent's host serves the KWOK pools, and the cluster has no KWOK node")
    files = write_node_files(host, pki, server, kwok[0]["metadata"]["name"])
    p = _spawn(layout, f"{host.netns}-kube-proxy", _in_netns(host, [str(bins / "kube-proxy"),
                                                                     f"--config={files['proxy']}"]),
               f"http://{host.ip}:{PROXY_HEALTH_PORT}/healthz")
    _wait(lambda: probe(f"http://{host.ip}:{PROXY_HEALTH_PORT}/healthz"), "the dev agent's kube-proxy", p,
          layout.log(f"{host.netns}-kube-proxy"))
    (host.root / "agent.kubeconfig").write_text(kubeconfig(server, pki.ca_cert, pki.client_cert("admin"),
                                                           pki.client_key("admin")))
    (host.root / "agent-resolv.conf").write_text(agent_resolv_conf(storage.HUB_NAMESPACE))


def agent_command(layout: Layout) -> tuple[list[str], list[str], Path] | None:
    """How to start the dev agent on the agent host, if this cluster has one: the command prefix (that network
    namespace, and a mount namespace of its own where /etc/resolv.conf is the host's resolv.conf), the agent's
    extra arguments, and its kubeconfig."""
    host = next((n for n in recorded(layout) if n["kind"] == "agent"), None)
    if host is None:
        return None
    root = Path(host["root"])
    prefix = ["nsenter", f"--net=/run/netns/{host['netns']}", "unshare", "--mount", "--propagation", "private",
              "sh", "-c", f'mount --bind "{root / "agent-resolv.conf"}" /etc/resolv.conf && exec "$@"', "agent"]
    return prefix, ["--pod-network", host["pod_cidr"]], root / "agent.kubeconfig"


def up(layout: Layout, bins: Path, pki: pki_mod.PKI, kubeconfig_path: Path, api_port: int, nodes: list[RealNode],
       images: dict[str, dict[Path, list[str]]], say: Callable[[str], None] = lambda m: None,
       timeout: float = 120) -> None:
    """Bring the nodes up on a running control plane (whose API server listens on HOST_IP too)."""
    check_machine()
    (layout.run / NODES_FILE).write_text(json.dumps([
        {"name": n.name, "kind": "agent" if n.pool is None else "gpu" if n.gpu else "system", "ip": n.ip,
         "gpu": n.gpu, "netns": n.netns, "veth": n.veth, "pod_cidr": n.pod_cidr,
         "cgroup_root": n.cgroup_root, "root": str(n.root)} for n in nodes], indent=1))
    server = f"https://{HOST_IP}:{api_port}"
    kube = Kube(kubeconfig_path)
    try:
        for obj in rbac_objects():
            kube.apply(obj)
        network_up(nodes)
        start_dns(layout, bins, pki, server, kube)
        for node in nodes:
            if node.pool is None:
                start_agent_host(layout, bins, pki, server, node, kube)
            else:
                start_node(layout, bins, node, pki, server, images.get(node.name, {}), say)

        def ready() -> bool:
            for node in (n for n in nodes if n.pool):
                n = kube.read("v1", "Node", node.name)
                if not n or not condition_true(n, "Ready"):
                    return False
                if node.gpu and int(n["status"].get("allocatable", {}).get(node.gpu[0], "0")) < node.gpu[1]:
                    return False
            return True

        wait_for(ready, timeout, "the real nodes to be Ready (and the GPU node to advertise its GPUs)")
        say("real nodes ready: " + ", ".join(f"{n.name} ({n.ip})" for n in nodes if n.pool))
    finally:
        kube.close()


def recorded(layout: Layout) -> list[dict]:
    """The real nodes `up` recorded for this state folder (name, ip, gpu, ...), [] if none."""
    path = layout.run / NODES_FILE
    return json.loads(path.read_text()) if path.is_file() else []


def stop_nodes(layout: Layout, say: Callable[[str], None] = lambda m: None) -> None:
    """Stop the nodes in the order that leaves nothing: kubelets and device plugins first (so no container is
    restarted), then every container (by cgroup), then containerd, then its shims (which outlive it)."""
    nodes = recorded(layout)
    if not nodes:
        return
    records = procs.Record.load_all(layout.run)
    first = [r for n, r in records.items() if n.endswith(("-kubelet", "-device-plugin"))]
    if live := [r for r in first if procs.alive(r)]:
        say("stopping " + ", ".join(r.name for r in live))
    procs.stop(first, layout.run)
    killed = sum(kill_cgroup_processes(node["cgroup_root"]) for node in nodes)
    procs.stop([r for n, r in records.items() if n.endswith("-containerd")], layout.run)
    shims = shim_processes([Path(node["root"]) for node in nodes])
    procs.terminate(shims, grace=2)
    if killed or shims:
        say(f"stopped {killed} container processes and {len(shims)} containerd shims")


def shim_processes(roots: list[Path]) -> list:
    """The runc shims serving these nodes' containerd sockets (found by their -address argument)."""
    sockets = {str(root / "containerd.sock") for root in roots}
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if cmd and cmd[0].endswith("containerd-shim-runc-v2") and sockets & set(cmd):
            out.append(p)
    return out


def teardown(layout: Layout, say: Callable[[str], None] = lambda m: None) -> None:
    """After the node processes stopped: what still runs in their cgroups, their mounts, cgroups and network."""
    path = layout.run / NODES_FILE
    if not path.is_file():
        return
    stop_nodes(layout, say)
    nodes = json.loads(path.read_text())
    for node in nodes:
        killed = kill_cgroup_processes(node["cgroup_root"])
        mounts = unmount_under(Path(node["root"]))
        remove_cgroups(node["cgroup_root"])
        if killed or mounts:
            say(f"{node['name']}: stopped {killed} more container processes, unmounted {mounts} volumes")
    network_down(nodes)
    path.unlink()
    if CLAIM.is_file() and Path(CLAIM.read_text().strip()) == layout.root.resolve():
        CLAIM.unlink()



def pause_archive(bins: Path, dest: Path) -> Path:
    """The pod sandbox image as a docker-archive (one layer: the gpuhub-pause binary as /pause), made here:
    no registry serves registry.k8s.io/pause, and containerd needs one image for every pod's sandbox."""
    binary = (bins / "gpuhub-pause").read_bytes()
    archive = dest / f"pause-{hashlib.sha256(binary).hexdigest()[:12]}.tar"
    if archive.is_file():
        return archive
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("pause")
        info.size, info.mode = len(binary), 0o755
        tar.addfile(info, io.BytesIO(binary))
    layer_bytes = layer.getvalue()
    diff_id = hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
                         "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]}}).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [PAUSE_IMAGE],
                            "Layers": [f"{diff_id}/layer.tar"]}]).encode()
    dest.mkdir(parents=True, exist_ok=True)
    part = archive.with_suffix(".part")
    with tarfile.open(part, "w") as tar:
        for name, data in ((f"{diff_id}/layer.tar", layer_bytes), (config_name, config),
                           ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    part.rename(archive)
    return archive
