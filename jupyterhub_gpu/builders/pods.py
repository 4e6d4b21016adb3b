"""Pure builders for what a profile puts into a pod: GPU resources, pool placement, tolerations,
/dev/shm, labels and env, and the user's datasets (builders/datasets.py). Shared by the spawner (as KubeSpawner
overrides) and the Job builder.
"""
from __future__ import annotations

from typing import Any

from jupyterhub_gpu.builders import dra
from jupyterhub_gpu.builders.datasets import pod_datasets
from jupyterhub_gpu.contract import (
    ENV_DRA_DEVICES,
    ENV_GPU_COUNT,
    ENV_GPU_KIND,
    ENV_GPU_RESOURCE,
    ENV_MIG_PROFILE,
    ENV_NODE_NAME,
    ENV_POOL,
    ENV_PROFILE,
    GPU_CHECK_CONTAINER,
    GPU_CHECK_ENV,
    GPU_CHECK_ONLY,
    GPU_COUNT_ANNOTATION,
    GPU_KIND_LABEL,
    GPU_RESOURCE_ANNOTATION,
    POOL_LABEL,
    PROFILE_LABEL,
)
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig

SHM_VOLUME = "dshm"
#: The node's name, so the GPU health check can say where the GPU is missing (downward API).
NODE_NAME_ENV = {ENV_NODE_NAME: {"valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}}


def priority_class_name(priority: str) -> str:
    """The PriorityClass (scheduling.k8s.io) that `gpuhub render kueue` creates for a priority name."""
    return f"gpuhub-{priority}"


def gpu_resources(cfg: ProfilesConfig, profile: Profile) -> dict[str, int]:
    """Extended resources for requests and limits (they must be equal for extended resources); none on a `dra`
    pool, whose GPUs come as a ResourceClaim (`dra.pod_claims`)."""
    name = cfg.resource_name(profile)
    return {name: profile.gpu.count} if name and not dra.uses_dra(cfg, profile) else {}


def server_placement(cfg: ProfilesConfig, profile: Profile) -> dict[str, Any]:
    """Where a server may run: its pool; with DRA alternatives, any of their pools (one required node-affinity
    term each, ORed, and exactly those pools' taints tolerated), where the scheduler finds the first free device.
    Jobs never take alternatives (node_selector / tolerations: their own pool)."""
    pools = dra.placement_choices(cfg, profile) if profile.gpu and profile.gpu.alternatives else []
    if len(pools) < 2:
        return {"node_selector": node_selector(cfg, profile), "tolerations": tolerations(cfg, profile)}
    tols = list({str(t): t for pool in pools for t in pool.tolerations()}.values())
    return {"node_selector": {}, "node_affinity_required": dra.node_affinity_terms(cfg, profile), "tolerations": tols}


def node_selector(cfg: ProfilesConfig, profile: Profile) -> dict[str, str]:
    pool = cfg.pool_of(profile)
    return dict(pool.node_selector) if pool else {}


def tolerations(cfg: ProfilesConfig, profile: Profile) -> list[dict[str, str]]:
    """Exactly the taints of the profile's own pool: never a wildcard, never another pool's."""
    pool = cfg.pool_of(profile)
    return pool.tolerations() if pool else []


def shm_volume(profile: Profile) -> dict[str, Any]:
    return {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": str(int(profile.shm))}}


def shm_mount() -> dict[str, Any]:
    return {"name": SHM_VOLUME, "mountPath": "/dev/shm"}


def gpu_kind(profile: Profile) -> str:
    return profile.gpu.kind if profile.gpu else "none"


def labels(profile: Profile) -> dict[str, str]:
    return {PROFILE_LABEL: profile.slug, POOL_LABEL: profile.pool or "none", GPU_KIND_LABEL: gpu_kind(profile)}


def annotations(cfg: ProfilesConfig, profile: Profile) -> dict[str, str]:
    out = {}
    if profile.gpu:
        out[GPU_RESOURCE_ANNOTATION] = cfg.resource_name(profile)
        out[GPU_COUNT_ANNOTATION] = str(profile.gpu.count)
    return out


def environment(cfg: ProfilesConfig, profile: Profile, server: bool = False) -> dict[str, str]:
    """Tells the notebook (and the GPU health check) what it was given; on a dra pool, what its claim may be
    allocated (a server's alternatives too: `server`)."""
    env = {
        ENV_PROFILE: profile.slug,
        ENV_POOL: profile.pool or "",
        ENV_GPU_KIND: gpu_kind(profile),
        ENV_GPU_COUNT: str(profile.gpu.count if profile.gpu else 0),
        ENV_GPU_RESOURCE: cfg.resource_name(profile) or "",
    }
    if profile.gpu and profile.gpu.profile:
        env[ENV_MIG_PROFILE] = profile.gpu.profile
    if dra.uses_dra(cfg, profile):
        env[ENV_DRA_DEVICES] = dra.devices_env(profile, with_alternatives=server)
    return env


def resource_overrides(profile: Profile, admin: dict[str, Any] | None = None) -> dict[str, Any]:
    """CPU and memory traits: what the profile sets wins, what it does not set stays the admin's KubeSpawner
    setting (`admin`: cpu_guarantee, cpu_limit, mem_guarantee, mem_limit). A limit the profile does not set
    is the admin's, never below the profile's guarantee; memory counts the memory-backed /dev/shm."""
    admin, given = admin or {}, profile.model_fields_set
    out: dict[str, Any] = {}
    if "cpu" in given:
        out["cpu_guarantee"] = float(profile.cpu)
    if profile.cpu_limit is not None:
        out["cpu_limit"] = float(profile.cpu_limit)
    elif "cpu" in given:
        out["cpu_limit"] = max(float(profile.cpu), float(admin.get("cpu_limit") or 0))
    if "memory" in given:
        out["mem_guarantee"] = profile.memory_limit
        out["mem_limit"] = max(profile.memory_limit, int(admin.get("mem_limit") or 0))
    return out


def spawner_overrides(cfg: ProfilesConfig, profile: Profile, admin: dict[str, Any] | None = None,
                      groups: list[str] = ()) -> dict[str, Any]:
    """KubeSpawner trait values for one profile (its `kubespawner_override`) for a user in `groups`; `admin`: see
    resource_overrides."""
    gpus = gpu_resources(cfg, profile)
    data_volumes, data_mounts, data_env = pod_datasets(cfg, profile, list(groups))  # the same as their jobs'
    overrides: dict[str, Any] = {
        **resource_overrides(profile, admin),
        "extra_resource_guarantees": {k: str(v) for k, v in gpus.items()},
        "extra_resource_limits": {k: str(v) for k, v in gpus.items()},
        **server_placement(cfg, profile),
        "volumes": ([shm_volume(profile)] if profile.own_shm else []) + data_volumes,
        "volume_mounts": ([shm_mount()] if profile.own_shm else []) + data_mounts,
        "extra_labels": labels(profile),
        "extra_annotations": annotations(cfg, profile),
        "environment": {**environment(cfg, profile, server=True), **data_env, **NODE_NAME_ENV},
    }
    # always explicit, like jobs: a pod without a class ranks at 0, below servers of `low` profiles
    overrides["priority_class_name"] = priority_class_name(cfg.effective_priority(profile))
    if profile.image:
        overrides["image"] = profile.image
    return overrides


def gpu_check_container(server: dict[str, Any]) -> dict[str, Any]:
    """The GPU health check as the init container of a GPU server's pod (`server`: its container, as the API
    writes it): the server's image and resources (the device plugin hands the init container the same GPUs,
    and the kubelet reuses them for the server), the env the check reads, its own security context, and no
    volume at all, so no home, `~/.jupyter` or `.pth` of the user's runs before it or writes its verdict."""
    out = {"name": GPU_CHECK_CONTAINER, "image": server.get("image"),
           "command": ["gpuhub-singleuser", GPU_CHECK_ONLY],
           "env": [e for e in server.get("env") or [] if e.get("name") in GPU_CHECK_ENV],
           "resources": server.get("resources") or {}, "terminationMessagePolicy": "File"}
    for key in ("imagePullPolicy", "securityContext"):
        if server.get(key):
            out[key] = server[key]
    return out


def tolerates(toleration: dict[str, Any], taint) -> bool:
    """Kubernetes' own rule: does this toleration match this taint?"""
    effect = toleration.get("effect")
    if effect and effect != taint.effect:
        return False
    key, op = toleration.get("key"), toleration.get("operator", "Equal")
    if not key:
        return op == "Exists"
    if key != taint.key:
        return False
    return op == "Exists" or toleration.get("value", "") == taint.value


def strip_gpu_tolerations(cfg: ProfilesConfig, tols: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Remove any toleration (an admin's default, a wildcard) that would let a CPU pod onto a GPU pool."""
    gpu_taints = cfg.gpu_taints()
    return [t for t in tols if not any(tolerates(t, taint) for taint in gpu_taints)]
