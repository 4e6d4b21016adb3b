"""What each control-plane process is: its command line, its config files and where it says healthy.

Pure description plus the small files each process reads (kubeconfigs, kwok stages, the Kueue
Configuration). Starting, watching and stopping processes is `cluster.py`'s job.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from jupyterhub_gpu_dev.simulator_keys import DEV_AGENT_LABEL

from . import binaries
from .pki import PKI

#: Start order; `down` stops in reverse.
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kueue", "jobset")

SERVICE_CIDR = "10.96.0.0/16"
#: Pod IPs KWOK hands out: loopback addresses, so the dev node agent (agent.py, a SIMULATOR) can run a
#: pod's server as a local process listening on its pod IP, reachable by the hub like a real pod.
POD_CIDR = "127.10.0.0/16"

#: Controllers the tests and the product need (jobs, cleanup, namespaces, service accounts, PV binding). Without
#: node-lifecycle and taint-eviction, KWOK nodes need no heartbeats or leases (cheap at 1,000 nodes).
CONTROLLERS = ("job-controller", "cronjob-controller", "ttl-after-finished-controller",
               "garbage-collector-controller", "namespace-controller", "serviceaccount-controller",
               "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
               "replicaset-controller", "deployment-controller", "pod-garbage-collector-controller",
               "resourcequota-controller",
               # storage as on a real cluster: static PVs bound to their claims, in-use ones kept
               "persistentvolume-binder-controller", "persistentvolume-protection-controller",
               "persistentvolumeclaim-protection-controller",
               # DRA (resource.k8s.io/v1, GA and on in 1.36): a pod's claims made from its ResourceClaimTemplates,
               # released and deleted with the pod; the scheduler's DynamicResources plugin allocates them
               "resourceclaim-controller")

#: KWOK stages used from the kwok module: nodes become Ready, bound pods Running, deleted pods go.
#: No pod-complete stage: simulated Job pods keep running, so they hold their quota until deleted.
KWOK_STAGES = ("kustomize/stage/node/fast/node-initialize.yaml", "kustomize/stage/pod/fast/pod-ready.yaml",
               "kustomize/stage/pod/fast/pod-delete.yaml")
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"

#: Kueue job integrations we enable; webhooks of the others are not served, so they are not registered.
#: "pod": notebook servers queue as plain pods (gated until admitted; see builders/kueue.py).
KUEUE_FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset", "pod")
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")  # hard-coded in kueue's main.go


class SetupError(RuntimeError):
    """Something the launcher needs is missing or unusable; the message says what to do."""


@dataclass
class Component:
    name: str
    argv: list[str]
    health_url: str
    log: Path
    ports: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"argv": self.argv, "health_url": self.health_url, "log": str(self.log), "ports": self.ports}


@dataclass(frozen=True)
class Layout:
    """Where everything lives in the state folder."""

    root: Path

    @property
    def pki_dir(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    def component_kubeconfig(self, who: str) -> Path:
        return self.config / f"{who}.kubeconfig"

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig_text(server: str, pki: PKI, who: str = "admin") -> str:
    """A self-contained kubeconfig (certificates embedded) for one client identity."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gpuhub-dev",
        "clusters": [{"name": "gpuhub-dev", "cluster": {"server": server,
                                                         "certificate-authority-data": _b64(pki.ca_cert)}}],
        "users": [{"name": who, "user": {"client-certificate-data": _b64(pki.client_cert(who)),
                                         "client-key-data": _b64(pki.client_key(who))}}],
        "contexts": [{"name": "gpuhub-dev", "context": {"cluster": "gpuhub-dev", "user": who}}],
    }, sort_keys=False)


def write_kubeconfigs(layout: Layout, server: str, pki: PKI) -> None:
    layout.config.mkdir(parents=True, exist_ok=True)
    layout.kubeconfig.write_text(kubeconfig_text(server, pki, "admin"))
    layout.kubeconfig.chmod(0o600)
    for who in ("kube-controller-manager", "kube-scheduler"):
        layout.component_kubeconfig(who).write_text(kubeconfig_text(server, pki, who))


