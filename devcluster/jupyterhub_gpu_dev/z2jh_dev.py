"""`gpuhub dev --z2jh`: the product installed the way a platform team installs it, on the dev cluster's real nodes.

The steps of docs/admin-guide.md, run for real: the profiles ConfigMap, gpu-jobs' token Secret, the Kueue objects
and home share (`cluster up` makes those), `gpuhub render deploy` applied (RBAC, NetworkPolicies, gpu-jobs), then
`helm upgrade --install` of the zero-to-jupyterhub chart with deploy/values.yaml plus the short dev overlay below.
The images `make images` built are on the nodes already, under the names the deploy files use.
"""
from __future__ import annotations

import os
import re
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Callable

import yaml

from . import images as image_build
from . import storage, z2jh
from .kube import Kube, wait_for
from .realnode_config import RealNode
from .simulator_keys import DEV_AGENT_LABEL

ROOT = Path(__file__).resolve().parents[2]  # the checkout (this package is devcluster/jupyterhub_gpu_dev/)
NODE_PORT = 30080
HUB_UID, USERS_GID = 1000, 100
HUB_DB_CLAIM = "hub-db-dir"
#: The chart 4.4.0 proxy image (its values.yaml proxy.chp.image), which images.py's `chp` stands in for.
CHP_IMAGE_NAME = "quay.io/jupyterhub/configurable-http-proxy"


def _image(section: dict) -> str:
    return f"{section['name']}:{section['tag']}"


def product_image_names(profiles_text: str, gpu_jobs_yaml: str) -> dict[str, list[str]]:
    """Built image → the names the deploy files pull it by (deploy/values.yaml, the rendered gpu-jobs.yaml, the
    profiles file's per-profile images, the chart's proxy image)."""
    values = yaml.safe_load(z2jh.VALUES.read_text())
    chart = yaml.safe_load((z2jh.chart_dir() / "values.yaml").read_text())
    hub, gpu_server = _image(values["hub"]["image"]), _image(values["singleuser"]["image"])
    runner = re.search(r"--runner-image=(\S+)", gpu_jobs_yaml)
    profile_images = {p["image"] for p in (yaml.safe_load(profiles_text) or {}).get("profiles") or []
                      if isinstance(p, dict) and isinstance(p.get("image"), str)}
    cpu = sorted(i for i in profile_images if i.endswith("-cpu"))
    return {"hub": [hub], "singleuser-cuda": [gpu_server], "singleuser-cpu": cpu,
            "runner-cuda": [runner.group(1)] if runner else [],
            "chp": [_image(chart["proxy"]["chp"]["image"])]}


#: What the real nodes run, from `make images`.
NODE_IMAGES = ("hub", "chp", "singleuser-cpu", "singleuser-cuda", "runner-cuda")


def node_images(nodes: list[RealNode], names: dict[str, list[str]], pause: Path) -> dict[str, dict[Path, list[str]]]:
    """Which archives each real node gets: the system node the hub, proxy and CPU servers; the GPU node the GPU
    server and the runner. Every node the pod sandbox."""
    wanted = {False: ("hub", "chp", "singleuser-cpu"), True: ("singleuser-cuda", "runner-cuda")}
    out = {}
    for node in nodes:
        out[node.name] = {pause: []}
        for name in wanted[bool(node.gpu)]:
            out[node.name][image_build.archive(name)] = names[name]
    return out


def overlay(users: dict[str, list[str]], password: str) -> str:
    """The dev overlay on deploy/values.yaml, each line explained (written next to the state as dev-values.yaml)."""
    admins = sorted(u for u, groups in users.items() if "admin" in groups) or sorted(users)[:1]
    groups: dict[str, list[str]] = {}
    for user, gs in users.items():
        for g in gs:
            groups.setdefault(g, []).append(user)
    config = {"JupyterHub": {"authenticator_class": "dummy",
                             "load_groups": {g: {"users": sorted(us)} for g, us in sorted(groups.items())}},
              "DummyAuthenticator": {"password": password},
              "Authenticator": {"allowed_users": sorted(users), "admin_users": admins}}
    config_yaml = "\n".join("    " + line for line in yaml.safe_dump(config, sort_keys=False).splitlines())
    return f"""# gpuhub dev --z2jh: deploy/values.yaml plus these lines, for the dev cluster on one machine.
proxy:
  service:
    type: NodePort           # no cloud load balancer here: proxy-public answers on the system node's address
    nodePorts:
      http: {NODE_PORT}
prePuller:
  hook:
    enabled: false           # the images are on the nodes already (imported from `make images`): nothing to pull
  continuous:
    enabled: false
scheduling:
  userScheduler:
    enabled: false           # the default scheduler places servers (the user scheduler's image is not built here)
  userPlaceholder:
    enabled: false           # no placeholder pods: their image comes from a registry
singleuser:
  extraLabels:               # the dev agent (SIMULATOR) runs the servers that land on the file's KWOK pools
    {DEV_AGENT_LABEL}: run
hub:
  config:                    # the dev login: the users below, one shared password (printed), groups as listed
{config_yaml}
"""


