"""`gpuhub doctor`'s rows for Kueue's own Configuration (pure): what `gpuhub render kueue-config` asks of it.

Kueue (v0.19.2) reads its Configuration from a file that its chart and its release manifests keep in the ConfigMap
`kueue-manager-config` of `kueue-system`, key `controller_manager_config.yaml`; feature gates are set there
(`featureGates`) or on the manager's command line (`--feature-gates`, Deployment `kueue-controller-manager`).
Three things matter to gpuhub:

- deviceClassMappings (a file with a dra pool): Kueue counts a claim's devices only under the name its DeviceClass
  is mapped to; an unmapped class leaves the workload inadmissible, so gpuhub maps them to the device plugin's
  quota names (builders/dra.py), and the KueueDRAIntegration gate (on by default since v0.18) must not be off;
- waitForPodsReady (any file): on by default with a v1beta2 Configuration (timeout 30m), Kueue evicts an admitted
  workload whose pods are not all ready in time, such as a queued server whose 10-20 GB image is still pulling on a
  node the autoscaler just added (a job is requeued; a server's pod is deleted, so its start fails); gpuhub renders
  1h and blockAdmission false. The row reports the live
  setting; it is left out when no Configuration is found and the file has no dra pool (e.g. the dev cluster, whose
  Kueue reads a file of its own).
"""
from __future__ import annotations

from typing import Any

import yaml

from jupyterhub_gpu.builders import dra
from jupyterhub_gpu.model import durations
from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.tools.doctor_checks import FAIL, OK, Check, Snapshot
from jupyterhub_gpu.tools.doctor_dra import has_dra

SECTION = "kueue"
NAMESPACE = "kueue-system"
CONFIG_MAP = "kueue-manager-config"
CONFIG_KEY = "controller_manager_config.yaml"
MANAGER = "kueue-controller-manager"
DRA_GATE = "KueueDRAIntegration"
#: Kueue v0.19.2's defaults (apis/config/v1beta2/defaults.go; v1beta1: off unless `enable`, then 5m and blocking).
V1BETA2_TIMEOUT, V1BETA1_TIMEOUT = "30m", "5m"
MERGE = ("gpuhub render kueue-config {file}: merge it into Kueue's Configuration (ConfigMap "
         f"{CONFIG_MAP} in {NAMESPACE}, key {CONFIG_KEY}; Helm: managerConfig.controllerManagerConfigYaml), then "
         f"kubectl -n {NAMESPACE} rollout restart deployment {MANAGER}")


def configuration(config_maps: list[dict[str, Any]]) -> tuple[str | None, dict[str, Any] | None, str]:
    """(the ConfigMap's name, its Configuration, what was wrong reading it): `kueue-manager-config`, else any
    ConfigMap of kueue-system with the key (a Helm release of another name)."""
    named = [c for c in config_maps if c["metadata"]["name"] == CONFIG_MAP]
    holders = named or [c for c in config_maps if CONFIG_KEY in ((c.get("data") or {}))]
    if not holders:
        return None, None, ""
    cm = holders[0]
    text = (cm.get("data") or {}).get(CONFIG_KEY)
    if text is None:
        return cm["metadata"]["name"], None, f"it has no key {CONFIG_KEY}"
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return cm["metadata"]["name"], None, f"{CONFIG_KEY} is not YAML: {str(e).splitlines()[0]}"
    if not isinstance(parsed, dict):
        return cm["metadata"]["name"], None, f"{CONFIG_KEY} is not a mapping"
    return cm["metadata"]["name"], parsed, ""


