"""`gpuhub doctor`: does the live cluster match the profiles file? (pure checks: objects in, results out)

`doctor_live.py` fetches a `Snapshot` (nodes, device plugin DaemonSets and pods, Kueue CRDs and
objects, access reviews); `run_checks()` turns it into `Check` rows; `format_table()` prints them.
The "expected" side is never written twice: node labels come from `model.node_facts.gpu_labels`
(what GFD/the device plugin/mig-manager publish), slots from `Pool.slots_per_node()`, Kueue objects
from `render_kueue()`, permissions from `deploy.hub_permissions()`.

Statuses: ok (✓), fail (✗, with a fix), simulated (~): a GPU pool whose nodes all carry
`gpuhub.io/simulated=true` (the dev cluster's KWOK nodes) has no NVIDIA device plugin, because no
real GPU exists; its allocatable is published by the simulator. Doctor says so instead of failing or
pretending; a simulated row does not make the exit status non-zero. Everything else is checked
on the dev cluster exactly as on a real one. An AKS-managed GPU pool's device plugin and DCGM exporter are
AKS's services, not pods: doctor_managed.py reads them from the node's label and conditions. A dra pool's GPUs
(ResourceSlices, DeviceClasses, claim templates): doctor_dra.py; Kueue's own Configuration: doctor_kueue_config.py.
"""
from __future__ import annotations

from typing import Any, Iterable

from jupyterhub_gpu.builders.deploy import DEVICE_PLUGIN_CONFIG_LABEL, hub_permissions
from jupyterhub_gpu.builders.kueue import render_kueue
from jupyterhub_gpu.contract import KUEUE_API
from jupyterhub_gpu.contract import SIMULATED_NODE_LABEL as SIMULATED_LABEL
from jupyterhub_gpu.model.gpu_stack import is_managed
from jupyterhub_gpu.model.node_facts import MPS_CAPABLE_LABEL, gpu_labels
from jupyterhub_gpu.model.node_pools import in_pool, label_selector, node_labels
from jupyterhub_gpu.model.profiles import MIGSharing, MPSSharing, Pool, ProfilesConfig
from jupyterhub_gpu.model.quantities import parse_or_none
from jupyterhub_gpu.model.sharing_rules import MIG_CONFIG_LABEL, MIG_DISABLED

# The rows and statuses live in doctor_checks.py (doctor_quota / doctor_storage use them too); named here as before.
from jupyterhub_gpu.tools.doctor_checks import APPLY_KUEUE, FAIL, OK, SIMULATED, SYMBOL, Check, Snapshot  # noqa: F401
from jupyterhub_gpu.tools.doctor_datasets import check_datasets
from jupyterhub_gpu.tools.doctor_dra import check_dra, check_dra_allocatable, check_pool_devices
from jupyterhub_gpu.tools.doctor_identity import check_identity
from jupyterhub_gpu.tools.doctor_kueue_config import check_kueue_config
from jupyterhub_gpu.tools.doctor_managed import check_managed_stack
from jupyterhub_gpu.tools.doctor_quota import check_quota_usable
from jupyterhub_gpu.tools.doctor_size import size_problems
from jupyterhub_gpu.tools.doctor_storage import check_storage

KUEUE_VERSION = KUEUE_API.split("/")[1]
KUEUE_CRDS = ("resourceflavors", "clusterqueues", "localqueues", "workloads", "workloadpriorityclasses")
KUEUE_KINDS = ("WorkloadPriorityClass", "ResourceFlavor", "ClusterQueue", "LocalQueue")
DEVICE_PLUGIN_NAME = "nvidia-device-plugin"
#: The device plugin's MPS control daemon: its DaemonSet (`<device plugin>-mps-control-daemon`) runs one pod on
#: each node labelled nvidia.com/mps.capable=true; the doctor finds its pods among the device plugin's.
MPS_DAEMON_NAME = "mps-control-daemon"

#: Labels GFD / the device plugin / mig-manager publish that doctor compares exactly. Not
#: gpu.product and gpu.memory: real values vary by driver and board (e.g. 15360 MiB on a 16 GiB T4).
STRICT_GPU_LABELS = ("nvidia.com/gpu.count", "nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy",
                     "nvidia.com/mig.strategy")
