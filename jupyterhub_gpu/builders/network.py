"""NetworkPolicies rendered from the profiles file (pure; part of `gpuhub render deploy`).

Next to z2jh's own policies (they add up: a pod selected by any policy takes only what some policy allows):

- `gpuhub-gpu-jobs` (hub namespace): the `gpu-jobs` pods take connections on their port from the proxy
  (users' browsers and API calls through `/services/gpu-jobs/`) and from notebook servers (`%gpu_submit`
  in the kernel, over plain HTTP inside the cluster), and from the hub pod (the culler hands its new
  warnings to gpu-jobs for the users' e-mail / webhook notifications); nothing else.
- `gpuhub-hub-services` (hub namespace): the culler's and the usage page's ports on the hub pod, from the
  proxy only.
- `gpuhub-job-pods` (every team namespace): a Job pod (the user's notebook, run by the runner) serves
  nothing, so no ingress at all; its egress may go anywhere (package mirrors, storage, DNS) except the
  cloud metadata endpoints, where a pod could otherwise read the node's identity and tokens
  (Azure IMDS 169.254.169.254, the Azure WireServer 168.63.129.16), as z2jh blocks for notebook servers.
- `gpuhub-ranks-<jobset>` (made by gpu-jobs with each multi-node job, not by `gpuhub render deploy`): the
  ranks of ONE JobSet (`%gpu_submit --nodes N`) take connections from the ranks of that same JobSet only
  (any port: rank 0's MASTER_PORT, NCCL's own). A namespace-wide rule for all JobSet pods would let a
  teammate's job reach another user's rank 0, whose torch rendezvous store is unauthenticated (it
  unpickles what it is sent): code execution as that user. Owned by the JobSet, so it goes with it.

Pods are selected by z2jh's `component` label (`hub`, `proxy`, `singleuser-server`), which z2jh keeps;
not by its legacy `app`/`release` labels.
"""
from __future__ import annotations

import hashlib
from typing import Any

from jupyterhub_gpu.builders.metadata import owner_reference
from jupyterhub_gpu.builders.names import GPU_JOBS_POD
from jupyterhub_gpu.contract import (
    ADMIN_PORT,
    CULLER_PORT,
    JOB_LABEL,
    JOBS_METRICS_PORT,
    JOBS_PORT,
    JOBSET_NAME_LABEL,
    MANAGED_BY,
    USAGE_PORT,
)
from jupyterhub_gpu.model.profiles import ProfilesConfig

#: Addresses from which a pod can read the node's cloud identity: Azure IMDS (also AWS/GCP's metadata
#: address) and the Azure WireServer.
METADATA_CIDRS = ("169.254.169.254/32", "168.63.129.16/32")
#: z2jh's pod roles, by the `component` label.
HUB, PROXY, SINGLEUSER = ({"component": c} for c in ("hub", "proxy", "singleuser-server"))


def _policy(name: str, namespace: str, selector: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
            "spec": {"podSelector": selector, **spec}}


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def job_pods_policy(namespace: str) -> dict[str, Any]:
    """No ingress to Job pods; egress anywhere but the metadata endpoints (DNS named explicitly, since
    whether an ipBlock covers in-cluster pod addresses such as the DNS pods depends on the network plugin)."""
    return _policy("gpuhub-job-pods", namespace, {"matchExpressions": [{"key": JOB_LABEL, "operator": "Exists"}]}, {
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [],
        "egress": [
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": list(METADATA_CIDRS)}}, {"ipBlock": {"cidr": "::/0"}}]},
            {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                     "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
             "ports": [{"protocol": "UDP", "port": 53}, *_tcp(53)]},
        ],
    })


#: A Kubernetes object name (and label value) has at most 63 characters.
NAME_LIMIT = 63


def ranks_policy_name(jobset: str) -> str:
    """`gpuhub-ranks-<jobset>`; a name that would pass 63 characters is cut and made unique by a hash."""
    name = f"gpuhub-ranks-{jobset}"
    if len(name) <= NAME_LIMIT:
        return name
    digest = hashlib.sha256(jobset.encode()).hexdigest()[:8]
    return f"{name[:NAME_LIMIT - 9].rstrip('-')}-{digest}"


def jobset_ranks_policy(jobset: dict[str, Any]) -> dict[str, Any]:
    """The ranks of one created JobSet (it has a uid) take connections from each other only, on any port
    (torch and NCCL pick theirs); owned by the JobSet, so the garbage collector removes it with it."""
    name, ns = jobset["metadata"]["name"], jobset["metadata"]["namespace"]
    gang = {"matchLabels": {JOBSET_NAME_LABEL: name}}
    pol = _policy(ranks_policy_name(name), ns, gang, {"policyTypes": ["Ingress"],
                                                      "ingress": [{"from": [{"podSelector": gang}]}]})
    pol["metadata"]["ownerReferences"] = [owner_reference(jobset)]
    return pol


#: Where Prometheus runs, by default (kube-prometheus-stack's and the Prometheus chart's usual namespace).
MONITORING_NAMESPACE = "monitoring"


def render_network_policies(cfg: ProfilesConfig, hub_namespace: str,
                            monitoring_namespace: str = MONITORING_NAMESPACE) -> list[dict[str, Any]]:
    """Every NetworkPolicy: the hub namespace's two, then one per team namespace. `monitoring_namespace`: whose
    pods (Prometheus) may scrape gpu-jobs' metrics port, which answers them only with its bearer token."""
    objs = [
        _policy("gpuhub-gpu-jobs", hub_namespace, {"matchLabels": dict(GPU_JOBS_POD)}, {
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": PROXY}},
                                  {"podSelector": {"matchLabels": SINGLEUSER}},
                                  {"podSelector": {"matchLabels": HUB}}], "ports": _tcp(JOBS_PORT)},
                        {"from": [{"namespaceSelector": {"matchLabels": {
                            "kubernetes.io/metadata.name": monitoring_namespace}}}],
                         "ports": _tcp(JOBS_METRICS_PORT)}]}),
        _policy("gpuhub-hub-services", hub_namespace, {"matchLabels": HUB}, {
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": PROXY}}],
                         "ports": _tcp(CULLER_PORT, USAGE_PORT, ADMIN_PORT)},
                        # the servers' culling warnings (the lab extension calls the culler with the server's token)
                        {"from": [{"podSelector": {"matchLabels": SINGLEUSER}}], "ports": _tcp(CULLER_PORT)}]}),
    ]
    objs += [job_pods_policy(ns) for ns in dict.fromkeys(t.namespace for t in cfg.teams.values())]
    return objs  # a multi-node job's own policy is made with it (jobset_ranks_policy)
