"""Read-only datasets (pure): shared data on Azure Blob or Azure Files, mounted at /datasets/NAME in servers and
`%gpu_submit` jobs.

Who gets a dataset is one rule, `datasets_for`: the user's team (`ProfilesConfig.team_for`, the rule quotas and
identities use) is one of the dataset's `teams`, or the profile is one of its `profiles`. The spawner and the
Job builder both ask it, so a job sees exactly the datasets its server would. Every name here ends up in an
object name, a volume handle or a mount path, so each is checked against Azure's and Kubernetes' own rules
and bounded before anything is rendered.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from jupyterhub_gpu.model.identity import Guid

#: A pod's volume `dataset-NAME` is a DNS label (at most 63 characters): 48 leaves room to spare.
NAME_MAX = 48
NAME_RULE = (f"lowercase letters, digits and '-', starting and ending with a letter or digit, at most {NAME_MAX} "
             "characters (it becomes /datasets/NAME and the names of its claims)")
DATASET_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: Who may get a dataset: this many teams or profiles at most (a file names far fewer).
MAX_GRANTS = 64


def _checked(pattern: str, rule: str, low: int, high: int):
    compiled = re.compile(pattern, re.ASCII)

    def check(value: Any) -> str:
        if not isinstance(value, str) or not low <= len(value) <= high or not compiled.fullmatch(value):
            raise ValueError(f"{str(value)[:80]!r} is not valid: {rule}")
        return value

    return BeforeValidator(check)


StorageAccount = Annotated[str, _checked(r"[a-z0-9]+", "a storage account name is 3 to 24 lowercase letters and "
                                         "digits", 3, 24)]
#: Blob containers and Azure Files shares follow the same rule.
ContainerName = Annotated[str, _checked(r"[a-z0-9]+(-[a-z0-9]+)*", "3 to 63 lowercase letters, digits and single "
                                        "'-' between them", 3, 63)]
ResourceGroup = Annotated[str, _checked(r"[-\w.()]*[-\w()]", "a resource group is 1 to 90 letters, digits, '-', "
                                        "'_', '.', '(' and ')', not ending in '.'", 1, 90)]


def _names(value: Any) -> list[str]:
    """A bounded list of short names; whether each is a team or profile of the file is checked with the file."""
    if not isinstance(value, list) or len(value) > MAX_GRANTS:
        raise ValueError(f"must be a list of at most {MAX_GRANTS} names; got {str(value)[:80]}")
    bad = [v for v in value if not isinstance(v, str) or not 1 <= len(v) <= 63]
    if bad:
        raise ValueError(f"{str(bad[0])[:80]!r} is not a name (1 to 63 characters)")
    return value


Names = Annotated[list[str], BeforeValidator(_names)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BlobSource(_Strict):
    """A container of an Azure Blob storage account, through the Blob CSI driver (`blob.csi.azure.com`)."""

    storage_account: StorageAccount = Field(description="The storage account (3-24 lowercase letters and digits).")
    container: ContainerName = Field(description="The blob container holding the dataset.")
    resource_group: ResourceGroup | None = Field(None, description=(
        "The account's resource group; default: the cluster's node resource group, as the driver assumes."))
    protocol: Literal["fuse2", "nfs"] = Field("fuse2", description=(
        "`fuse2` (blobfuse2: any account) or `nfs` (NFS 3.0: an account with hierarchical namespace and NFS on, "
        "reached from the cluster's virtual network; no credentials at all)."))
    identity_client_id: Guid | None = Field(None, description=(
        "blobfuse2 only: client id of a user-assigned managed identity assigned to the node pools where servers "
        "and jobs run, with `Storage Blob Data "
        "Reader` on the container; blobfuse2 reads as that identity (no account key, no secret). Default: the "
        "driver reads the account key with the cluster's kubelet identity."))

    @model_validator(mode="after")
    def _nfs_has_no_identity(self):
        if self.protocol == "nfs" and self.identity_client_id:
            raise ValueError("identity_client_id: an NFS mount uses no credentials (the account's network rules "
                             "decide who reaches it); remove it, or use protocol: fuse2")
        return self


class AzureFileSource(_Strict):
    """An Azure Files share, through the Azure Files CSI driver (`file.csi.azure.com`)."""

    storage_account: StorageAccount = Field(description="The storage account of the share.")
    share: ContainerName = Field(description="The file share holding the dataset.")
    resource_group: ResourceGroup | None = Field(None, description=(
        "The account's resource group; default: the cluster's node resource group."))
    protocol: Literal["smb", "nfs"] = Field("smb", description=(
        "`smb` (the driver reads the account key with the cluster's identity) or `nfs` (a premium NFS share, "
        "reached from the cluster's virtual network)."))


class Dataset(_Strict):
    """Data every server and job of some teams or profiles reads at /datasets/NAME, never writes."""

    blob: BlobSource | None = Field(None, description="An Azure Blob container (give `blob` or `azurefile`).")
    azurefile: AzureFileSource | None = Field(None, description="An Azure Files share (give `blob` or `azurefile`).")
    teams: Names = Field([], description=(
        "Teams whose members get it (a user's team as for quotas: the first team named like one of their groups, "
        "else the default team)."))
    profiles: Names = Field([], description="Profiles whose servers and jobs get it, whoever starts them.")
    description: Annotated[str, _checked(r"[^\x00-\x1f\x7f]*", "at most 200 characters on one line", 0, 200)] = \
        Field("", description="What it holds, for admins reading the file.")

    @model_validator(mode="after")
    def _one_source_and_someone(self):
        if (self.blob is None) == (self.azurefile is None):
            raise ValueError("give exactly one source: blob: {storage_account, container} or azurefile: "
                             "{storage_account, share}")
        if not self.teams and not self.profiles:
            raise ValueError("names no teams and no profiles, so nobody would get it; add teams: [...] or "
                             "profiles: [...]")
        return self

    @property
    def source(self) -> BlobSource | AzureFileSource:
        return self.blob or self.azurefile


@dataclass(frozen=True)
class DatasetProblem:
    at: str
    message: str


def name_problem(name: Any) -> str | None:
    """Why `name` cannot be a dataset's name (None: it can)."""
    if not isinstance(name, str) or len(name) > NAME_MAX or not DATASET_NAME.fullmatch(name):
        return f"{str(name)[:80]!r} is not a valid dataset name: {NAME_RULE}"
    return None