def hub_db_volume(folder: Path) -> dict:
    """The hub's sqlite volume: a static PV bound to the chart's claim (the dev cluster has no provisioner)."""
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{z2jh.NAMESPACE}-hub-db"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(folder), "type": "Directory"},
                     "claimRef": {"namespace": z2jh.NAMESPACE, "name": HUB_DB_CLAIM}}}


def _mkdir_owned(path: Path, uid: int, gid: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, gid)


def prepare(kube: Kube, kubeconfig: Path, profiles: Path, users: dict[str, list[str]], state: Path) -> str:
    """Everything the admin guide does before `helm install`; returns the rendered gpu-jobs.yaml."""
    from jupyterhub_gpu.builders.deploy import generated_files
    from jupyterhub_gpu.builders.hardening import POD_SECURITY_LABELS
    from jupyterhub_gpu.model.profiles_file import load_profiles

    cfg = load_profiles(profiles)
    ns = z2jh.NAMESPACE
    # the release namespace enforces Pod Security `restricted`: the hub, proxy, gpu-jobs and every server pass it
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": POD_SECURITY_LABELS}})
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gpuhub-profiles", "namespace": ns},
                "data": {"profiles.yaml": profiles.read_text()}})
    if not kube.read("v1", "Secret", "gpu-jobs-api-token", ns):
        kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gpu-jobs-api-token", "namespace": ns},
                     "stringData": {"token": secrets.token_hex(32)}})
    files = generated_files(cfg, str(profiles), ns)
    for name in ("rbac.yaml", "networkpolicy.yaml", "gpu-jobs.yaml"):
        for obj in yaml.safe_load_all(files[name]):
            if obj:
                kube.apply(obj)
    db = state / "hub-db"
    _mkdir_owned(db, HUB_UID, HUB_UID)
    kube.apply(hub_db_volume(db))
    # the admin guide's storage step, once per share: its top folder writable by the users (uid 1000, gid 100).
    # No user's own folder is made here: a server or job creates it at its first start, as on a real share.
    share = storage.cluster_share(kubeconfig)
    _mkdir_owned(share, HUB_UID, USERS_GID)
    share.chmod(0o2775)
    return files["gpu-jobs.yaml"]


#: What a dev profile may ask of one real node: the rest is left to the pods already there (hub, proxy, gpu-jobs).
REAL_NODE_SHARE = Decimal("0.75")


def real_node_room(kube: Kube, cfg) -> dict[str, tuple[Decimal, Decimal]]:
    """Pool → (CPUs, memory bytes) a server may ask on that pool's real node (containerd nodes; KWOK pools have
    the sizes the file gives them): REAL_NODE_SHARE of what the kubelet reports, which is this machine's size."""
    from jupyterhub_gpu.model.node_pools import pool_of
    from jupyterhub_gpu.model.quantities import parse

    out: dict[str, tuple[Decimal, Decimal]] = {}
    for node in kube.list("v1", "Node"):
        runtime = ((node.get("status") or {}).get("nodeInfo") or {}).get("containerRuntimeVersion", "")
        pool = pool_of(cfg.pools, node["metadata"].get("labels") or {})
        if pool and runtime.startswith("containerd://"):
            alloc = node["status"].get("allocatable") or {}
            out[pool] = (parse(alloc.get("cpu", 0)) * REAL_NODE_SHARE, parse(alloc.get("memory", 0)) * REAL_NODE_SHARE)
    return out