#: Taints a node carries for a while by itself (not ready, unreachable, being drained).
TRANSIENT_TAINT_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/",
                            "ToBeDeletedByClusterAutoscaler")
INSTALL_KUEUE = ("install Kueue v0.19 (kubectl apply --server-side -f "
                 "https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml), "
                 f"then: {APPLY_KUEUE}")
INSTALL_OPERATOR = ("install the NVIDIA GPU operator with the device plugin config "
                    "(docs/admin-guide.md, deploy/nvidia-device-plugin-config.yaml)")


# ---------------------------------------------------------------------------------------------- helpers
def _some(names: Iterable[str], limit: int = 3) -> str:
    names = list(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _name(obj: dict[str, Any]) -> str:
    return obj["metadata"]["name"]


def pool_nodes(pool: Pool, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes whose labels carry the pool's whole node_selector (model/node_pools.py, as capacity decides)."""
    return [n for n in nodes if in_pool(pool, node_labels(n))]


def expected_labels(pool: Pool) -> dict[str, str]:
    """Labels every node of the pool must carry, beyond its node_selector."""
    gpu = gpu_labels(pool)
    out = {k: gpu[k] for k in STRICT_GPU_LABELS if k in gpu}
    out.update({k: v for k, v in gpu.items() if k.startswith("nvidia.com/mig-") and k.endswith(".count")})
    if pool.instance_type:
        out["node.kubernetes.io/instance-type"] = pool.instance_type
    return out


def _taint_key(t: dict[str, Any]) -> tuple[str, str, str]:
    return t.get("key", ""), t.get("value", "") or "", t.get("effect", "")


def _fmt_taint(t: tuple[str, str, str]) -> str:
    return f"{t[0]}={t[1]}:{t[2]}" if t[1] else f"{t[0]}:{t[2]}"


# ---------------------------------------------------------------------------------------------- pools
def check_pool(name: str, pool: Pool, nodes: list[dict[str, Any]], file: str) -> list[Check]:
    sec = f"pool {name}"
    mine = pool_nodes(pool, nodes)
    selector = label_selector(pool)
    out: list[Check] = []
    if not mine:
        if pool.min_nodes == 0 and pool.max_nodes:
            out.append(Check(sec, "nodes", OK, f"no nodes now; scales from zero (min 0, max {pool.max_nodes})"))
        else:
            why = (f"min_nodes is {pool.min_nodes}" if pool.min_nodes else
                   "the file gives no max_nodes, so nothing says the pool autoscales from zero")
            out.append(Check(sec, "nodes", FAIL, f"no node has labels {selector}; {why}",
                             f"create the pool (deploy/aks-nodepools.sh) or fix pools.{name}.node_selector in "
                             f"{file}; a pool that scales from zero needs min_nodes: 0 and max_nodes"))
        return out
    if len(mine) < pool.min_nodes:
        out.append(Check(sec, "nodes", FAIL, f"{len(mine)} nodes, fewer than min_nodes {pool.min_nodes}",
                         "check the autoscaler's minimum for the pool (az aks nodepool update --min-count)"))
    elif pool.max_nodes is not None and len(mine) > pool.max_nodes:
        out.append(Check(sec, "nodes", FAIL, f"{len(mine)} nodes, more than max_nodes {pool.max_nodes}",
                         f"raise pools.{name}.max_nodes in {file} or the pool's autoscaler maximum"))
    else:
        out.append(Check(sec, "nodes", OK, f"{len(mine)} node{'s' * (len(mine) != 1)}"))
    out.append(_check_labels(sec, name, pool, mine))
    out.append(_check_taints(sec, name, pool, mine, file))
    if pool.is_gpu:  # a dra pool's GPUs are no extended resources: the driver's ResourceSlices (doctor_dra.py)
        out.append(check_dra_allocatable(sec, pool, mine) if pool.is_dra else _check_allocatable(sec, pool, mine))
        if isinstance(pool.sharing, MIGSharing):
            out += _check_mig(sec, name, pool, mine)
    return out


def check_node_size(cfg: ProfilesConfig, name: str, pool: Pool, nodes: list[dict[str, Any]]) -> list[Check]:
    """The profiles and the file's node size against the nodes' real allocatable (tools/doctor_size.py)."""

    mine = pool_nodes(pool, nodes)
    if not mine:
        return []
    offer, problems, fix = size_problems(cfg, name, mine)
    if problems:
        return [Check(f"pool {name}", "node size", FAIL, "; ".join(problems), fix)]
    return [Check(f"pool {name}", "node size", OK, f"every profile fits; nodes offer pods {offer}")]


def _check_labels(sec: str, name: str, pool: Pool, nodes: list[dict[str, Any]]) -> Check:
    want = expected_labels(pool)
    bad = []
    for n in nodes:
        labels = node_labels(n)
        diffs = [f"{k}={labels.get(k, '<missing>')} (want {v})" for k, v in want.items() if labels.get(k) != v]
        if diffs:
            bad.append(f"{_name(n)}: {'; '.join(diffs[:3])}")
    if not bad:
        return Check(sec, "labels", OK,
                     f"{len(want)} expected label{'s' * (len(want) != 1)} on every node" if want else "node selector")
    fix = ("GPU labels come from GPU feature discovery and the device plugin: check the GPU operator and that the "
           f"node's {DEVICE_PLUGIN_CONFIG_LABEL} label names the pool's entry in "
           "deploy/nvidia-device-plugin-config.yaml"
           if pool.is_gpu else f"recreate the pool with --node-vm-size {pool.instance_type} or fix pools.{name}")
    return Check(sec, "labels", FAIL, _some(bad, 2), fix)


def _check_taints(sec: str, name: str, pool: Pool, nodes: list[dict[str, Any]], file: str) -> Check:
    want = {(t.key, t.value, t.effect) for t in pool.effective_taints}
    missing, extra = [], []
    for n in nodes:
        have = {_taint_key(t) for t in (n.get("spec") or {}).get("taints") or []
                if not t.get("key", "").startswith(TRANSIENT_TAINT_PREFIXES)}
        for t in sorted(want - have):
            missing.append(f"{_name(n)} lacks {_fmt_taint(t)}")
        for t in sorted(have - want):
            if t[2] in ("NoSchedule", "NoExecute"):
                extra.append(f"{_name(n)} has {_fmt_taint(t)}")
    if missing:
        taints = " ".join(sorted({m.split(" lacks ")[1] for m in missing}))
        consequence = ("pods that do not tolerate it (any CPU pod) can land on these GPU nodes" if pool.is_gpu
                       else "the node is not tainted as the file says")
        return Check(sec, "taints", FAIL, f"{_some(missing, 2)}: {consequence}",
                     f"kubectl taint nodes -l {label_selector(pool)} "
                     f"{taints} (and set it on the pool: az aks nodepool update --node-taints)")
    if extra:
        return Check(sec, "taints", FAIL, f"{_some(extra, 2)}, which the file does not list: this pool's "
                                          "profiles do not tolerate it, so their pods stay Pending",
                     f"remove the taint from the nodes, or add it to pools.{name}.taints in {file}")
    return Check(sec, "taints", OK, ", ".join(sorted(_fmt_taint(t) for t in want)) or "none (untainted)")


def _check_allocatable(sec: str, pool: Pool, nodes: list[dict[str, Any]]) -> Check:
    want = pool.slots_per_node()
    bad = []
    for n in nodes:
        alloc = (n.get("status") or {}).get("allocatable") or {}
        diffs = [f"{r}={alloc.get(r, '0')} (want {c})" for r, c in want.items() if parse_or_none(alloc.get(r, 0)) != c]
        stray = [f"{r}={v} (not expected)" for r, v in alloc.items()
                 if r.startswith("nvidia.com/") and r not in want and parse_or_none(v)]
        if diffs or stray:
            bad.append(f"{_name(n)}: {'; '.join((diffs + stray)[:3])}")
    if not bad:
        return Check(sec, "allocatable", OK, ", ".join(f"{r}: {c}" for r, c in want.items()) + " per node")
    if is_managed(pool):
        return Check(sec, "allocatable", FAIL, _some(bad, 2), "AKS's managed device plugin advertises these: "
                     "check the pool's gpu.count_per_node and the device plugin row")
    return Check(sec, "allocatable", FAIL, _some(bad, 2),
                 "the device plugin advertises these: check its config entry for the pool "
                 "(deploy/nvidia-device-plugin-config.yaml: replicas, migStrategy), the MIG layout, and that the "
                 "plugin runs on the node")


def _check_mig(sec: str, name: str, pool: Pool, nodes: list[dict[str, Any]]) -> list[Check]:
    want = pool.mig_config_name()
    wrong = [f"{_name(n)}: {node_labels(n).get('nvidia.com/mig.config', '<missing>')}" for n in nodes
             if node_labels(n).get("nvidia.com/mig.config") != want]
    out = [Check(sec, "MIG layout", OK, f"nvidia.com/mig.config={want}") if not wrong else
           Check(sec, "MIG layout", FAIL, f"want nvidia.com/mig.config={want}; {_some(wrong, 2)}",
                 f"kubectl label nodes -l {label_selector(pool)} "
                 f"nvidia.com/mig.config={want} --overwrite (mig-manager re-partitions; the config must exist in "
                 "deploy/mig-parted-config.yaml)")]
    states = {_name(n): node_labels(n).get("nvidia.com/mig.config.state", "<missing>") for n in nodes}
    bad = {n: s for n, s in states.items() if s != "success"}
    out.append(Check(sec, "MIG state", OK, "nvidia.com/mig.config.state=success") if not bad else
               Check(sec, "MIG state", FAIL, _some(f"{n}: {s}" for n, s in bad.items()),
                     "pending/rebooting: wait for mig-manager; failed: read the nvidia-mig-manager pod's log on the "
                     "node (GPU in use, or the layout does not fit the GPU)"))
    return out


def check_device_plugin(name: str, pool: Pool, nodes: list[dict[str, Any]], snap: Snapshot) -> Check | None:
    sec = f"pool {name}"
    mine = pool_nodes(pool, nodes)
    if not pool.is_gpu or not mine:
        return None
    if all(node_labels(n).get(SIMULATED_LABEL) == "true" for n in mine):
        return Check(sec, "device plugin", SIMULATED,
                     f"simulated nodes ({SIMULATED_LABEL}=true): no real GPU, the dev cluster publishes "
                     "allocatable itself; a real cluster needs the NVIDIA device plugin here")
    if snap.daemonsets is None or snap.device_plugin_pods is None:
        return Check(sec, "device plugin", FAIL, f"cannot read DaemonSets/pods: {snap.errors.get('device_plugin')}",
                     "run doctor with a kubeconfig that may list daemonsets and pods in all namespaces")
    if not snap.daemonsets:
        return Check(sec, "device plugin", FAIL, f"no DaemonSet named like {DEVICE_PLUGIN_NAME} in any namespace",
                     INSTALL_OPERATOR)
    ready_on = _ready_on(snap.device_plugin_pods, mps=False)
    missing = [_name(n) for n in mine if _name(n) not in ready_on]
    if missing:
        return Check(sec, "device plugin", FAIL, f"no ready device plugin pod on {_some(missing)}",
                     "kubectl -n <ns> get pods -o wide | grep nvidia-device-plugin; check the node's "
                     f"{DEVICE_PLUGIN_CONFIG_LABEL} label and the plugin pod's log")
    ds = _some(f"{d['metadata'].get('namespace')}/{_name(d)}" for d in snap.daemonsets)
    return Check(sec, "device plugin", OK, f"running on all {len(mine)} nodes ({ds})")


def _ready_on(pods: list[dict[str, Any]], mps: bool) -> set[str]:
    """Nodes with a Running, ready pod of the device plugin (`mps`: of its MPS control daemon)."""
    return {p.get("spec", {}).get("nodeName") for p in pods
            if (MPS_DAEMON_NAME in p.get("metadata", {}).get("name", "")) == mps
            and (p.get("status") or {}).get("phase") == "Running"
            and all(c.get("ready") for c in (p.get("status") or {}).get("containerStatuses") or [{}])}


def check_mps(name: str, pool: Pool, nodes: list[dict[str, Any]], snap: Snapshot) -> Check | None:
    """An MPS pool's nodes carry GFD's nvidia.com/mps.capable=true (its config entry has sharing.mps and no GPU
    is MIG-enabled), which the MPS control daemon's DaemonSet selects on, and that daemon is ready on each."""
    mine = pool_nodes(pool, nodes)
    if not isinstance(pool.sharing, MPSSharing) or not pool.is_gpu or not mine:
        return None
    sec, selector = f"pool {name}", label_selector(pool)
    bad = [f"{_name(n)}: {node_labels(n).get(MPS_CAPABLE_LABEL, '<missing>')}" for n in mine
           if node_labels(n).get(MPS_CAPABLE_LABEL) != "true"]
    if bad:
        mig = f" {MIG_CONFIG_LABEL}={MIG_DISABLED}" if pool.gpu.spec.supports_mig else ""
        return Check(sec, "MPS daemon", FAIL, f"want {MPS_CAPABLE_LABEL}=true; {_some(bad, 2)}: without it no MPS "
                     "control daemon runs there, so MPS pods cannot start",
                     f"GPU feature discovery sets it when the node's device plugin config entry has sharing.mps and "
                     f"MIG is off: kubectl label nodes -l {selector} {DEVICE_PLUGIN_CONFIG_LABEL}={name}{mig} "
                     "--overwrite (deploy/nvidia-device-plugin-config.yaml), then read the gpu-feature-discovery "
                     "pod's log on the node")
    if all(node_labels(n).get(SIMULATED_LABEL) == "true" for n in mine):
        return Check(sec, "MPS daemon", SIMULATED, f"{MPS_CAPABLE_LABEL}=true on simulated nodes: no real GPU, so "
                                                   "no MPS control daemon; a real cluster runs one per node here")
    if snap.device_plugin_pods is None:
        return Check(sec, "MPS daemon", FAIL, f"cannot read pods: {snap.errors.get('device_plugin')}",
                     "run doctor with a kubeconfig that may list daemonsets and pods in all namespaces")
    missing = [_name(n) for n in mine if _name(n) not in _ready_on(snap.device_plugin_pods, mps=True)]
    if missing:
        return Check(sec, "MPS daemon", FAIL, f"no ready {MPS_DAEMON_NAME} pod on {_some(missing)}: MPS pods there "
                     "wait for it", f"kubectl get pods -A -o wide | grep {MPS_DAEMON_NAME}; read that pod's log "
                     "(the device plugin's MPS control daemon DaemonSet, enabled by the sharing.mps config)")
    return Check(sec, "MPS daemon", OK, f"{MPS_CAPABLE_LABEL}=true and an MPS control daemon ready on all "
                                        f"{len(mine)} nodes")


# ---------------------------------------------------------------------------------------------- kueue
def check_kueue_crds(snap: Snapshot, file: str = "FILE") -> list[Check]:
    if snap.crds is None:
        return [Check("kueue", "CRDs", FAIL, f"cannot read CRDs: {snap.errors.get('crds')}",
                      "run doctor with a kubeconfig that may read customresourcedefinitions")]
    missing = [c for c in KUEUE_CRDS if f"{c}.kueue.x-k8s.io" not in snap.crds]
    if missing:
        return [Check("kueue", "CRDs", FAIL, f"Kueue is not installed: missing CRDs {', '.join(missing)}",
                      INSTALL_KUEUE.format(file=file))]
    unserved = []
    for c in KUEUE_CRDS:
        versions = {v["name"] for v in snap.crds[f"{c}.kueue.x-k8s.io"]["spec"].get("versions", []) if v.get("served")}
        if KUEUE_VERSION not in versions:
            unserved.append(f"{c} serves {', '.join(sorted(versions)) or 'nothing'}")
    if unserved:
        return [Check("kueue", "CRDs", FAIL, f"API {KUEUE_VERSION} not served: {_some(unserved)}",
                      "upgrade Kueue to v0.19 or later (v1beta2 API)")]
    return [Check("kueue", "CRDs", OK, f"{len(KUEUE_CRDS)} CRDs, {KUEUE_VERSION} served")]


def _norm(v: Any) -> Any:
    """Compare quantities by value (the API server may say 4 for "4", 1500m for "1.5")."""
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, (int, float, str)) and not isinstance(v, bool):
        q = parse_or_none(v)
        if q is not None:
            return q
    return v


def _tolerations(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted((t for t in spec.get("tolerations") or []), key=lambda t: sorted(t.items()))


def _resource_groups(spec: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for g in spec.get("resourceGroups") or []:
        flavors = []
        for f in g.get("flavors") or []:
            res = [{k: r[k] for k in ("name", "nominalQuota", "borrowingLimit") if k in r} for r in f.get("resources")]
            flavors.append({"name": f["name"], "resources": res})
        out.append({"coveredResources": list(g.get("coveredResources") or []), "flavors": flavors})
    return _norm(out)


def relevant(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """The fields `render kueue` sets and doctor compares (defaults Kueue adds are ignored)."""
    spec = obj.get("spec") or {}
    if kind == "ResourceFlavor":
        return {"nodeLabels": spec.get("nodeLabels") or {}, "tolerations": _tolerations(spec)}
    if kind == "ClusterQueue":
        return {"cohortName": spec.get("cohortName"), "namespaceSelector": spec.get("namespaceSelector"),
                "resourceGroups": _resource_groups(spec)}
    if kind == "LocalQueue":
        return {"clusterQueue": spec.get("clusterQueue")}
    if kind == "WorkloadPriorityClass":
        return {"value": obj.get("value")}
    return {}


def _diff(want: dict[str, Any], have: dict[str, Any]) -> list[str]:
    return [f"{k}: live {have.get(k)!r}, file says {want[k]!r}" for k in want if want[k] != have.get(k)]


def check_kueue_objects(cfg: ProfilesConfig, snap: Snapshot, file: str, hub_namespace: str = "jhub") -> list[Check]:
    if snap.crds is None or any(f"{c}.kueue.x-k8s.io" not in snap.crds for c in KUEUE_CRDS):
        return []  # check_kueue_crds said why
    if snap.kueue is None:
        return [Check("kueue", "objects", FAIL, f"cannot read Kueue objects: {snap.errors.get('kueue')}",
                      "run doctor with a kubeconfig that may list Kueue objects")]
    live = {(k, o["metadata"].get("namespace"), _name(o)): o for k, objs in snap.kueue.items() for o in objs}
    out = []
    for obj in render_kueue(cfg, hub_namespace):
        kind = obj["kind"]
        if kind not in KUEUE_KINDS:  # DeviceClasses and ResourceClaimTemplates: doctor_dra.py (resource.k8s.io)
            continue
        ns, name = obj["metadata"].get("namespace"), _name(obj)
        label = f"{kind} {ns + '/' if ns else ''}{name}"
        have = live.get((kind, ns, name))
        if have is None:
            out.append(Check("kueue", label, FAIL, "missing", APPLY_KUEUE.format(file=file)))
            continue
        diffs = _diff(relevant(kind, obj), relevant(kind, have))
        if diffs:
            out.append(Check("kueue", label, FAIL, "; ".join(diffs)[:300], APPLY_KUEUE.format(file=file)))
            continue
        if kind in ("ClusterQueue", "LocalQueue"):
            cond = {c.get("type"): c for c in (have.get("status") or {}).get("conditions") or []}
            active = cond.get("Active")
            if active is not None and active.get("status") != "True":
                out.append(Check("kueue", label, FAIL, f"not active: {active.get('reason')}: {active.get('message')}",
                                 "is the Kueue controller running (kubectl -n kueue-system get pods)? Are its "
                                 "ResourceFlavors and ClusterQueue there?"))
                continue
            if active is None:
                out.append(Check("kueue", label, FAIL, "no Active condition: the Kueue controller has not seen it",
                                 "check that the Kueue controller runs (kubectl -n kueue-system get pods)"))
                continue
        out.append(Check("kueue", label, OK, "matches the file" + (", active" if kind.endswith("Queue") else "")))
    return out


# ---------------------------------------------------------------------------------------------- rbac
def access_requests(cfg: ProfilesConfig, hub_namespace: str) -> list[tuple[str, str, str, str | None]]:
    """(verb, group, resource, namespace) for every access review doctor asks."""
    return [(v, p.group, p.resource, p.namespace) for p in hub_permissions(cfg, hub_namespace) for v in p.verbs]


def request_accounts(cfg: ProfilesConfig, hub_namespace: str) -> dict[tuple[str, str, str, str | None], str]:
    """Which account (the hub's, gpu-jobs') each access review is for."""
    return {(v, p.group, p.resource, p.namespace): p.account for p in hub_permissions(cfg, hub_namespace)
            for v in p.verbs}


def check_rbac(cfg: ProfilesConfig, snap: Snapshot, hub_namespace: str) -> list[Check]:
    out = []
    for p in hub_permissions(cfg, hub_namespace):
        denied = [v for v in p.verbs if not snap.access.get((v, p.group, p.resource, p.namespace), False)]
        name = f"{p.what} {p.where}"
        if denied:
            who = snap.identities.get(p.account, snap.identity)
            out.append(Check("rbac", name, FAIL, f"{who} may not {', '.join(denied)} ({p.why})",
                             "kubectl apply -f deploy/rbac.yaml -f deploy/gpu-jobs.yaml (regenerate them for your "
                             "namespaces and service accounts: gpuhub render deploy FILE)"))
        else:
            out.append(Check("rbac", name, OK, f"{', '.join(p.verbs)} ({p.why})"))
    if snap.errors.get("access"):
        out.append(Check("rbac", "access reviews", FAIL, snap.errors["access"],
                         "doctor needs to create (self)subjectaccessreviews"))
    return out


# ---------------------------------------------------------------------------------------------- all
def run_checks(cfg: ProfilesConfig, snap: Snapshot, file: str = "FILE",
               hub_namespace: str | None = None) -> list[Check]:
    """Every check, in table order: pools, Kueue, the hub's RBAC (when `hub_namespace` is given), storage, the
    teams' workload identities, the datasets."""
    out: list[Check] = []
    if snap.nodes is None:
        out.append(Check("cluster", "nodes", FAIL, f"cannot list nodes: {snap.errors.get('nodes')}",
                         "run doctor with a kubeconfig that may list nodes"))
    else:
        for name, pool in cfg.pools.items():
            out += check_pool(name, pool, snap.nodes, file)
            out += check_node_size(cfg, name, pool, snap.nodes)
            if is_managed(pool):  # AKS's own services, no DaemonSets (doctor_managed.py)
                out += check_managed_stack(name, pool_nodes(pool, snap.nodes))
            elif not pool.is_dra:
                out += filter(None, (check_device_plugin(name, pool, snap.nodes, snap),
                                     check_mps(name, pool, snap.nodes, snap)))
            out += check_pool_devices(name, pool, pool_nodes(pool, snap.nodes), snap)  # DRA's devices
    out += check_kueue_crds(snap, file)
    out += check_kueue_objects(cfg, snap, file, hub_namespace or "jhub")
    out += check_quota_usable(cfg, snap, file)  # per team and pool: can the live quota be used in full?
    out += check_kueue_config(cfg, snap, file)  # Kueue's own Configuration: DRA mappings, waitForPodsReady
    out += check_dra(cfg, snap, hub_namespace or "jhub", file)  # DeviceClasses, claim templates
    if hub_namespace is not None:
        out += check_rbac(cfg, snap, hub_namespace)
    if snap.home_claims is not None or "storage" in snap.errors:  # fetched (doctor_cluster always does)
        out += check_storage(cfg, snap.home_claims, snap.home_volumes, hub_namespace or "jhub", file,
                             snap.errors.get("storage", ""))
    simulated = bool(snap.nodes) and all(node_labels(n).get(SIMULATED_LABEL) == "true" for n in snap.nodes)
    if snap.identity_accounts is not None or "identity" in snap.errors:  # only teams with an identity
        out += check_identity(cfg, snap.identity_webhook, snap.identity_webhook_pods, snap.identity_accounts,
                              hub_namespace or "jhub", file, snap.errors.get("identity", ""), simulated)
    if snap.dataset_claims is not None or "datasets" in snap.errors:  # only a file with datasets
        out += check_datasets(cfg, snap.dataset_drivers, snap.dataset_claims, snap.dataset_volumes,
                              hub_namespace or "jhub", file, snap.errors.get("datasets", ""), simulated)
    return out


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.failed for c in checks) else 0


def format_table(checks: list[Check]) -> str:
    w1 = max((len(c.section) for c in checks), default=0)
    w2 = max((len(c.name) for c in checks), default=0)
    lines = []
    for c in checks:
        lines.append(f"{SYMBOL[c.status]} {c.section:<{w1}}  {c.name:<{w2}}  {c.detail}")
        if c.failed and c.fix:
            lines.append(f"  {'':<{w1}}  {'':<{w2}}  fix: {c.fix}")
    counts = {s: sum(c.status == s for c in checks) for s in (OK, FAIL, SIMULATED)}
    summary = f"{len(checks)} checks: {counts[OK]} ✓, {counts[FAIL]} ✗"
    if counts[SIMULATED]:
        summary += f", {counts[SIMULATED]} ~ (simulated, see the row)"
    lines.append(summary)
    return "\n".join(lines)
