"""`gpuhub doctor`'s rows for GPUs through Dynamic Resource Allocation (pure), only when a pool has `allocation: dra`.

A dra pool's pods get their GPUs from a ResourceClaim that the scheduler allocates from the devices the NVIDIA DRA
driver (`gpu.nvidia.com`) publishes in ResourceSlices, through a DeviceClass. So doctor checks, per dra pool, that
the driver publishes each node's devices as the file says (GPU count and model; for MIG, the layout's slices) and
that no device plugin advertises the same GPUs (the two would hand one GPU to two pods; the driver's v0.4.1 chart
refuses to install beside the device plugin for that reason); per device-plugin pool, that the DRA driver does not
publish its GPUs. Then the DeviceClasses the claims name (the driver's, gpuhub's per MIG slice) and the claim
templates `gpuhub render kueue` writes (resource.k8s.io/v1, Kubernetes v1.36.3). Kueue's own Configuration is
doctor_kueue_config.py's. On the dev cluster (simulated nodes, no driver) a pool without slices is said so.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from jupyterhub_gpu.builders import dra
from jupyterhub_gpu.cluster.dra_devices import is_partitioned
from jupyterhub_gpu.contract import SIMULATED_NODE_LABEL
from jupyterhub_gpu.model import dra as dra_model
from jupyterhub_gpu.model.node_pools import label_selector, node_labels
from jupyterhub_gpu.model.profiles import Pool, ProfilesConfig
from jupyterhub_gpu.model.quantities import parse_or_none
from jupyterhub_gpu.tools.doctor_checks import APPLY_KUEUE, FAIL, OK, SIMULATED, Check, Snapshot

SECTION = "dra"
INSTALL_DRIVER = ("install the NVIDIA DRA driver on the dra pools' nodes (Helm chart dra-driver-nvidia-gpu v0.4.1 "
                  "with --set gpuResourcesEnabledOverride=true; kubeletPlugin.nodeSelector to those pools)")
NO_DEVICE_PLUGIN = ("turn the device plugin off on the pool's nodes (GPU operator: kubectl label nodes -l {selector} "
                    "nvidia.com/gpu.deploy.device-plugin=false)")


def has_dra(cfg: ProfilesConfig) -> bool:
    return any(p.is_dra for p in cfg.pools.values())


def _name(obj: dict[str, Any]) -> str:
    return obj["metadata"]["name"]


def _some(items: Iterable[str], limit: int = 2) -> str:
    items = list(items)
    return "; ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


# ---------------------------------------------------------------- the driver's devices per node
def attribute(device: dict[str, Any], name: str) -> Any:
    """A device attribute's value (resource.k8s.io/v1 DeviceAttribute: one of string/int/bool/version), by its bare
    name (the driver's own domain) or qualified with the driver's domain."""
    attrs = device.get("attributes") or {}
    value = attrs.get(name, attrs.get(f"{dra_model.DRIVER}/{name}"))
    if not isinstance(value, dict):
        return None
    return next((value[k] for k in ("string", "int", "bool", "version") if k in value), None)


def devices_by_node(slices: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """node → the NVIDIA driver's devices on it, from the newest generation of each of its pools (a pool being
    republished lists its old slices for a moment)."""
    newest: dict[tuple[str, str], int] = {}
    mine = []
    for s in slices:
        spec = s.get("spec") or {}
        node, pool = spec.get("nodeName"), spec.get("pool") or {}
        if spec.get("driver") != dra_model.DRIVER or not node:
            continue
        key, gen = (node, pool.get("name") or node), int(pool.get("generation") or 0)
        newest[key] = max(newest.get(key, gen), gen)
        mine.append((key, gen, spec.get("devices") or []))
    out: dict[str, list[dict[str, Any]]] = {}
    for key, gen, devices in mine:
        if gen == newest[key]:
            out.setdefault(key[0], []).extend(d for d in devices if isinstance(d, dict))
    return out


def node_problems(pool: Pool, devices: list[dict[str, Any]]) -> list[str]:
    """What a node's published devices lack against the pool: its GPUs (count, model) or its MIG slices."""
    if partitionable := [d for d in devices if is_partitioned(d)]:
        return [f"{len(partitionable)} partitionable devices (dynamic MIG: a GPU and the slices it could be cut into, "
                "sharing counters), which gpuhub does not count: it counts a static MIG layout only"]
    kinds = Counter(attribute(d, "type") for d in devices)
    if pool.mig_layout:
        have = Counter(attribute(d, "profile") for d in devices if attribute(d, "type") == "mig")
        return [f"{have[s]} MIG {s} (want {pool.gpu.count_per_node * n})" for s, n in pool.mig_layout.items()
                if have[s] != pool.gpu.count_per_node * n]
    out = []
    if kinds["gpu"] != pool.gpu.count_per_node:
        out.append(f"{kinds['gpu']} GPU{'s' * (kinds['gpu'] != 1)} (want {pool.gpu.count_per_node})")
    names = sorted({str(attribute(d, "productName")) for d in devices if attribute(d, "type") == "gpu"})
    wrong = [n for n in names if not dra_model.product_matches(pool.gpu.spec.product, n)]
    if wrong:
        out.append(f"productName {', '.join(wrong)}, not the pool's {pool.gpu.spec.product}: its claims select the "
                   "model and never match")
    return out


