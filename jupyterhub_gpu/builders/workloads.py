"""The `gpu-jobs` service as its own workload, and the GPU operator's install values (pure; part of
`gpuhub render deploy`).

`gpu-jobs` runs in its own Deployment under its own ServiceAccount (`gpu-jobs`), so the Kubernetes
rights it needs (Jobs, ConfigMaps, Workloads in the team namespaces: `deploy.jobs_permissions`) are not
the hub's, and the hub's (server pods) are not its. The hub knows it as an external service: the proxy
routes `/services/gpu-jobs/` to the `gpu-jobs` Service, kernels call that Service directly over plain
HTTP inside the cluster (so HTTPS on the proxy changes nothing), and it calls the hub API at
`http://hub:8081` with a token both read from the Secret `gpu-jobs-api-token`.
"""
from __future__ import annotations

from typing import Any

from jupyterhub_gpu.builders.hardening import container_security_context, pod_security_context
from jupyterhub_gpu.builders.names import (
    DEVICE_PLUGIN_CONFIG,
    GPU_JOBS_POD,
    JOBS_ACCOUNT,
    MIG_PARTED_CONFIG,
    leases_namespace,
)
from jupyterhub_gpu.contract import (
    ENV_PROFILES,
    JOBS_METRICS_PORT,
    JOBS_METRICS_TOKEN_ENV,
    JOBS_PORT,
    JOBS_SERVICE,
    MANAGED_BY,
)
from jupyterhub_gpu.model.profiles import MIGSharing, ProfilesConfig

#: The Secret holding the service's hub API token (key `token`); the hub reads it too (deploy/values.yaml).
JOBS_TOKEN_SECRET = "gpu-jobs-api-token"
#: Prometheus' bearer token for gpu-jobs' metrics port (optional: without it the port serves loopback only).
JOBS_METRICS_SECRET = "gpu-jobs-metrics-token"
PROFILES_CONFIGMAP = "gpuhub-profiles"
PROFILES_DIR = "/etc/gpuhub"
#: z2jh's label that its hub NetworkPolicy admits to the hub API (port 8081).
HUB_ACCESS_LABEL = {"hub.jupyter.org/network-access-hub": "true"}
DEFAULT_IMAGE = "myregistry.azurecr.io/jupyterhub-gpu/hub:0.1.0"
#: What images/runner/Dockerfile's documented GPU build is tagged (a Job of a profile without `image`).
DEFAULT_RUNNER_IMAGE = "myregistry.azurecr.io/jupyterhub-gpu/runner:0.1.0-cuda"


def jobs_service_url(hub_namespace: str) -> str:
    """Where the proxy and kernels reach gpu-jobs: its Service, inside the cluster."""
    return f"http://{JOBS_SERVICE}.{hub_namespace}.svc:{JOBS_PORT}"


def notifying(options: dict[str, str] | None) -> bool:
    """Do these gpu-jobs options configure notifications (`Notifications.smtp_host`, `Notifications.webhooks`,
    any `Notifications.` setting: the class has no short aliases)?"""
    return any(k.lstrip("-").startswith("Notifications.") for k in options or {})


