"""A team's Azure workload identity as Kubernetes objects and pod fields (pure).

A team with `identity` (model/identity.py) has one ServiceAccount, of the same name, in the hub's namespace (where
its servers run) and in its own (its Jobs and JobSets), annotated with the managed identity's client id. Its
servers' and jobs' pods run under that account and carry the pod label the workload identity webhook looks for;
the webhook then adds AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE, AZURE_AUTHORITY_HOST and a
projected token of audience `api://AzureADTokenExchange` (its own volume: the pods still mount no Kubernetes API
token). A user's team is `ProfilesConfig.team_for(groups)`, the one rule servers, jobs and quotas share, so a
user's pods never get another team's account; pods of a team without identity are exactly as before.

Entra trusts a token only for the subjects it was told: `federated_credentials()` lists one per team and
namespace, which `builders.deploy` writes as `az identity federated-credential create` commands.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jupyterhub_gpu.contract import GPU_CHECK_CONTAINER, MANAGED_BY, TEAM_LABEL
from jupyterhub_gpu.model.identity import TeamIdentity, account_name
from jupyterhub_gpu.model.profiles import ProfilesConfig

WI_CLIENT_ID = "azure.workload.identity/client-id"
WI_TENANT_ID = "azure.workload.identity/tenant-id"
WI_USE = "azure.workload.identity/use"
#: Containers the webhook leaves alone: the GPU check (no user file, no token, only what it reads: builders/pods.py).
WI_SKIP_CONTAINERS = "azure.workload.identity/skip-containers"
AUDIENCE = "api://AzureADTokenExchange"
#: What AKS runs when workload identity is on (`az aks update --enable-oidc-issuer --enable-workload-identity`).
WEBHOOK_CONFIGURATION = "azure-wi-webhook-mutating-webhook-configuration"
WEBHOOK_NAMESPACE = "kube-system"
WEBHOOK_DEPLOYMENT = "azure-wi-webhook-controller-manager"


@dataclass(frozen=True)
class PodIdentity:
    """What a team's identity puts into one of its pods."""

    team: str
    service_account: str
    identity: TeamIdentity

    @property
    def labels(self) -> dict[str, str]:
        return {WI_USE: "true"}


def pod_identity(cfg: ProfilesConfig, groups: list[str]) -> PodIdentity | None:
    """The identity of the team these groups make the user a member of (`identity_team`: never by falling back to
    the default team, unless it opts in), or None: no such team, or one without identity."""
    found = cfg.identity_team(list(groups))
    if found is None:
        return None
    name, team = found
    return PodIdentity(name, account_name(name, team.identity), team.identity)


def server_annotations() -> dict[str, str]:
    """A server pod's: the webhook skips the GPU-check init container, which gets only the env it reads."""
    return {WI_SKIP_CONTAINERS: GPU_CHECK_CONTAINER}


def with_identity(pod_spec: dict[str, Any], ident: PodIdentity) -> dict[str, Any]:
    """A Job pod's spec under the team's account, still without a Kubernetes API token (the webhook projects the
    Azure token on its own volume)."""
    return {**pod_spec, "serviceAccountName": ident.service_account, "automountServiceAccountToken": False}


def identity_namespaces(cfg: ProfilesConfig, team_name: str, hub_namespace: str) -> list[tuple[str, str]]:
    """(namespace, who runs there): the hub's for servers, the team's for jobs (one when they are the same)."""
    ns = cfg.teams[team_name].namespace
    return [(hub_namespace, "servers"), (ns, "jobs")] if ns != hub_namespace else [(ns, "servers and jobs")]


def service_accounts(cfg: ProfilesConfig, hub_namespace: str) -> list[dict[str, Any]]:
    """Each team's ServiceAccount in each namespace its pods run in: the client id (and tenant) annotated, no API
    token mounted by default, labelled with the team."""
    out = []
    for name, team in cfg.teams.items():
        if team.identity is None:
            continue
        notes = {WI_CLIENT_ID: team.identity.client_id}
        if team.identity.tenant_id:
            notes[WI_TENANT_ID] = team.identity.tenant_id
        for ns, _who in identity_namespaces(cfg, name, hub_namespace):
            out.append({"apiVersion": "v1", "kind": "ServiceAccount", "automountServiceAccountToken": False,
                        "metadata": {"name": account_name(name, team.identity), "namespace": ns,
                                     "labels": {**MANAGED_BY, TEAM_LABEL: name}, "annotations": dict(notes)}})
    return out


@dataclass(frozen=True)
class FederatedCredential:
    """One subject Entra must trust for a team's managed identity."""

    team: str
    name: str
    client_id: str
    namespace: str
    service_account: str
    who: str

    @property
    def subject(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def federated_credentials(cfg: ProfilesConfig, hub_namespace: str) -> list[FederatedCredential]:
    """Per team with identity and namespace its pods run in: `gpuhub-<team>-servers` / `-jobs` (at most 75
    characters of Entra's 120)."""
    out = []
    for name, team in cfg.teams.items():
        if team.identity is None:
            continue
        places = identity_namespaces(cfg, name, hub_namespace)
        for ns, who in places:
            suffix = f"-{who}" if len(places) > 1 else ""
            out.append(FederatedCredential(name, f"gpuhub-{name}{suffix}", team.identity.client_id, ns,
                                           account_name(name, team.identity), who))
    return out
