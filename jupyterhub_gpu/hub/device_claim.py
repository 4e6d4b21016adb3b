"""The server pod's ResourceClaim on a `dra` pool, set on KubeSpawner's V1Pod (the claim is builders/dra.py's)."""
from __future__ import annotations

from jupyterhub_gpu.builders import dra
from jupyterhub_gpu.model.profiles import Profile, ProfilesConfig


def add_device_claim(cfg: ProfilesConfig, profile: Profile | None, pod) -> None:
    """A profile on a `dra` pool gets its GPUs as one ResourceClaim made from its template, named by the server
    container (KubeSpawner has no trait for claims)."""
    from kubernetes_asyncio.client import CoreV1ResourceClaim, V1PodResourceClaim, V1ResourceRequirements

    if profile is None or not dra.uses_dra(cfg, profile):
        return
    claims, used = dra.pod_claims(dra.claim_template_name(profile))
    pod.spec.resource_claims = [V1PodResourceClaim(name=c["name"], resource_claim_template_name=c[
        "resourceClaimTemplateName"]) for c in claims]
    container = pod.spec.containers[0]
    container.resources = container.resources or V1ResourceRequirements()
    container.resources.claims = [CoreV1ResourceClaim(name=c["name"]) for c in used]
