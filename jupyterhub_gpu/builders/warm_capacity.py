"""Warm capacity on AKS (pure): each pool's `warm` schedule (model/warm_schedule.py) as the node pool's autoscaler
minimum changed on time, by CronJobs that run `az aks nodepool update --update-cluster-autoscaler --min-count N
--max-count M`, and as the same commands for an admin who runs them from elsewhere (`warm_commands`).

Least privilege: the CronJobs' ServiceAccount has no Kubernetes RBAC at all (it binds no Role; its pods do not
mount its API token) and talks to Azure only, through workload identity, as a managed identity whose one role
assignment (`AZURE_ROLE`, on the cluster) allows reading and writing agent pools: `az aks nodepool update` GETs
the agent pool and PUTs it back (azure-cli's acs module). AKS's cluster autoscaler enforces a raised minimum by
adding nodes (AKS release 2021-07-22); a lowered one lets it remove unneeded nodes after its scale-down delay.
"""
from __future__ import annotations

from typing import Any

from jupyterhub_gpu.builders.aks_pools import aks_pool_name
from jupyterhub_gpu.builders.hardening import container_security_context
from jupyterhub_gpu.builders.identity import WI_CLIENT_ID, WI_USE
from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.model.warm_schedule import Change, changes, steps

NAMESPACE = "gpuhub-warm"
ACCOUNT = "warm-capacity"
TARGET = "warm-capacity-target"  # ConfigMap: RESOURCE_GROUP, CLUSTER (the admin's)
AZ_IMAGE = "mcr.microsoft.com/azure-cli:2.72.0"
#: A CronJob that missed its time (controller down, node drained) still runs within this many seconds.
STARTING_DEADLINE_S = 3600
#: The Azure role the managed identity needs, on the AKS cluster's resource id (nothing wider).
AZURE_ROLE = {
    "Name": "gpuhub warm capacity",
    "Description": "Change the autoscaler bounds of an AKS cluster's agent pools (jupyterhub-gpu warm schedules).",
    "Actions": ["Microsoft.ContainerService/managedClusters/agentPools/read",
                "Microsoft.ContainerService/managedClusters/agentPools/write"],
    "NotActions": [], "DataActions": [], "NotDataActions": [],
    "AssignableScopes": ["/subscriptions/<subscription-id>/resourceGroups/<resource-group>/providers/"
                         "Microsoft.ContainerService/managedClusters/<cluster>"],
}
#: A job keeps trying this long (AKS answers 409 while another operation runs on the cluster; a missed Friday
#: evening scale-down bills a node all weekend), pausing between tries; the Job's own deadline is a little longer.
TRY_FOR_S = 2700
PAUSE_S = 30
ACTIVE_DEADLINE_S = 3000
#: The container's script: constant; every value comes from the environment (nothing from the file is spliced in).
#: It sets the minimum the pool's whole weekly step function gives for NOW (WARM_STEPS: `minute-of-week=count`,
#: Monday 00:00 = 0, read with `date` in WARM_TZ), so a late run of an older change cannot undo a newer one; where
#: the image has no data for the zone it sets this change's MIN_COUNT. It reads the pool's minCount first and is
#: done when it is right already; otherwise it retries the update until TRY_FOR_S.
SCRIPT = r"""case "$WARM_STEPS" in ''|*[!0-9=\ ]*) echo "WARM_STEPS is not minute=count pairs" >&2; exit 2;; esac
want_now() {
  want=$MIN_COUNT
  if [ ! -e "/usr/share/zoneinfo/$WARM_TZ" ]; then
    echo "no time zone data for $WARM_TZ in this image: this change's min-count $MIN_COUNT" >&2
    return
  fi
  set -- $(TZ="$WARM_TZ" date +'%u %H %M')
  now=$(( ($1 - 1) * 1440 + 10#$2 * 60 + 10#$3 ))
  for step in $WARM_STEPS; do
    if [ "${step%%=*}" -le "$now" ]; then want=${step#*=}; fi
  done
}
end=$(( SECONDS + TRY_FOR_S ))
logged_in=
while :; do
  want_now
  if [ -z "$logged_in" ] && az login --service-principal --username "$AZURE_CLIENT_ID" --tenant "$AZURE_TENANT_ID" \
      --federated-token "$(cat "$AZURE_FEDERATED_TOKEN_FILE")" --output none; then
    logged_in=1
  fi
  if [ -n "$logged_in" ]; then
    have=$(az aks nodepool show --resource-group "$RESOURCE_GROUP" --cluster-name "$CLUSTER" --name "$NODEPOOL" \
      --query minCount -o tsv) || have="?"
    if [ "$have" = "$want" ]; then
      echo "$NODEPOOL: min-count is $want already"
      exit 0
    fi
    if az aks nodepool update --resource-group "$RESOURCE_GROUP" --cluster-name "$CLUSTER" --name "$NODEPOOL" \
        --update-cluster-autoscaler --min-count "$want" --max-count "$MAX_COUNT" --output none; then
      echo "$NODEPOOL: min-count $want (was $have; max $MAX_COUNT)"
      exit 0
    fi
  fi
  if [ $(( SECONDS + PAUSE_S )) -ge "$end" ]; then
    echo "$NODEPOOL: min-count not set to $want in ${SECONDS}s" >&2
    exit 1
  fi
  echo "$NODEPOOL: trying again in ${PAUSE_S}s" >&2
  sleep "$PAUSE_S"
done
"""