def check_dra_allocatable(sec: str, pool: Pool, nodes: list[dict[str, Any]]) -> Check:
    """A dra pool's node advertises no nvidia.com/* extended resource: a device plugin there would hand the
    same GPUs out a second time."""
    bad = []
    for n in nodes:
        alloc = (n.get("status") or {}).get("allocatable") or {}
        extra = [f"{r}={v}" for r, v in alloc.items() if r.startswith("nvidia.com/") and parse_or_none(v)]
        if extra:
            bad.append(f"{_name(n)}: {', '.join(extra[:2])}")
    if not bad:
        return Check(sec, "allocatable", OK, "no device plugin resources (GPUs come through DRA)")
    return Check(sec, "allocatable", FAIL, f"{_some(bad)}: a device plugin advertises this dra pool's GPUs, so a "
                 "device-plugin pod and a DRA claim can get the same GPU",
                 NO_DEVICE_PLUGIN.format(selector=label_selector(pool)))


def check_pool_devices(name: str, pool: Pool, nodes: list[dict[str, Any]], snap: Snapshot) -> list[Check]:
    """A dra pool: each node's devices as the file says. A device-plugin GPU pool: no DRA devices (a row only
    when there are some). Nothing when the slices were not read (no dra pool in the file)."""
    sec = f"pool {name}"
    read = snap.dra_slices is not None or "dra" in snap.errors
    if not pool.is_gpu or not nodes or not read or (snap.dra_slices is None and not pool.is_dra):
        return []
    if snap.dra_slices is None:
        return [Check(sec, "DRA devices", FAIL, f"cannot read ResourceSlices: {snap.errors.get('dra')}",
                      "run doctor with a kubeconfig that may list resourceslices and deviceclasses (resource.k8s.io)")]
    by_node = devices_by_node(snap.dra_slices)
    if not pool.is_dra:
        also = [_name(n) for n in nodes if by_node.get(_name(n))]
        return [Check(sec, "DRA devices", FAIL, f"the NVIDIA DRA driver also publishes the GPUs of "
                      f"{', '.join(also[:3])}, a device-plugin pool: a DRA claim and a device-plugin pod can get the "
                      "same GPU",
                      "keep the DRA driver's kubelet plugin off this pool (Helm: kubeletPlugin.nodeSelector to the "
                      "dra pools only)")] if also else []
    lacking, unlike, simulated, dynamic_mig = [], [], [], False
    for n in nodes:
        devices = by_node.get(_name(n), [])
        dynamic_mig = dynamic_mig or any(is_partitioned(d) for d in devices)
        if not devices and node_labels(n).get(SIMULATED_NODE_LABEL) == "true":
            simulated.append(_name(n))
        elif not devices:
            lacking.append(f"{_name(n)}: no devices of driver {dra_model.DRIVER}")
        elif problems := node_problems(pool, devices):
            unlike.append(f"{_name(n)}: {', '.join(problems)}")
    if lacking or unlike:
        fix = [INSTALL_DRIVER] if lacking else []
        if dynamic_mig:
            fix.append("run the driver without dynamic MIG on this pool and let mig-manager cut the file's static "
                       "layout (or keep the pool on the device plugin)")
        elif unlike:
            fix.append(("read the MIG rows above (mig-manager cuts the slices the driver publishes)" if pool.mig_layout
                        else "read the driver's gpu-kubelet-plugin pod log on the node") +
                       f", or fix pools.{name}.gpu (model, count_per_node) to what its nodes have")
        return [Check(sec, "DRA devices", FAIL, _some(lacking + unlike), "; ".join(fix))]
    if simulated and len(simulated) == len(nodes):
        return [Check(sec, "DRA devices", SIMULATED, f"simulated nodes ({SIMULATED_NODE_LABEL}=true), no "
                      f"ResourceSlices: a real cluster needs the NVIDIA DRA driver ({dra_model.DRIVER}) here")]
    want = (", ".join(f"{pool.gpu.count_per_node * k} x MIG {s}" for s, k in pool.mig_layout.items())
            if pool.mig_layout else f"{pool.gpu.count_per_node} x {pool.gpu.spec.product}")
    return [Check(sec, "DRA devices", OK, f"{dra_model.DRIVER} publishes {want} on each of {len(nodes)} "
                                          f"node{'s' * (len(nodes) != 1)}")]


