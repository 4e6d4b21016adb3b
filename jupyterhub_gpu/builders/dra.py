"""Pure builders for GPUs through Dynamic Resource Allocation: a profile's ResourceClaimTemplate, the pod's claim,
gpuhub's DeviceClasses, and the Kueue Configuration that counts DRA devices against the same quota names as the
device plugin's (nvidia.com/gpu, nvidia.com/mig-<slice>), so a team's quota is one number either way.

Kueue reads a Workload's claim templates from its own namespace, so every namespace where pods of a profile run
(the hub's for servers, each team's for jobs) gets the template (`claim_templates`).
"""
from __future__ import annotations

from typing import Any

from jupyterhub_gpu.contract import MANAGED_BY
from jupyterhub_gpu.model import dra
from jupyterhub_gpu.model.gpus import mig_resource_name
from jupyterhub_gpu.model.profiles import GPUChoice, Pool, Profile, ProfilesConfig

RESOURCE_API = "resource.k8s.io/v1"
#: The name of the pod's claim (pod.spec.resourceClaims[].name) and of its one device request.
CLAIM_NAME = "gpu"
REQUEST_NAME = "gpu"
#: A jobs' template of a profile with alternatives: a dot, which no profile slug has, so no other profile's
#: `gpuhub-<slug>` can take its name (template names are DNS subdomains).
JOB_SUFFIX = ".job"
#: Kueue evicts an admitted workload whose pods are not all ready by then (v0.19 default: 30 min, always on);
#: a server's first pull of a 10-20 GB image on a node that is still being provisioned can take longer.
PODS_READY_TIMEOUT = "1h"


def uses_dra(cfg: ProfilesConfig, profile: Profile) -> bool:
    pool = cfg.pool_of(profile)
    return profile.gpu is not None and pool is not None and pool.is_dra


def claim_template_name(profile: Profile) -> str:
    return f"gpuhub-{profile.slug}"


def own_choice(profile: Profile) -> GPUChoice:
    """The profile's own GPUs as a device choice (the first of its prioritized list)."""
    kind = "mig" if profile.gpu.kind == "mig" else "full"
    return GPUChoice(pool=profile.pool, kind=kind, count=profile.gpu.count, profile=profile.gpu.profile)


def devices_env(profile: Profile, with_alternatives: bool) -> str:
    """contract.ENV_DRA_DEVICES: what the claim may be allocated (`full:1 mig:1:3g.40gb`), so the GPU check can
    count it; jobs never take alternatives (`with_alternatives` False)."""
    choices = [own_choice(profile), *(profile.gpu.alternatives if with_alternatives else ())]
    return " ".join(f"{c.kind}:{c.count}" + (f":{c.profile}" if c.kind == "mig" else "") for c in choices)


def choice_class(pool: Pool, choice: GPUChoice) -> str:
    return dra.mig_class_name(choice.profile) if choice.kind == "mig" else pool.device_class


def choice_request(cfg: ProfilesConfig, choice: GPUChoice) -> dict[str, Any]:
    """`exactly` (or one subrequest): the pool's DeviceClass and its GPU model, `count` devices."""
    pool = cfg.pools[choice.pool]
    return {"deviceClassName": choice_class(pool, choice), "allocationMode": "ExactCount", "count": choice.count,
            "selectors": [{"cel": {"expression": dra.product_selector(pool.gpu.spec.product)}}]}


def choice_name(index: int, choice: GPUChoice) -> str:
    """A subrequest's name (a DNS label): its rank and what it is, e.g. `c1-a100` or `c2-mig-3g-40gb`."""
    what = f"mig-{choice.profile.replace('.', '-')}" if choice.kind == "mig" else choice.pool
    return f"c{index}-{what}"[:63].rstrip("-")


def claim_request(cfg: ProfilesConfig, profile: Profile, with_alternatives: bool = True) -> dict[str, Any]:
    """The claim's one device request: the profile's GPUs, or (servers only) its prioritized list."""
    own = own_choice(profile)
    if not (with_alternatives and profile.gpu.alternatives):
        return {"name": REQUEST_NAME, "exactly": choice_request(cfg, own)}
    choices = [own, *profile.gpu.alternatives]
    return {"name": REQUEST_NAME, "firstAvailable": [
        {"name": choice_name(i, c), **choice_request(cfg, c)} for i, c in enumerate(choices)]}


def claim_template(cfg: ProfilesConfig, profile: Profile, namespace: str, for_jobs: bool = False) -> dict[str, Any]:
    """A profile's ResourceClaimTemplate in one namespace. Jobs (`for_jobs`) always ask for the profile's own
    GPUs: Kueue queues every job, and it cannot count a prioritized list."""
    name = claim_template_name(profile) + (JOB_SUFFIX if for_jobs and profile.gpu.alternatives else "")
    return {"apiVersion": RESOURCE_API, "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
            "spec": {"metadata": {"labels": dict(MANAGED_BY)},
                     "spec": {"devices": {"requests": [claim_request(cfg, profile, not for_jobs)]}}}}