def _name(value: Any) -> str:
    if why := name_problem(value):
        raise ValueError(why)
    return value


DatasetName = Annotated[str, BeforeValidator(_name)]


def dataset_problems(name: str, dataset: Dataset, teams: set[str], profiles: set[str]) -> list[DatasetProblem]:
    """Teams and profiles the file does not have (a typo would silently give the data to nobody)."""
    at = f"datasets.{str(name)[:80]}"
    out = [DatasetProblem(f"{at}.teams[{i}]", f"{t!r} is not a team of this file; teams: "
                                              f"{', '.join(sorted(teams)) or 'none'}")
           for i, t in enumerate(dataset.teams) if t not in teams]
    out += [DatasetProblem(f"{at}.profiles[{i}]", f"{p!r} is not a profile of this file; profiles: "
                                                  f"{', '.join(sorted(profiles))}")
            for i, p in enumerate(dataset.profiles) if p not in profiles]
    return out


def datasets_for(cfg: Any, profile: str, groups: list[str]) -> list[str]:
    """The datasets a user in `groups` gets on `profile` (a slug), in file order: THE rule for servers and jobs.
    `cfg`: a `profiles.ProfilesConfig` (not imported: profiles.py imports this module)."""
    found = cfg.team_for(list(groups))
    team = found[0] if found else None
    return [name for name, d in cfg.datasets.items() if (team is not None and team in d.teams) or profile in d.profiles]


def dataset_namespaces(cfg: Any, name: str, hub_namespace: str) -> list[str]:
    """Where a dataset needs a claim: the hub's (servers) and the namespace of every team whose jobs may get it
    (a pod mounts claims of its own namespace only). A profile's dataset: every team's, since any team's member
    may use the profile."""
    d = cfg.datasets[name]
    teams = cfg.teams.values() if d.profiles else [cfg.teams[t] for t in d.teams if t in cfg.teams]
    return sorted({hub_namespace, *(t.namespace for t in teams)})