# ---------------------------------------------------------------- DeviceClasses and claim templates
def wanted_classes(cfg: ProfilesConfig) -> dict[str, dict[str, Any] | None]:
    """name → gpuhub's rendered DeviceClass, or None for a class someone else installs (the driver's)."""
    out: dict[str, dict[str, Any] | None] = {
        p.device_class: None for p in cfg.pools.values() if p.is_dra and not p.mig_layout}
    out.update({_name(c): c for c in dra.device_classes(cfg)})
    return out


def class_pools(cfg: ProfilesConfig, name: str) -> list[str]:
    """The dra pools whose claims name this DeviceClass (whole GPUs: the pool's; MIG: gpuhub's per slice)."""
    return [n for n, p in cfg.pools.items() if p.is_dra and (
        name in map(dra_model.mig_class_name, p.mig_layout) if p.mig_layout else p.device_class == name)]


def check_device_classes(cfg: ProfilesConfig, live: dict[str, dict[str, Any]], file: str) -> list[Check]:
    rows = []
    for name, want in wanted_classes(cfg).items():
        pools = class_pools(cfg, name)
        which = f"pool{'s' * (len(pools) != 1)} {', '.join(pools)}"
        have, row = live.get(name), f"DeviceClass {name}"
        if have is None:
            fix = (APPLY_KUEUE.format(file=file) if want is not None else INSTALL_DRIVER if
                   name == dra_model.GPU_CLASS else f"create DeviceClass {name}, or fix device_class of pools "
                                                    f"{', '.join(pools)} in {file}")
            rows.append(Check(SECTION, row, FAIL, f"missing: the claims of {which} name it, so their pods stay "
                              "Pending (and Kueue cannot count them)", fix))
        elif want is not None and (have.get("spec") or {}).get("selectors") != want["spec"]["selectors"]:
            rows.append(Check(SECTION, row, FAIL, f"selectors {(have.get('spec') or {}).get('selectors')!r}, the file "
                              f"renders {want['spec']['selectors']!r}", APPLY_KUEUE.format(file=file)))
        else:
            rows.append(Check(SECTION, row, OK, f"{'gpuhub' if want else 'present'}: {which}"))
    return rows


def wanted_templates(cfg: ProfilesConfig, hub_namespace: str) -> list[tuple[str, str]]:
    """(namespace, name) of every claim template the file asks for: what the live shell reads."""
    return [(t["metadata"]["namespace"], _name(t)) for t in dra.claim_templates(cfg, hub_namespace)]


def check_claim_templates(cfg: ProfilesConfig, live: dict[tuple[str, str], dict[str, Any] | None],
                          hub_namespace: str, file: str) -> list[Check]:
    """Each template as `render kueue` writes it; a template's spec cannot change, so a stale one is deleted first."""
    rows = []
    for want in dra.claim_templates(cfg, hub_namespace):
        ns, name = want["metadata"]["namespace"], _name(want)
        who = "servers" if ns == hub_namespace else "jobs"
        have, row = live.get((ns, name)), f"ResourceClaimTemplate {ns}/{name}"
        if have is None:
            rows.append(Check(SECTION, row, FAIL, f"missing: {who} of its profile in {ns} cannot be created",
                              APPLY_KUEUE.format(file=file)))
            continue
        want_devices = want["spec"]["spec"]["devices"]
        have_devices = ((have.get("spec") or {}).get("spec") or {}).get("devices")
        if have_devices != want_devices:
            rows.append(Check(SECTION, row, FAIL, "asks for other devices than the file renders (its spec is "
                              "immutable)", f"kubectl -n {ns} delete resourceclaimtemplate {name}; then "
                              f"{APPLY_KUEUE.format(file=file)}"))
            continue
        request = want_devices["requests"][0]
        what = (f"{len(request['firstAvailable'])} choices in order" if "firstAvailable" in request else
                f"{request['exactly']['count']} x {request['exactly']['deviceClassName']}")
        rows.append(Check(SECTION, row, OK, f"{who}: {what}"))
    return rows


def check_dra(cfg: ProfilesConfig, snap: Snapshot, hub_namespace: str, file: str = "FILE") -> list[Check]:
    """The DeviceClasses and claim templates (nothing without a dra pool, or when they were not read; the per-pool
    rows: check_pool_devices)."""
    if not has_dra(cfg) or (snap.dra_slices is None and "dra" not in snap.errors):
        return []
    if snap.dra_slices is None:
        return [Check(SECTION, "DeviceClasses", FAIL, f"cannot read DRA objects: {snap.errors.get('dra')}",
                      "run doctor with a kubeconfig that may list deviceclasses, resourceslices and "
                      "resourceclaimtemplates (resource.k8s.io/v1; Kubernetes 1.34 or later)")]
    return check_device_classes(cfg, snap.dra_classes, file) + check_claim_templates(
        cfg, snap.dra_templates, hub_namespace, file)
