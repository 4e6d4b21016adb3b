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
- `gpuhub-job-ranks` (every team namespace, when a profile allows multi-node jobs): the ranks of a JobSet
  (`%gpu_submit --nodes N`) take connections from JobSet pods of the same namespace only (rank 0's
  MASTER_PORT, NCCL's own ports), so the gang can talk while single-node Job pods still take none.

Pods are selected by z2jh's `component` label (`hub`, `proxy`, `singleuser-server`), which z2jh keeps;
not by its legacy `app`/`release` labels.
"""
from __future__ import annotations

from typing import Any

from gpu_spawner.contract import JOB_LABEL, JOBS_SERVICE, JOBSET_NAME_LABEL, MANAGED_BY
from gpu_spawner.model.profiles import ProfilesConfig

#: Addresses from which a pod can read the node's cloud identity: Azure IMDS (also AWS/GCP's metadata
#: address) and the Azure WireServer.
METADATA_CIDRS = ("169.254.169.254/32", "168.63.129.16/32")
JOBS_PORT = 10101
CULLER_PORT = 10102
USAGE_PORT = 10103  # the showback page (services/usage/hub.py), in the hub pod too
#: z2jh's pod roles, by the `component` label.
HUB, PROXY, SINGLEUSER = ({"component": c} for c in ("hub", "proxy", "singleuser-server"))
#: The labels of the gpu-jobs pods (`workloads.render_gpu_jobs`).
GPU_JOBS_POD = {"app.kubernetes.io/name": JOBS_SERVICE, "app.kubernetes.io/part-of": "jupyterhub-gpu"}


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


def job_ranks_policy(namespace: str) -> dict[str, Any]:
    """A multi-node job's ranks reach each other (any port: torch and NCCL pick theirs), from JobSet pods only."""
    ranks = {"matchExpressions": [{"key": JOBSET_NAME_LABEL, "operator": "Exists"}]}
    return _policy("gpuhub-job-ranks", namespace, ranks, {"policyTypes": ["Ingress"],
                                                          "ingress": [{"from": [{"podSelector": ranks}]}]})


def render_network_policies(cfg: ProfilesConfig, hub_namespace: str) -> list[dict[str, Any]]:
    """Every NetworkPolicy: the hub namespace's two, then one per team namespace."""
    objs = [
        _policy("gpuhub-gpu-jobs", hub_namespace, {"matchLabels": dict(GPU_JOBS_POD)}, {
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": PROXY}},
                                  {"podSelector": {"matchLabels": SINGLEUSER}},
                                  {"podSelector": {"matchLabels": HUB}}], "ports": _tcp(JOBS_PORT)}]}),
        _policy("gpuhub-hub-services", hub_namespace, {"matchLabels": HUB}, {
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": PROXY}}], "ports": _tcp(CULLER_PORT, USAGE_PORT)}]}),
    ]
    objs += [job_pods_policy(ns) for ns in dict.fromkeys(t.namespace for t in cfg.teams.values())]
    if any(p.max_nodes for p in cfg.profiles):
        objs += [job_ranks_policy(ns) for ns in dict.fromkeys(t.namespace for t in cfg.teams.values())]
    return objs