def feature_gates(config: dict[str, Any], deployments: list[dict[str, Any]]) -> tuple[dict[str, bool], str]:
    """The gates set in the Configuration (`featureGates`) or on the manager's command line, and where."""
    set_gates = config.get("featureGates")
    gates = {str(k): bool(v) for k, v in set_gates.items()} if isinstance(set_gates, dict) else {}
    if gates:
        return gates, "featureGates in the Configuration"
    managers = [d for d in deployments if d["metadata"]["name"] == MANAGER] or [
        d for d in deployments if d["metadata"]["name"].endswith("controller-manager")]
    for d in managers[:1]:
        for c in ((d.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []:
            args = list(c.get("args") or []) + list(c.get("command") or [])
            for i, arg in enumerate(args):
                value = (arg.split("=", 1)[1] if arg.startswith("--feature-gates=") else
                         args[i + 1] if arg == "--feature-gates" and i + 1 < len(args) else None)
                for item in (value or "").split(","):
                    if "=" in item:
                        k, v = item.split("=", 1)
                        gates[k.strip()] = v.strip().lower() == "true"
        if gates:
            return gates, f"--feature-gates of deployment {d['metadata']['name']}"
    return gates, ""


def pods_ready(config: dict[str, Any] | None, gates: dict[str, bool]) -> tuple[bool, str, bool]:
    """(on, timeout, blockAdmission) as Kueue v0.19.2 resolves them, from its Configuration (None: Kueue's
    built-in v1beta2 defaults)."""
    if gates.get("DisableWaitForPodsReady"):
        return False, "", False
    config = config or {"apiVersion": "config.kueue.x-k8s.io/v1beta2"}
    block = config.get("waitForPodsReady") or {}
    if str(config.get("apiVersion", "")).endswith("/v1beta1"):
        if block.get("enable") is not True:
            return False, "", False
        return True, str(block.get("timeout") or V1BETA1_TIMEOUT), block.get("blockAdmission", True) is not False
    return True, str(block.get("timeout") or V1BETA2_TIMEOUT), block.get("blockAdmission") is True


def check_pods_ready(config: dict[str, Any] | None, gates: dict[str, bool], where: str, file: str) -> Check:
    on, timeout, block = pods_ready(config, gates)
    want = dra.PODS_READY_TIMEOUT
    if not on:
        if not gates.get("DisableWaitForPodsReady"):
            where += ", a v1beta1 Configuration without waitForPodsReady.enable"
        return Check(SECTION, "waitForPodsReady", OK, f"off ({where}): Kueue never evicts a workload whose pods are "
                                                      f"slow to start (gpuhub renders it on, {want})")
    try:
        short = durations.parse(timeout) < durations.parse(want)
    except ValueError:
        return Check(SECTION, "waitForPodsReady", FAIL, f"timeout {timeout!r} ({where}) is not a duration doctor "
                                                        "reads", MERGE.format(file=file))
    problems = []
    if short:
        problems.append(f"timeout {timeout}, shorter than the {want} gpuhub renders: a queued server whose 10-20 GB "
                        "image is still pulling on a fresh node by then is evicted (Kueue deletes its pod: the start "
                        "fails and its user queues again), a job evicted and requeued")
    if block:
        problems.append("blockAdmission true: Kueue admits nothing more until that workload's pods are ready, so "
                        "one server waiting for a new node holds back every team's servers and jobs")
    if problems:
        return Check(SECTION, "waitForPodsReady", FAIL, f"on ({where}); " + "; ".join(problems),
                     MERGE.format(file=file))
    return Check(SECTION, "waitForPodsReady", OK, f"on ({where}): timeout {timeout}, blockAdmission false")


def check_mappings(cfg: ProfilesConfig, config: dict[str, Any], file: str) -> Check:
    """Every DeviceClass the file's claims name is mapped to the quota name its ClusterQueues cover."""
    live: dict[str, dict[str, Any]] = {}
    resources = config.get("resources")
    mappings = resources.get("deviceClassMappings") if isinstance(resources, dict) else None
    for m in mappings if isinstance(mappings, list) else []:  # a hand-edited Configuration: skip what is no mapping
        names = m.get("deviceClassNames") if isinstance(m, dict) else None
        for cls in names if isinstance(names, list) else []:
            if isinstance(cls, str):
                live[cls] = m
    problems, fine = [], []
    for want in dra.kueue_device_class_mappings(cfg):
        for cls in want["deviceClassNames"]:
            have = live.get(cls)
            if have is None:
                problems.append(f"{cls} is not mapped (Kueue leaves every workload that claims it inadmissible)")
            elif have.get("name") != want["name"]:
                problems.append(f"{cls} counts as {have.get('name')}, the ClusterQueues cover {want['name']}")
            elif have.get("sources"):
                problems.append(f"{cls} is counted by its counters (sources), not as {want['name']} devices")
            else:
                fine.append(f"{cls} → {want['name']}")
    if problems:
        return Check(SECTION, "DRA mappings", FAIL, "; ".join(problems), MERGE.format(file=file))
    return Check(SECTION, "DRA mappings", OK, ", ".join(fine))


def check_kueue_config(cfg: ProfilesConfig, snap: Snapshot, file: str = "FILE") -> list[Check]:
    """The mappings and the DRA gate (a file with a dra pool), and the live waitForPodsReady (any file, once the
    Configuration is found)."""
    dra_file = has_dra(cfg)
    if snap.kueue_config_maps is None:
        if not dra_file or "kueue_config" not in snap.errors:  # not read: no Kueue (its CRDs row says so)
            return []
        return [Check(SECTION, "Configuration", FAIL, f"cannot read ConfigMaps in {NAMESPACE}: "
                      f"{snap.errors.get('kueue_config')}", f"run doctor with a kubeconfig that may list configmaps "
                                                            f"and deployments in {NAMESPACE}")]
    name, config, error = configuration(snap.kueue_config_maps)
    if config is None:
        if not dra_file and not error:
            return []
        why = f"ConfigMap {name}: {error}" if error else (f"no ConfigMap {CONFIG_MAP} (key {CONFIG_KEY}) in "
                                                          f"{NAMESPACE}")
        return [Check(SECTION, "Configuration", FAIL, f"{why}: doctor cannot see whether Kueue counts the dra pools' "
                      "devices", MERGE.format(file=file))]
    gates, gates_where = feature_gates(config, snap.kueue_deployments or [])
    rows = []
    if dra_file:
        rows.append(check_mappings(cfg, config, file))
        if gates.get(DRA_GATE) is False:
            rows.append(Check(SECTION, "DRA integration", FAIL, f"{DRA_GATE}=false ({gates_where}): every queued dra "
                              "server and job stays inadmissible (KueueDRARejectWorkloadsWhenDRADisabled, on by "
                              "default) or, with that off too, is admitted without its GPUs counted",
                              f"remove {DRA_GATE}=false ({gates_where}; on by default since Kueue v0.18), then "
                              f"kubectl -n {NAMESPACE} rollout restart deployment {MANAGER}"))
        else:
            rows.append(Check(SECTION, "DRA integration", OK, f"{DRA_GATE} on"
                              + (f" ({gates_where})" if DRA_GATE in gates else " (the default)")))
    where = f"ConfigMap {name}" + (f", DisableWaitForPodsReady in {gates_where}"
                                   if gates.get("DisableWaitForPodsReady") else "")
    rows.append(check_pods_ready(config, gates, where, file))
    return rows