def _module_cache(module: str, version: str) -> Path:
    """The module's source folder, remembered per version (`go mod download` takes a moment)."""
    memo = binaries.cache_root() / "module-dirs.json"
    known = json.loads(memo.read_text()) if memo.is_file() else {}
    key = f"{module}@{version}"
    if key in known and Path(known[key]).is_dir():
        return Path(known[key])
    path = binaries.module_dir(module, version)
    known[key] = str(path)
    memo.parent.mkdir(parents=True, exist_ok=True)
    memo.write_text(json.dumps(known, indent=1))
    return path


def kwok_module() -> Path:
    return _module_cache("sigs.k8s.io/kwok", binaries.KWOK_VERSION)


def kueue_module() -> Path:
    return _module_cache("sigs.k8s.io/kueue", binaries.KUEUE_VERSION)




def write_kwok_config(layout: Layout) -> Path:
    root = kwok_module()
    docs = [yaml.safe_load((root / stage).read_text()) for stage in KWOK_STAGES]
    for doc in docs:
        if doc["metadata"]["name"] == "pod-ready":
            doc["spec"]["selector"]["matchExpressions"].append(
                {"key": f'.metadata.labels["{DEV_AGENT_LABEL}"]', "operator": "DoesNotExist"})
    path = layout.config / "kwok.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def serving_cert_dir(layout: Layout, pki: PKI, who: str) -> Path:
    """A webhook server's certificate folder (tls.crt, tls.key: our serving certificate), as
    controller-runtime reads it (Kueue, the JobSet controller)."""
    cert_dir = layout.config / f"{who}-certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pki.serving_cert, cert_dir / "tls.crt")
    shutil.copyfile(pki.serving_key, cert_dir / "tls.key")
    return cert_dir


def write_kueue_config(layout: Layout, pki: PKI, ports: dict[str, int], cfg=None) -> Path:
    """Kueue's Configuration: loopback only, no leader election, our certificates, batch/v1 Jobs; with the
    profiles file `cfg`, what the product says to merge into it (`gpuhub render kueue-config`: the DRA
    DeviceClass mappings and the pods-ready timeout), as an admin does."""
    cert_dir = serving_cert_dir(layout, pki, "kueue")
    ensure_kueue_metrics_certs(pki)
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["webhook"], "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
        # The visibility API server wants certs under /visibility and an APIService; not needed here.
        "featureGates": {"VisibilityOnDemand": False},
        "clientConnection": {"qps": 200, "burst": 400},
    }
    if cfg is not None:
        from jupyterhub_gpu.builders.dra import kueue_configuration_fragment

        for key, value in kueue_configuration_fragment(cfg).items():
            config[key] = {**config[key], **value} if isinstance(config.get(key), dict) else value
    path = layout.config / "kueue.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def ensure_kueue_metrics_certs(pki: PKI) -> None:
    """Kueue refuses to start without a metrics certificate at a fixed path; put ours there once."""
    d = KUEUE_METRICS_CERT_DIR
    if (d / "tls.crt").is_file() and (d / "tls.key").is_file():
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pki.serving_cert, d / "tls.crt")
        shutil.copyfile(pki.serving_key, d / "tls.key")
    except OSError as e:
        raise SetupError(
            f"kueue reads its metrics certificate from {d}/tls.crt and tls.key (a path fixed in kueue), and it "
            f"cannot be written ({e.strerror}). Create it once: sudo mkdir -p {d} && sudo chown $USER {d}"
        ) from None


#: With real nodes: Services need their EndpointSlices (kube-proxy reads them), which the KWOK-only cluster skips.
REAL_NODE_CONTROLLERS = ("endpointslice-controller", "endpointslice-mirroring-controller")


def kubelet_access(pki: PKI, host_ip: str | None) -> list[str]:
    """How the API server reaches kubelets (pod logs, exec, port-forward) when real nodes run: by the Node's
    InternalIP, as AKS does (nothing resolves a node's name), with a client certificate the kubelets' webhook
    authorisation admits, checking each kubelet's serving certificate against the cluster CA."""
    if not host_ip:
        return []
    return ["--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--kubelet-client-certificate={pki.client_cert('kube-apiserver-kubelet-client')}",
            f"--kubelet-client-key={pki.client_key('kube-apiserver-kubelet-client')}",
            f"--kubelet-certificate-authority={pki.ca_cert}"]