def steps_env(pool: Any) -> str:
    """The pool's weekly step function for the script: `minute-of-week=count`, space separated, from minute 0."""
    return " ".join(f"{t}={v}" for t, v in steps(pool))


def _job_name(aks_name: str, change: Change) -> str:
    days = "".join(d[0:2].lower() for d in change.day_names.split(","))
    return f"warm-{aks_name}-{change.at.replace(':', '')}-{days}"[:52].rstrip("-")  # CronJob names: ≤ 52


def cronjob(pool: str, aks_name: str, max_count: int, time_zone: str, change: Change,
            warm_steps: str) -> dict[str, Any]:
    """One change of one pool's minimum, at its time in the pool's time zone (its script sets the step function's
    value for the time it runs: `warm_steps`)."""
    env = [{"name": "NODEPOOL", "value": aks_name}, {"name": "MIN_COUNT", "value": str(change.min_count)},
           {"name": "MAX_COUNT", "value": str(max_count)}, {"name": "WARM_TZ", "value": time_zone},
           {"name": "WARM_STEPS", "value": warm_steps}, {"name": "TRY_FOR_S", "value": str(TRY_FOR_S)},
           {"name": "PAUSE_S", "value": str(PAUSE_S)}, {"name": "HOME", "value": "/tmp"},
           {"name": "AZURE_CONFIG_DIR", "value": "/tmp/.azure"}]
    container = {"name": "az", "image": AZ_IMAGE, "command": ["bash", "-ceu", SCRIPT], "env": env,
                 "envFrom": [{"configMapRef": {"name": TARGET}}],
                 "resources": {"requests": {"cpu": "50m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                 "securityContext": {**container_security_context(), "runAsUser": 65532, "runAsGroup": 65532,
                                     "readOnlyRootFilesystem": True},
                 "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}
    pod = {"metadata": {"labels": {WI_USE: "true", "app.kubernetes.io/name": "warm-capacity"}},
           "spec": {"serviceAccountName": ACCOUNT, "automountServiceAccountToken": False, "restartPolicy": "Never",
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container], "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}]}}
    return {"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": _job_name(aks_name, change), "namespace": NAMESPACE,
                         "labels": {"app.kubernetes.io/name": "warm-capacity", "gpuhub/pool": pool},
                         "annotations": {"gpuhub/warm": f"{change.day_names} {change.at} {time_zone}: min-count "
                                                        f"{change.min_count}"}},
            "spec": {"schedule": change.cron, "timeZone": time_zone, "concurrencyPolicy": "Forbid",
                     "startingDeadlineSeconds": STARTING_DEADLINE_S, "successfulJobsHistoryLimit": 1,
                     "failedJobsHistoryLimit": 3,
                     "jobTemplate": {"spec": {"backoffLimit": 2, "activeDeadlineSeconds": ACTIVE_DEADLINE_S,
                                             "template": pod}}}}


def render_warm_capacity(cfg: ProfilesConfig) -> list[dict[str, Any]]:
    """Namespace, ServiceAccount (workload identity; no RBAC), the target ConfigMap and one CronJob per change of
    every pool with a `warm` schedule; [] when no pool has one."""
    jobs = [cronjob(name, aks_pool_name(name, pool), pool.max_nodes, pool.time_zone, change, steps_env(pool))
            for name, pool in cfg.pools.items() if pool.warm for change in changes(pool)]
    if not jobs:
        return []
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {
                "pod-security.kubernetes.io/enforce": "restricted"}}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "automountServiceAccountToken": False,
             "metadata": {"name": ACCOUNT, "namespace": NAMESPACE,
                          "annotations": {WI_CLIENT_ID: "<client-id of the managed identity>"}}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": TARGET, "namespace": NAMESPACE},
             "data": {"RESOURCE_GROUP": "<resource-group>", "CLUSTER": "<cluster>"}},
            *jobs]


def warm_commands(cfg: ProfilesConfig) -> list[tuple[str, str, list[str]]]:
    """(pool, when, the az command's words) for every change: what the CronJobs run, for running it elsewhere."""
    out = []
    for name, pool in cfg.pools.items():
        for c in changes(pool) if pool.warm else []:
            out.append((name, f"{c.day_names} {c.at} {pool.time_zone} (cron {c.cron})",
                        ["az", "aks", "nodepool", "update", "--resource-group", "$RESOURCE_GROUP", "--cluster-name",
                         "$CLUSTER", "--name", aks_pool_name(name, pool), "--update-cluster-autoscaler",
                         "--min-count", str(c.min_count), "--max-count", str(pool.max_nodes)]))
    return out
