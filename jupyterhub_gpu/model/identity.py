"""A team's Azure workload identity (pure): which Entra managed identity its servers and jobs act as.

A team with `identity` gets one ServiceAccount, named alike in the hub's namespace (its servers) and in its own
(its jobs), annotated with the identity's client id; the workload identity webhook gives pods of that account
the identity's federated token. The rules here keep one team's identity away from everyone else: the name must
not be an account the hub, gpu-jobs, z2jh or every other pod already uses (`default`), no two teams may share
an account name (all servers run in one namespace) or a managed identity.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from jupyterhub_gpu.contract import JOBS_SERVICE

GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
#: A ServiceAccount's name: a DNS-1123 subdomain (Kubernetes' rule for object names), at most 253 characters.
ACCOUNT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
ACCOUNT_RULE = "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253"


def guid(value: Any) -> str:
    """A GUID as Entra writes client and tenant ids (`az identity show --query clientId`)."""
    if not isinstance(value, str) or not GUID.fullmatch(value):
        raise ValueError(f"{str(value)[:80]!r} is not a GUID; write it as az identity show prints it, e.g. "
                         "11111111-2222-3333-4444-555555555555")
    return value.lower()  # as Azure writes them: the rendered lookups and doctor compare with its answers


def account(value: Any) -> str:
    """A ServiceAccount name Kubernetes accepts."""
    if not isinstance(value, str) or len(value) > 253 or not ACCOUNT_NAME.fullmatch(value):
        raise ValueError(f"{str(value)[:80]!r} is not a valid ServiceAccount name: {ACCOUNT_RULE}")
    return value


Guid = Annotated[str, BeforeValidator(guid)]
AccountName = Annotated[str, BeforeValidator(account)]

#: Accounts that are someone else's: every pod's (`default`), the hub's and z2jh's own (`hub`, `user-scheduler`,
#: `autohttps`, `hook-image-awaiter`), gpu-jobs' and the warm-capacity CronJobs'. An identity on one of them would
#: reach pods that are not the team's.
RESERVED_ACCOUNTS = frozenset({"default", "hub", "user-scheduler", "autohttps", "hook-image-awaiter", JOBS_SERVICE,
                               "warm-capacity"})


class TeamIdentity(BaseModel):
    """The Entra managed identity (workload identity) of a team's servers and jobs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    client_id: Guid = Field(description=(
        "Client id of the team's user-assigned managed identity (`az identity show --query clientId`), a GUID; "
        "written on the team's ServiceAccount as `azure.workload.identity/client-id`."))
    tenant_id: Guid | None = Field(None, description=(
        "Entra tenant of the identity, a GUID (`azure.workload.identity/tenant-id`); default: the cluster's "
        "tenant, as the webhook is configured."))
    service_account: AccountName | None = Field(None, description=(
        "Name of the team's ServiceAccount, in the hub's namespace (servers) and the team's (jobs); default "
        "`gpuhub-<team>-identity`. Never `default`, `hub`, `gpu-jobs` or another account of the install, and "
        "never another team's."))


def account_name(team_name: str, identity: TeamIdentity) -> str:
    """The team's ServiceAccount name: the admin's, else `gpuhub-<team>-identity`."""
    return identity.service_account or f"gpuhub-{team_name}-identity"


@dataclass(frozen=True)
class IdentityProblem:
    at: str
    message: str


def file_problems(teams: dict[str, Any]) -> list[IdentityProblem]:
    """Reserved account names, and an account name or a managed identity two teams would share. `teams`: name →
    `profiles.Team` (not imported: profiles.py imports this module)."""
    out: list[IdentityProblem] = []
    names: dict[str, str] = {}
    clients: dict[str, str] = {}
    for team_name, team in teams.items():
        ident = team.identity
        if getattr(team, "identity_for_users_in_no_team", False) and not (team.default and ident is not None):
            out.append(IdentityProblem(f"teams.{team_name}.identity_for_users_in_no_team", "only a default team "
                                       "with an identity may hand it to users of no team (`default: true`, "
                                       "`identity`)"))
        if ident is None:
            continue
        at = f"teams.{team_name}.identity"
        name = account_name(team_name, ident)
        if name in RESERVED_ACCOUNTS:
            out.append(IdentityProblem(f"{at}.service_account", f"{name!r} is an account other pods use (the hub's, "
                                       "gpu-jobs', z2jh's or every pod's): the identity would reach them; name the "
                                       f"team's own, e.g. gpuhub-{team_name}-identity"))
        elif len(name) > 253 or not ACCOUNT_NAME.fullmatch(name):  # a default from a bad team name
            out.append(IdentityProblem(f"{at}.service_account", f"{name!r} is not a valid ServiceAccount name: "
                                       f"{ACCOUNT_RULE}"))
        elif name in names:
            out.append(IdentityProblem(f"{at}.service_account", f"{name!r} is team {names[name]!r}'s account too: "
                                       "each team needs its own (servers of all teams run in one namespace)"))
        names.setdefault(name, team_name)
        client = ident.client_id.lower()
        if client in clients:
            out.append(IdentityProblem(f"{at}.client_id", f"{ident.client_id} is team {clients[client]!r}'s identity "
                                       "too: one team's servers and jobs would act as the other's; give each team "
                                       "its own managed identity"))
        clients.setdefault(client, team_name)
    return out