def build(layout: Layout, pki: PKI, ports: dict[str, int], bins: Path,
          host_ip: str | None = None) -> dict[str, Component]:
    """Every component's command line; needs the kubeconfigs and config files written first. `host_ip`: real
    nodes run (realnodes.py), so the API server also listens on the node bridge's host address and advertises
    it as the `kubernetes` Service's endpoint (pods reach it there, as on a cluster)."""
    p = ports
    controllers = CONTROLLERS + (REAL_NODE_CONTROLLERS if host_ip else ())
    api = f"https://127.0.0.1:{p['kube-apiserver']}"
    serving = [f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}"]
    etcd_url = f"http://127.0.0.1:{p['etcd']}"
    peer_url = f"http://127.0.0.1:{p['etcd-peer']}"

    def comp(name: str, argv: list[str], url: str, **extra_ports: int) -> Component:
        return Component(name, [str(bins / name), *argv], url, layout.log(name), extra_ports)

    def delegated(who: str) -> list[str]:
        kc = layout.component_kubeconfig(who)
        return [f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
                "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={p[who]}", *serving]

    comps = [
        comp("etcd", [
            "--name=gpuhub-dev", f"--data-dir={layout.etcd_data}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=gpuhub-dev={peer_url}", "--initial-cluster-state=new",
            "--unsafe-no-fsync=true", "--quota-backend-bytes=4294967296", "--log-level=warn",
        ], f"{etcd_url}/health", port=p["etcd"], peer=p["etcd-peer"]),
        comp("kube-apiserver", [
            f"--etcd-servers={etcd_url}", f"--bind-address={'0.0.0.0' if host_ip else '127.0.0.1'}",
            f"--advertise-address={host_ip or '127.0.0.1'}",
            f"--secure-port={p['kube-apiserver']}", *serving, f"--client-ca-file={pki.ca_cert}",
            "--authorization-mode=RBAC", "--anonymous-auth=true",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}", f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
            "--enable-priority-and-fairness=false", "--profiling=false", "--v=1",
            # Nobody would lift the not-ready taint this plugin puts on new nodes: we run no
            # node-lifecycle controller (KWOK nodes send no heartbeats).
            "--disable-admission-plugins=TaintNodesByCondition",
            # On by default; named so that it stays on: team namespaces enforce Pod Security `restricted`
            # (`gpuhub render kueue`), here as on a real cluster, and Job pods must pass it.
            "--enable-admission-plugins=PodSecurity",
            f"--requestheader-client-ca-file={pki.ca_cert}", "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--requestheader-allowed-names=gpuhub-dev-front-proxy",
            *kubelet_access(pki, host_ip),
        ], f"{api}/readyz", port=p["kube-apiserver"]),
        comp("kube-controller-manager", [
            *delegated("kube-controller-manager"), f"--controllers={','.join(controllers)}",
            "--use-service-account-credentials=true", f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_cert}", "--v=1",
        ], f"https://127.0.0.1:{p['kube-controller-manager']}/healthz", port=p["kube-controller-manager"]),
        comp("kube-scheduler", delegated("kube-scheduler") + ["--v=1"],
             f"https://127.0.0.1:{p['kube-scheduler']}/readyz", port=p["kube-scheduler"]),
        comp("kwok", [
            f"--kubeconfig={layout.kubeconfig}", f"--config={layout.config / 'kwok.yaml'}",
            "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            f"--server-address=127.0.0.1:{p['kwok']}", f"--cidr={POD_CIDR}", "--node-ip=10.240.0.1",
            "--node-lease-duration-seconds=0",
        ], f"http://127.0.0.1:{p['kwok']}/healthz", port=p["kwok"]),
        comp("kueue", [f"--config={layout.config / 'kueue.yaml'}", f"--kubeconfig={layout.kubeconfig}"],
             f"http://127.0.0.1:{p['kueue-health']}/readyz", health=p["kueue-health"],
             webhook=p["kueue-webhook"], metrics=p["kueue-metrics"]),
    ]
    return {c.name: c for c in comps}


PORT_NAMES = ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
              "kueue-health", "kueue-webhook", "kueue-metrics", "jobset-health", "jobset-webhook")


def fixed_ports() -> dict[str, int]:
    """Ports pinned by the environment, e.g. GPUHUB_CLUSTER_PORT_KUBE_APISERVER=6443 (a stable kubeconfig)."""
    out = {}
    for name in PORT_NAMES:
        value = os.environ.get("GPUHUB_CLUSTER_PORT_" + name.upper().replace("-", "_"))
        if value:
            out[name] = int(value)
    return out
