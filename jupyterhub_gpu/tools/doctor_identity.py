"""`gpuhub doctor`'s workload identity rows (pure), only when a team of the file declares an `identity`.

Without the Azure workload identity webhook the team's pods start but get no Azure token (DefaultAzureCredential
fails at the first call, long after the spawn), so the webhook is checked first: its MutatingWebhookConfiguration,
else its controller's pods in kube-system (AKS runs both once `--enable-workload-identity` is on). Then each team's
ServiceAccount in every namespace its pods run in (builders/identity.py: the hub's for servers, the team's for
jobs): present (else pods of that team cannot even be created) and annotated with the file's client id (else the
pods would act as another identity, or none). On the dev cluster (every node simulated) there is no Azure: the
webhook's row says so (simulated) instead of failing; the accounts are checked as anywhere.
"""
from __future__ import annotations

from typing import Any

from jupyterhub_gpu.builders.identity import (
    WEBHOOK_CONFIGURATION,
    WEBHOOK_DEPLOYMENT,
    WEBHOOK_NAMESPACE,
    WI_CLIENT_ID,
    WI_TENANT_ID,
    service_accounts,
)
from jupyterhub_gpu.contract import TEAM_LABEL
from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.tools.doctor_checks import APPLY_KUEUE, FAIL, OK, SIMULATED, Check

SECTION = "identity"
ENABLE = ("az aks update --resource-group RG --name CLUSTER --enable-oidc-issuer --enable-workload-identity "
          "(then: bash deploy/workload-identity.sh for the federated credentials)")


def wanted(cfg: ProfilesConfig, hub_namespace: str) -> list[tuple[str, str]]:
    """(namespace, name) of every team ServiceAccount the file asks for: what the live shell reads."""
    return [(sa["metadata"]["namespace"], sa["metadata"]["name"]) for sa in service_accounts(cfg, hub_namespace)]


def check_webhook(webhook: dict[str, Any] | None, pods: list[dict[str, Any]] | None, simulated: bool = False) -> Check:
    """`webhook`: the MutatingWebhookConfiguration (None: absent); `pods`: the controller's pods in kube-system;
    `simulated`: every node is the dev cluster's (no Azure there: said so, as doctor says of its GPUs)."""
    if webhook is not None:
        return Check(SECTION, "webhook", OK, f"MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION}")
    running = [p for p in pods or [] if (p.get("status") or {}).get("phase") == "Running"]
    if running:
        return Check(SECTION, "webhook", OK, f"{len(running)} {WEBHOOK_DEPLOYMENT} pod(s) running in "
                                             f"{WEBHOOK_NAMESPACE}")
    if simulated:
        return Check(SECTION, "webhook", SIMULATED, "simulated nodes, no Azure: no workload identity webhook; the "
                     "pods carry its label and account, and no Azure token comes")
    return Check(SECTION, "webhook", FAIL, "the Azure workload identity webhook is not installed: pods of teams with "
                 f"an identity get no Azure token (no {WEBHOOK_CONFIGURATION}, no running {WEBHOOK_DEPLOYMENT} pod)",
                 ENABLE)


def check_account(want: dict[str, Any], have: dict[str, Any] | None, file: str) -> Check:
    """One team ServiceAccount as the file renders it (`want`) against the live one."""
    meta = want["metadata"]
    name, team = f"ServiceAccount {meta['namespace']}/{meta['name']}", meta["labels"].get(TEAM_LABEL, "?")
    fix = APPLY_KUEUE.format(file=file)
    if have is None:
        return Check(SECTION, name, FAIL, f"missing: pods of team {team} cannot be created", fix)
    live = (have.get("metadata") or {}).get("annotations") or {}
    diffs = [f"{key} is {live.get(key)!r}, the file says {value!r}" for key, value in meta["annotations"].items()
             if (live.get(key) or "").lower() != value.lower()]
    if WI_TENANT_ID not in meta["annotations"] and live.get(WI_TENANT_ID):
        diffs.append(f"{WI_TENANT_ID} is {live[WI_TENANT_ID]!r}, the file names no tenant")
    if diffs:
        return Check(SECTION, name, FAIL, "; ".join(diffs), fix)
    return Check(SECTION, name, OK, f"team {team}, {WI_CLIENT_ID} {meta['annotations'][WI_CLIENT_ID]}")


def check_identity(cfg: ProfilesConfig, webhook: dict[str, Any] | None, webhook_pods: list[dict[str, Any]] | None,
                   accounts: dict[tuple[str, str], dict[str, Any] | None] | None, hub_namespace: str,
                   file: str = "FILE", error: str = "", simulated: bool = False) -> list[Check]:
    """No rows when no team has an identity; else the webhook's row and one per team ServiceAccount.
    `accounts`: (namespace, name) → the live ServiceAccount (None: absent); None: could not be read."""
    want = service_accounts(cfg, hub_namespace)
    if not want:
        return []
    if accounts is None:
        return [Check(SECTION, "workload identity", FAIL, f"cannot read the webhook or the ServiceAccounts: {error}",
                      "run doctor with a kubeconfig that may read mutatingwebhookconfigurations, pods in "
                      f"{WEBHOOK_NAMESPACE} and serviceaccounts")]
    rows = [check_webhook(webhook, webhook_pods, simulated)]
    for sa in want:
        key = (sa["metadata"]["namespace"], sa["metadata"]["name"])
        rows.append(check_account(sa, accounts.get(key), file))
    return rows