def fit_profiles(text: str, room: dict[str, tuple[Decimal, Decimal]]) -> tuple[str, list[str]]:
    """The profiles file with each profile on a real node's pool asking at most what that node has room for
    (`real_node_room`), and a line per change; the file as it was when nothing changes."""
    from jupyterhub_gpu.model import quantities

    data = yaml.safe_load(text) or {}
    said = []
    for p in data.get("profiles") or []:
        if not isinstance(p, dict) or p.get("pool") not in room:
            continue
        cpus, mem = room[p["pool"]]
        if "cpu" in p and quantities.parse(p["cpu"]) > cpus:
            said.append(f"profile {p.get('slug')!r} asks {p['cpu']} CPUs; the real {p['pool']} node here has room "
                        f"for {quantities.cpu(cpus)}: its servers here ask that")
            p["cpu"] = quantities.cpu(cpus)
            if "cpu_limit" in p and quantities.parse(p["cpu_limit"]) < cpus:
                p.pop("cpu_limit")
        if "memory" in p and quantities.parse(p["memory"]) + quantities.parse(p.get("shm", 0)) > mem:
            said.append(f"profile {p.get('slug')!r} asks {p['memory']} of memory; the real {p['pool']} node here "
                        f"has room for {quantities.memory(mem)}")
            p["memory"], p["shm"] = quantities.memory(mem * 3 / 4), quantities.memory(mem / 4)
    if not said:
        return text, []
    return ("# gpuhub dev --z2jh: the profiles file fitted to this machine's real nodes (see dev-values.yaml)\n"
            + yaml.safe_dump(data, sort_keys=False)), said


def helm_install(kubeconfig: Path, overlay_file: Path, chart: Path | None = None, timeout: str = "6m") -> None:
    cmd = [str(z2jh.helm()), "upgrade", "--install", z2jh.RELEASE, str(z2jh.released(chart or z2jh.chart_dir())),
           "--namespace", z2jh.NAMESPACE, "--kubeconfig", str(kubeconfig), "-f", str(z2jh.VALUES),
           "-f", str(overlay_file), "--wait", "--timeout", timeout]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"helm upgrade --install failed: {(out.stderr or out.stdout).strip()[-2000:]}")


def wait_ready(kube: Kube, timeout: float = 300) -> None:
    """The hub, the proxy and gpu-jobs each have a Ready pod."""
    def ready(selector: str) -> bool:
        pods = kube.list("v1", "Pod", z2jh.NAMESPACE, label_selector=selector)
        return any(any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
                   for p in pods)

    for what, selector in (("the hub", "component=hub"), ("the proxy", "component=proxy"),
                           ("gpu-jobs", "app.kubernetes.io/name=gpu-jobs")):
        wait_for(lambda: ready(selector), timeout, f"{what}'s pod to be Ready", interval=1)


def wait_answering(url: str, timeout: float = 180, in_a_row: int = 3) -> None:
    """proxy-public answers the hub's /hub/health `in_a_row` times running: the whole path a user's login takes
    (NodePort, the proxy, the hub Service, the hub). A Ready hub pod is not enough: kube-proxy programs the hub
    Service's new endpoint a little later, and until then the proxy answers 503."""
    answered = 0

    def healthy() -> bool:
        nonlocal answered
        try:
            with urllib.request.urlopen(f"{url}/hub/health", timeout=5) as r:
                answered = answered + 1 if r.status == 200 else 0
        except (urllib.error.URLError, OSError):
            answered = 0
        return answered >= in_a_row

    wait_for(healthy, timeout, "proxy-public to answer the hub's /hub/health", interval=0.5)


def install(kubeconfig: Path, profiles: Path, users: dict[str, list[str]], state: Path, system_node_ip: str,
            chart: Path | None = None, say: Callable[[str], None] = lambda m: None) -> tuple[str, str]:
    """Install (or upgrade) the product; returns (proxy-public URL, the dev password)."""
    from jupyterhub_gpu.model.profiles_file import load_profiles

    state.mkdir(parents=True, exist_ok=True)
    kube = Kube(kubeconfig)
    try:
        t0 = time.monotonic()
        text, said = fit_profiles(profiles.read_text(), real_node_room(kube, load_profiles(profiles)))
        if said:  # every profile of the file can start here (a 2-CPU machine's node cannot hold a 2-CPU server)
            profiles = state / "profiles.yaml"
            profiles.write_text(text)
            for line in said:
                say(line)
        prepare(kube, kubeconfig, profiles, users, state)
        password_file = state / "dev-password"
        if not password_file.is_file():
            password_file.write_text(secrets.token_urlsafe(12))
            password_file.chmod(0o600)
        password = password_file.read_text().strip()
        overlay_file = state / "dev-values.yaml"
        overlay_file.write_text(overlay(users, password))
        say("helm upgrade --install jhub (z2jh 4.4.0) with deploy/values.yaml and " + str(overlay_file))
        helm_install(kubeconfig, overlay_file, chart)
        wait_ready(kube)
        url = f"http://{system_node_ip}:{NODE_PORT}"
        wait_answering(url)
        say(f"hub, proxy and gpu-jobs Ready, and the hub answering through proxy-public, in "
            f"{time.monotonic() - t0:.0f} s")
    finally:
        kube.close()
    return url, password