def render_gpu_jobs(hub_namespace: str, image: str = DEFAULT_IMAGE, runner_image: str = DEFAULT_RUNNER_IMAGE,
                    options: dict[str, str] | None = None, replicas: int | None = None) -> list[dict[str, Any]]:
    """ServiceAccount, Deployment and Service of the gpu-jobs service (image: the hub image, which has the
    package); two replicas, which share the per-user submit locks through Leases (kubeio/lease.py), but one
    when `options` configure notifications: their preferences and outbox are one SQLite file per pod, so an
    opt-out saved through one replica would be unknown to the one that sends (until that store is shared).
    `options`: the service's settings by command-line name (`python -m jupyterhub_gpu.services.jobs
    --help-all`), e.g. {"max-timeout": "3d"}."""
    if replicas is None:  # one with notifications: their state is per pod (see above)
        replicas = 1 if notifying(options) else 2
    # the jobs' training throughput for Prometheus, on a port of its own (the pod's annotations say where)
    # and its Leases in the namespace only it writes in (names.leases_namespace; rbac.yaml makes it)
    options = {"metrics-port": str(JOBS_METRICS_PORT), "lease-namespace": leases_namespace(hub_namespace),
               **(options or {})}
    args = [f"--{k}={v}" for k, v in {"runner-image": runner_image, **options}.items()]
    metrics_port = int(options["metrics-port"])
    meta = {"namespace": hub_namespace, "labels": {**MANAGED_BY, **GPU_JOBS_POD}}
    prefix = f"/services/{JOBS_SERVICE}/"
    env = {"JUPYTERHUB_SERVICE_NAME": JOBS_SERVICE, "JUPYTERHUB_SERVICE_PREFIX": prefix,
           "JUPYTERHUB_API_URL": "http://hub:8081/hub/api", "JUPYTERHUB_BASE_URL": "/",
           ENV_PROFILES: f"{PROFILES_DIR}/profiles.yaml", "HOME": "/tmp"}
    # the metrics port's bearer token for Prometheus; without the Secret the port serves loopback only
    metrics_token = [{"name": JOBS_METRICS_TOKEN_ENV, "valueFrom": {"secretKeyRef": {
        "name": JOBS_METRICS_SECRET, "key": "token", "optional": True}}}] if metrics_port else []
    container = {
        "name": JOBS_SERVICE, "image": image,
        "command": ["python3", "-m", "jupyterhub_gpu.services.jobs", f"--url=http://0.0.0.0:{JOBS_PORT}", *args],
        "env": [{"name": k, "value": v} for k, v in env.items()] + [
            {"name": "JUPYTERHUB_API_TOKEN",
             "valueFrom": {"secretKeyRef": {"name": JOBS_TOKEN_SECRET, "key": "token"}}},
        ] + metrics_token + [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.{f}"}}}  # the Leases'
                             for k, f in (("POD_NAME", "name"), ("POD_NAMESPACE", "namespace"))],  # holder, namespace
        "ports": [{"name": "http", "containerPort": JOBS_PORT}]
        + ([{"name": "metrics", "containerPort": metrics_port}] if metrics_port else []),
        "readinessProbe": {"httpGet": {"path": f"{prefix}health", "port": JOBS_PORT}, "periodSeconds": 10},
        "livenessProbe": {"httpGet": {"path": f"{prefix}health", "port": JOBS_PORT}, "periodSeconds": 30,
                          "failureThreshold": 5},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": {**container_security_context(), "readOnlyRootFilesystem": True},
        "volumeMounts": [{"name": "profiles", "mountPath": PROFILES_DIR, "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }
    scrape = {"prometheus.io/scrape": "true", "prometheus.io/port": str(metrics_port)} if metrics_port else {}
    pod = {"metadata": {"labels": {**GPU_JOBS_POD, **HUB_ACCESS_LABEL}, **({"annotations": scrape} if scrape else {})},
           "spec": {"serviceAccountName": JOBS_ACCOUNT,
                    "securityContext": pod_security_context(),
                    "containers": [container],
                    # stays off the GPU pools: it tolerates none of their taints
                    "volumes": [{"name": "profiles", "configMap": {"name": PROFILES_CONFIGMAP}},
                                {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]}}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": JOBS_ACCOUNT, **meta}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": JOBS_SERVICE, **meta},
         "spec": {"replicas": replicas, "selector": {"matchLabels": dict(GPU_JOBS_POD)}, "template": pod}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": JOBS_SERVICE, **meta},
         "spec": {"selector": dict(GPU_JOBS_POD), "ports": [{"name": "http", "port": JOBS_PORT,
                                                              "targetPort": JOBS_PORT}]}},
    ]


def gpu_taint_tolerations(cfg: ProfilesConfig) -> list[dict[str, str]]:
    """Tolerations of every taint on the file's GPU pools (the admin's and AKS's spot taint)."""
    return [t.toleration() for t in cfg.gpu_taints()]


def render_gpu_operator_values(cfg: ProfilesConfig) -> dict[str, Any]:
    """Helm values of the NVIDIA GPU operator for the file's GPU pools.

    - Every operand DaemonSet *and* node-feature-discovery's worker tolerate the GPU pools' taints: NFD
      labels a node `feature.node.kubernetes.io/pci-10de.present` (NVIDIA PCI device), and the operator
      deploys the driver only to nodes with that label, so an NFD worker kept off a tainted pool means
      GPU nodes that never get a driver or `nvidia.com/gpu`.
    - The device plugin reads the generated ConfigMap; a node without the per-pool label uses `default`.
    - mig-manager reboots cloud VMs when a MIG mode change needs it (`WITH_REBOOT=true`; Azure VMs have
      no way to reset the GPU otherwise).
    """
    tolerations = gpu_taint_tolerations(cfg)
    values: dict[str, Any] = {
        "daemonsets": {"tolerations": tolerations},
        "node-feature-discovery": {"worker": {"tolerations": tolerations}},
        "devicePlugin": {"config": {"name": DEVICE_PLUGIN_CONFIG, "default": "default"}},
        "driver": {"enabled": True},
        "toolkit": {"enabled": True},
        "dcgmExporter": {"enabled": True},
    }
    if any(isinstance(p.sharing, MIGSharing) for p in cfg.pools.values()):
        strategies = {p.sharing.mig_strategy for p in cfg.pools.values() if isinstance(p.sharing, MIGSharing)}
        values["mig"] = {"strategy": "mixed" if "mixed" in strategies else "single"}
        values["migManager"] = {"enabled": True, "config": {"name": MIG_PARTED_CONFIG, "default": "all-disabled"},
                                "env": [{"name": "WITH_REBOOT", "value": "true"}]}
    return values