def job_template_name(profile: Profile) -> str:
    return claim_template_name(profile) + (JOB_SUFFIX if profile.gpu.alternatives else "")


def claim_templates(cfg: ProfilesConfig, hub_namespace: str) -> list[dict[str, Any]]:
    """Every dra profile's template: in the hub's namespace for servers, in each team's for its jobs."""
    profiles = [p for p in cfg.profiles if uses_dra(cfg, p)]
    out = [claim_template(cfg, p, hub_namespace) for p in profiles]
    for team in dict.fromkeys(t.namespace for t in cfg.teams.values()):
        out += [claim_template(cfg, p, team, for_jobs=True) for p in profiles]
    return out


def pod_claims(template_name: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(pod.spec.resourceClaims, the container's resources.claims): one claim made from the template per pod."""
    return [{"name": CLAIM_NAME, "resourceClaimTemplateName": template_name}], [{"name": CLAIM_NAME}]


def placement_choices(cfg: ProfilesConfig, profile: Profile) -> list[Pool]:
    """The pools a server of this profile may land on: its own, then its alternatives' (in order, no repeats)."""
    names = dict.fromkeys([profile.pool, *(c.pool for c in profile.gpu.alternatives)] if profile.gpu else [])
    return [cfg.pools[n] for n in names if n in cfg.pools]


def node_affinity_terms(cfg: ProfilesConfig, profile: Profile) -> list[dict[str, Any]]:
    """One nodeSelectorTerm per pool (terms are ORed): where a device of the prioritized list may be."""
    return [{"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in pool.node_selector.items()]}
            for pool in placement_choices(cfg, profile)]


# ---------------------------------------------------------------- cluster-wide objects
def mig_slices(cfg: ProfilesConfig) -> list[str]:
    """Every MIG slice a dra pool offers, in file order."""
    return list(dict.fromkeys(s for p in cfg.pools.values() if p.is_dra for s in p.mig_layout))


def device_classes(cfg: ProfilesConfig) -> list[dict[str, Any]]:
    """gpuhub's DeviceClasses: one per MIG slice size on a dra pool (the driver's `mig.nvidia.com` holds every size,
    and Kueue counts a class under one quota name)."""
    return [{"apiVersion": RESOURCE_API, "kind": "DeviceClass",
             "metadata": {"name": dra.mig_class_name(s), "labels": dict(MANAGED_BY)},
             "spec": {"selectors": [{"cel": {"expression": dra.mig_selector(s)}}]}} for s in mig_slices(cfg)]


def driver_device_classes() -> list[dict[str, Any]]:
    """The NVIDIA DRA driver chart's own DeviceClasses (what a cluster with the driver installed has)."""
    out = []
    for name, kind in ((dra.GPU_CLASS, "gpu"), (dra.MIG_CLASS, "mig")):
        spec: dict[str, Any] = {"selectors": [{"cel": {"expression": dra.type_selector(kind)}}]}
        if kind == "gpu":
            spec["extendedResourceName"] = "nvidia.com/gpu"
        out.append({"apiVersion": RESOURCE_API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec})
    return out


def kueue_device_class_mappings(cfg: ProfilesConfig) -> list[dict[str, Any]]:
    """Kueue's `resources.deviceClassMappings`: whole GPUs count as nvidia.com/gpu, each MIG slice as
    nvidia.com/mig-<slice>, the names the ClusterQueues already cover."""
    gpu_classes = list(dict.fromkeys(p.device_class for p in cfg.pools.values() if p.is_dra and not p.mig_layout))
    out = [{"name": "nvidia.com/gpu", "deviceClassNames": gpu_classes}] if gpu_classes else []
    return out + [{"name": mig_resource_name(s), "deviceClassNames": [dra.mig_class_name(s)]} for s in mig_slices(cfg)]


def kueue_configuration_fragment(cfg: ProfilesConfig) -> dict[str, Any]:
    """What to merge into Kueue's Configuration (config.kueue.x-k8s.io/v1beta2; the chart's
    `managerConfig.controllerManagerConfigYaml`): the DRA mappings, and a pods-ready timeout that outlasts a
    queued server's image pull on a fresh node."""
    out: dict[str, Any] = {"waitForPodsReady": {"timeout": PODS_READY_TIMEOUT, "blockAdmission": False,
                                                "requeuingStrategy": {"timestamp": "Eviction"}}}
    if mappings := kueue_device_class_mappings(cfg):
        out["resources"] = {"deviceClassMappings": mappings}
    return out
