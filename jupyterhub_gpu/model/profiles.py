"""The ONE profile model: pools, profiles and teams from the admin's profiles file.

Pure data and pure functions. The spawner, the Kueue renderer, the Job builder, the culler and
both UIs import these classes; nothing else parses the file. `load_profiles()` reports every
problem at once (see `validation.py`), each with its path, the bad value and what would be valid.
"""
from __future__ import annotations

import re
from decimal import Decimal
from functools import cached_property
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from jupyterhub_gpu.contract import GPU_CHECK_ENV
from jupyterhub_gpu.model.datasets import Dataset, DatasetName
from jupyterhub_gpu.model.field_types import (  # noqa: F401 (DNS_LABEL, duration_seconds: imported from here too)
    CPU,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    Bytes,
    Seconds,
    Slug,
    duration_seconds,
    mig_layout_value,
)
from jupyterhub_gpu.model.gpus import GPU_MODELS, MIG_PROFILE_RE, GPUModel, mig_resource_name
from jupyterhub_gpu.model.identity import TeamIdentity
from jupyterhub_gpu.model.labels import LabelKey, LabelValue
from jupyterhub_gpu.model.vm_sizes import allocatable_of
from jupyterhub_gpu.model.warm_schedule import WarmWindow, ZoneName

#: The taint AKS puts on every spot node pool.
SPOT_TAINT = {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}

#: Used when a profiles file names no `priorities`.
DEFAULT_PRIORITIES = {"low": 100, "normal": 1000, "high": 10000}


class _Strict(BaseModel):
    """Unknown keys are errors: a typo must not pass silently."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Taint(_Strict):
    key: LabelKey
    value: LabelValue = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"

    def toleration(self) -> dict[str, str]:
        """The toleration that lets a pod onto nodes with exactly this taint."""
        tol = {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}
        if not self.value:
            tol = {"key": self.key, "operator": "Exists", "effect": self.effect}
        return tol


class PoolGPU(_Strict):
    model: str
    count_per_node: int = Field(1, ge=1, le=16)

    @property
    def spec(self) -> GPUModel:
        return GPU_MODELS[self.model]


class NoSharing(_Strict):
    strategy: Literal["none"] = "none"


class TimeSlicing(_Strict):
    strategy: Literal["time-slicing"]
    replicas: int = Field(ge=2, le=64)
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False


#: The most MPS clients (replicas) one GPU takes: the device plugin's MPS control daemon refuses more than 48 on
#: GPUs of compute capability 7.5 or newer and more than 16 on older ones (model/sharing_rules.py checks per model).
MPS_MAX_REPLICAS = 48


class MPSSharing(_Strict):
    """NVIDIA MPS: the pods on a GPU share one CUDA context, each with GPU memory / replicas of its own.

    The device plugin's `sharing.mps`; the node's MPS control daemon splits memory and threads evenly."""

    strategy: Literal["mps"]
    replicas: int
    rename_by_default: bool = False

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, n: int) -> int:
        if n < 2:
            raise ValueError(f"{n}: MPS needs at least 2 replicas per GPU (the device plugin refuses fewer); "
                             "for whole GPUs write strategy: none")
        if n > MPS_MAX_REPLICAS:
            raise ValueError(f"{n}: an MPS control daemon serves at most {MPS_MAX_REPLICAS} clients per GPU; "
                             f"valid: 2..{MPS_MAX_REPLICAS}")
        return n


class MIGSharing(_Strict):
    strategy: Literal["mig"]
    mig_strategy: Literal["mixed", "single"] = "mixed"
    layout: Annotated[Union[str, dict[str, int]], BeforeValidator(mig_layout_value)]


Sharing = Annotated[Union[NoSharing, TimeSlicing, MPSSharing, MIGSharing], Field(discriminator="strategy")]


class NodeShape(_Strict):
    cpu: CPU
    memory: Bytes
    max_pods: int = Field(110, ge=1)


class Pool(_Strict):
    """A node pool as it exists in the cluster (an AKS agent pool)."""

    node_selector: dict[LabelKey, LabelValue] = Field(min_length=1)
    taints: list[Taint] = []
    gpu: PoolGPU | None = None
    sharing: Sharing = NoSharing()
    instance_type: str | None = None
    node: NodeShape | None = None
    spot: bool = False
    gpu_stack: Literal["operator", "aks-managed"] = Field("operator", description=(
        "Who installs the GPU driver, device plugin and DCGM exporter: `operator` (the NVIDIA GPU operator; AKS "
        "installs no driver) or `aks-managed` (AKS's managed GPU node pool, preview: whole GPUs only, no "
        "sharing or MIG, a fixed size; docs/admin-guide.md)."))
    cost_per_node_hour: float = Field(0.0, ge=0)
    min_nodes: int = Field(0, ge=0)
    max_nodes: int | None = Field(None, ge=0)
    display_name: str | None = None
    queue_servers: bool | None = Field(None, description=(
        "Notebook servers on this pool wait in their team's Kueue queue, counted in its quota (default: yes "
        "for GPU pools); a profile's own `queue_servers` wins."))
    allocation: Literal["device-plugin", "dra"] = Field("device-plugin", description=(
        "How pods get this pool's GPUs: `device-plugin` (extended resources such as nvidia.com/gpu) or `dra` "
        "(Dynamic Resource Allocation: a ResourceClaim per pod, allocated by the scheduler from the NVIDIA DRA "
        "driver's ResourceSlices; whole GPUs and static MIG slices only; docs/admin-guide.md)."))
    device_class: str = Field("gpu.nvidia.com", pattern=DNS_SUBDOMAIN, max_length=253, description=(
        "`allocation: dra`: the DeviceClass of whole GPUs (default: the NVIDIA driver's `gpu.nvidia.com`)."))
    time_zone: ZoneName = Field("UTC", description=(
        "IANA time zone of the pool's `warm` schedule (e.g. `Europe/Berlin`; daylight saving followed)."))
    warm: list[WarmWindow] = Field([], max_length=28, description=(  # 28: warm_schedule.MAX_WINDOWS (a test checks)
        "Nodes kept ready on a schedule, e.g. `[{days: Mon-Fri, from: \"08:30\", to: \"18:00\", nodes: 1}]`: the "
        "autoscaler's minimum is raised in the window and back to `min_nodes` after it, so the first servers of "
        "the day do not wait for a node (AKS: `gpuhub render deploy` writes the CronJobs; docs/admin-guide.md)."))

    @property
    def is_gpu(self) -> bool:
        return self.gpu is not None

    @property
    def is_dra(self) -> bool:
        return self.is_gpu and self.allocation == "dra"

    @property
    def effective_taints(self) -> list[Taint]:
        """The admin's taints plus the spot taint AKS adds to spot pools."""
        taints = list(self.taints)
        if self.spot and not any(t.key == SPOT_TAINT["key"] for t in taints):
            taints.append(Taint(**SPOT_TAINT))
        return taints

    def tolerations(self) -> list[dict[str, str]]:
        return [t.toleration() for t in self.effective_taints]

    @property
    def mig_layout(self) -> dict[str, int]:
        """Slices per GPU, from `all-<slice>`, `all-balanced` or an explicit mapping."""
        if not isinstance(self.sharing, MIGSharing):
            return {}
        layout = self.sharing.layout
        if isinstance(layout, dict):
            return dict(layout)
        model = self.gpu.spec
        if layout == "all-balanced":
            return model.balanced_layout()
        slice_name = layout.removeprefix("all-")
        return {slice_name: model.mig.get(slice_name, 0)}

    def mig_config_name(self) -> str:
        """The `nvidia.com/mig.config` label value (mig-parted config name)."""
        layout = self.sharing.layout
        if isinstance(layout, str):
            return layout
        return "custom-" + "-".join(f"{n}x{s}" for s, n in sorted(layout.items()))

    def resource_name(self, mig_slice: str | None = None) -> str | None:
        """The extended resource a pod on this pool asks for (None on CPU pools)."""
        if not self.is_gpu:
            return None
        s = self.sharing
        if isinstance(s, (TimeSlicing, MPSSharing)) and s.rename_by_default:
            return "nvidia.com/gpu.shared"
        if isinstance(s, MIGSharing) and s.mig_strategy == "mixed":
            return mig_resource_name(mig_slice or next(iter(self.mig_layout)))
        return "nvidia.com/gpu"

    def slots_per_node(self) -> dict[str, int]:
        """Extended resources one node advertises in allocatable, as the device plugin would."""
        if not self.is_gpu:
            return {}
        gpus = self.gpu.count_per_node
        s = self.sharing
        if isinstance(s, (TimeSlicing, MPSSharing)):
            return {self.resource_name(): gpus * s.replicas}
        if isinstance(s, MIGSharing):
            if s.mig_strategy == "single":
                return {"nvidia.com/gpu": gpus * sum(self.mig_layout.values())}
            return {mig_resource_name(sl): gpus * n for sl, n in self.mig_layout.items()}
        return {"nvidia.com/gpu": gpus}

    def shape(self) -> NodeShape | None:
        """What one node offers pods: explicit `node`, else the known VM size's allocatable (model/vm_sizes.py),
        else None: an unknown shape is unknown, never assumed small (the live checks read the nodes)."""
        if self.node:
            return self.node
        known = allocatable_of(self.instance_type)
        return NodeShape(cpu=known[0], memory=known[1]) if known else None

    @property
    def label(self) -> str:
        if self.display_name:
            return self.display_name
        if not self.gpu:
            return "CPU"
        return self.gpu.model


#: What an option's `environment` may name, and may not: gpuhub's own variables and what the GPU check reads
#: (contract.GPU_CHECK_ENV), and the NVIDIA container runtime's switches (NVIDIA_VISIBLE_DEVICES would hand a
#: container GPUs no device plugin or claim gave it; NVIDIA_DRIVER_CAPABILITIES can hide nvidia-smi from the check).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
RESERVED_ENV_PREFIXES = ("GPUHUB_", "NVIDIA_")


class SpawnerOverride(_Strict):
    """What a choice may set: KubeSpawner traits other than GPU, pool, resources and tolerations (the profile's)."""

    image: str | None = Field(None, min_length=1, max_length=512, description="The server's image (and the "
                              "image of the `%gpu_submit` jobs started from it).")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        None, description="KubeSpawner `image_pull_policy`.")
    environment: dict[str, str] | None = Field(None, description=(
        "Environment variables, added to the admin's and the profile's; not `GPUHUB_*`, `NVIDIA_*` nor "
        "`CUDA_VISIBLE_DEVICES` (what the server was given, and what its GPU check reads)."))
    default_url: str | None = Field(None, description="KubeSpawner `default_url`, e.g. `/lab`.")

    @field_validator("environment")
    @classmethod
    def _not_gpuhubs_words(cls, env: dict[str, str] | None) -> dict[str, str] | None:
        """A choice must not tell the GPU check what the server got, nor the container runtime which GPUs it sees."""
        for name in env or {}:
            if not ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name (letters, digits, _; at most 128)")
            if name.startswith(RESERVED_ENV_PREFIXES) or name in GPU_CHECK_ENV:
                raise ValueError(f"{name} is gpuhub's or the GPU runtime's to set (what the server was given), "
                                 "not a choice's")
        return env

    def traits(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class OptionChoice(_Strict):
    display_name: str = Field(min_length=1, description="What the picker shows.")
    default: bool = Field(False, description="Preselected (default: the first choice); it must have no `groups`.")
    groups: list[str] | None = Field(None, description="JupyterHub groups that may pick it (absent: everyone "
                                                       "allowed the profile).")
    kubespawner_override: SpawnerOverride = Field(SpawnerOverride(), description="What picking it sets.")


class UnlistedChoice(_Strict):
    """A value the user types (e.g. a custom image), for members of named groups only."""

    groups: list[str] = Field(min_length=1, description="JupyterHub groups that may type a value (required: "
                                                       "never everyone).")
    validation_regex: str = Field(min_length=1, description="Python regular expression the whole typed value "
                                                            "must match (at most 512 characters), e.g. "
                                                            "`registry\\.example\\.com/[a-z0-9/-]+:[a-z0-9.-]+`.")
    validation_message: str = Field("", description="Says what is allowed, shown when a value does not match.")
    display_name: str = Field("Custom value", description="Label of the text field.")
    display_name_in_choices: str = Field("Other...", description="The list entry that selects the text field.")
    kubespawner_override: SpawnerOverride = Field(SpawnerOverride(image="{value}"), description=(
        "What a typed value sets; `{value}` is replaced by it."))


class ProfileOption(_Strict):
    """A choice inside a profile (KubeSpawner `profile_options`), e.g. the image the server runs."""

    display_name: str = Field(min_length=1, description="Label of the option in the picker.")
    choices: dict[Slug, OptionChoice] = Field(min_length=1, description="Choice key → choice, in picker order; "
                                                                         "the key is what `user_options` carry.")
    unlisted_choice: UnlistedChoice | None = Field(None, description="Lets named groups type a value instead.")

    @property
    def default_choice(self) -> str:
        return next((k for k, c in self.choices.items() if c.default), next(iter(self.choices)))

    def choices_for(self, groups: set[str] | list[str]) -> dict[str, OptionChoice]:
        return {k: c for k, c in self.choices.items() if c.groups is None or set(c.groups) & set(groups)}

    def unlisted_for(self, groups: set[str] | list[str]) -> UnlistedChoice | None:
        u = self.unlisted_choice
        return u if u is not None and set(u.groups) & set(groups) else None


class GPUChoice(_Strict):
    """One device choice of a `dra` pool: whole GPUs, or a MIG slice (`kind: mig` with its `profile`)."""

    pool: str
    kind: Literal["mig", "full"] = "full"
    count: int = Field(1, ge=1, le=16)
    profile: str | None = Field(None, description="MIG slice, e.g. 3g.40gb (kind: mig only)")


class ProfileGPU(_Strict):
    kind: Literal["time-sliced", "mps", "mig", "full"]
    count: int = Field(1, ge=1, le=16)
    profile: str | None = Field(None, description="MIG slice, e.g. 1g.10gb (kind: mig only)")
    alternatives: list[GPUChoice] = Field([], max_length=7, description=(
        "`dra` pools, servers not queued in Kueue: what to take, in order, when the profile's own GPUs are all "
        "taken, e.g. `[{pool: a100, kind: full}, {pool: a100-mig, kind: mig, profile: 3g.40gb}]` (DRA's "
        "prioritized list: the scheduler allocates the first that is free; docs/admin-guide.md)."))


class Profile(_Strict):
    """One choice in the picker: a pool, a GPU request and the server's size."""

    slug: Slug
    display_name: str = Field(min_length=1)
    description: str = ""
    pool: str | None = None
    gpu: ProfileGPU | None = None
    cpu: CPU = Decimal(1)
    cpu_limit: CPU | None = None
    memory: Bytes = Decimal(4 * 2**30)
    shm: Bytes = Decimal(2**30)
    image: str | None = None
    idle_timeout: Seconds | None = None
    max_age: Seconds | None = None
    max_job_timeout: Seconds | None = None
    groups: list[str] | None = None
    priority: str | None = None
    max_priority: str | None = Field(None, description=(
        "The highest priority a user may give a GPU job on this profile (`%gpu_submit --priority`); "
        "default: the profile's own priority, so nobody jumps the queue unless allowed. Members of a "
        "group in the top-level `group_max_priority` may go up to that group's ceiling instead."))
    max_per_user: int | None = Field(None, ge=1)
    max_nodes: int | None = Field(None, ge=1, le=64, description=(
        "The most nodes one `%gpu_submit --nodes N` job may span (a JobSet of N pods, one per node, each with "
        "this profile's GPUs, admitted all at once by Kueue). Whole-GPU profiles only; default: one node."))
    default: bool = False
    queue_servers: bool | None = Field(None, description=(
        "Servers of this profile wait in their team's Kueue queue, counted in its quota at the profile's "
        "priority (default: the pool's setting, else yes for GPU profiles)."))
    preemptible: bool = Field(False, description=(
        "Its servers rank below every training job of the team: a job that needs the quota preempts one, after "
        "a warning with a grace period in which the open JupyterLab saves its notebooks. Queued GPU profiles "
        "only; default: never preempted (docs/admin-guide.md)."))
    options: dict[Slug, ProfileOption] = Field({}, description=(
        "Choices inside the profile (KubeSpawner `profile_options`), e.g. `image`: the server's image, which "
        "`%gpu_submit` jobs from it use too. Option names are DNS labels other than `profile`."))

    @property
    def is_gpu(self) -> bool:
        return self.gpu is not None

    def allowed_for(self, groups: set[str] | list[str]) -> bool:
        """`groups` absent means everyone; otherwise one shared group is enough."""
        return self.groups is None or bool(set(self.groups) & set(groups))

    @property
    def own_shm(self) -> bool:
        """Does the pod mount its own memory-backed /dev/shm? Not on MPS: the device plugin mounts the node's MPS
        /dev/shm there (the MPS daemon and its clients talk through it), shared by the node's MPS pods."""
        return self.gpu is None or self.gpu.kind != "mps"

    @property
    def memory_limit(self) -> int:
        """Memory the container may use: the server's memory plus its own memory-backed /dev/shm."""
        return int(self.memory + (self.shm if self.own_shm else 0))


class Team(_Strict):
    """A Kueue ClusterQueue (quota per pool) with a LocalQueue in the team's namespace."""

    namespace: Slug
    cohort: Slug | None = None
    quota: dict[str, Annotated[int, Field(ge=0)]] = {}
    borrowing_limit: int | None = Field(None, ge=0)
    default: bool = False
    identity: TeamIdentity | None = Field(None, description=(
        "The team's Azure workload identity: its servers and `%gpu_submit` jobs run under the team's own "
        "ServiceAccount, annotated with this managed identity's client id, so `DefaultAzureCredential` reaches "
        "storage and registries without a secret; no other team's pods ever get it (docs/admin-guide.md)."))
    identity_for_users_in_no_team: bool = Field(False, description=(
        "The default team only: users in no team (who fall back to this team for quota) get its `identity` too. "
        "Off, only members of the team's own group run under it: a fallback never hands out a credential."))


class ProfilesConfig(_Strict):
    """A validated profiles file. Build it with `load_profiles()` or `parse_profiles()`."""

    pools: dict[str, Pool] = {}
    profiles: list[Profile] = Field(min_length=1)
    teams: dict[str, Team] = {}
    priorities: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_PRIORITIES))
    default_priority: str | None = Field(None, description=(
        "The priority of every job and server whose profile names none, so none runs without one "
        "(Kueue would rank it at 0, below `low`). Default: `normal`, or the lowest of `priorities` "
        "when they have no `normal`."))
    group_max_priority: dict[str, str] = Field(default_factory=dict, description=(
        "JupyterHub group → the highest priority its members may give GPU jobs on any profile they "
        "can use, above the profile's own ceiling (`max_priority`), e.g. `{ml-leads: high}`."))
    datasets: dict[DatasetName, Dataset] = Field({}, description=(
        "Read-only data, name → source and who gets it: mounted at /datasets/NAME in the servers and `%gpu_submit` "
        "jobs of its `teams` and `profiles` (docs/admin-guide.md)."))
    source: str | None = Field(None, exclude=True)

    @cached_property
    def by_slug(self) -> dict[str, Profile]:
        return {p.slug: p for p in self.profiles}

    def profile(self, slug: str) -> Profile:
        try:
            return self.by_slug[slug]
        except KeyError:
            raise KeyError(f"no profile {slug!r}; profiles: {', '.join(self.by_slug)}") from None

    def pool_of(self, profile: Profile) -> Pool | None:
        return self.pools.get(profile.pool) if profile.pool else None

    def profiles_for(self, groups: set[str] | list[str]) -> list[Profile]:
        return [p for p in self.profiles if p.allowed_for(groups)]

    def resource_name(self, profile: Profile) -> str | None:
        pool = self.pool_of(profile)
        if pool is None or profile.gpu is None:
            return None
        return pool.resource_name(profile.gpu.profile)

    def gpu_taints(self) -> list[Taint]:
        """Every taint that keeps pods off a GPU pool: a CPU pod must tolerate none of them."""
        seen, out = set(), []
        for pool in self.pools.values():
            if pool.is_gpu:
                for t in pool.effective_taints:
                    if (t.key, t.value, t.effect) not in seen:
                        seen.add((t.key, t.value, t.effect))
                        out.append(t)
        return out

    def team_for(self, groups: list[str]) -> tuple[str, Team] | None:
        """The first team (file order) named like one of the groups, else the default team."""
        for name, team in self.teams.items():
            if name in groups:
                return name, team
        return next(((n, t) for n, t in self.teams.items() if t.default), None)

    def identity_team(self, groups: list[str]) -> tuple[str, Team] | None:
        """The team whose identity pods of a user in `groups` run under: their own team (`team_for`) when they are
        its members, the default team for users of no team only where it says `identity_for_users_in_no_team`."""
        found = self.team_for(groups)
        if found is None or found[1].identity is None:
            return None
        member = found[0] in groups
        return found if member or (found[1].default and found[1].identity_for_users_in_no_team) else None

    def priority_value(self, name: str | None) -> int | None:
        return self.priorities.get(name) if name else None

    @property
    def fallback_priority(self) -> str:
        """`default_priority`, else `normal`, else the lowest priority (validation checks it exists)."""
        if self.default_priority:
            return self.default_priority
        if "normal" in self.priorities or not self.priorities:
            return "normal"
        return min(self.priorities, key=self.priorities.__getitem__)

    def effective_priority(self, profile: Profile) -> str:
        """The priority of a job or server on `profile` when the user picks none: always explicit."""
        return profile.priority or self.fallback_priority

    def max_priority_for(self, profile: Profile, groups: set[str] | list[str]) -> str:
        """The highest priority these groups may pick on `profile`: the profile's `max_priority` (else its
        own priority), raised by any `group_max_priority` of the user's groups."""
        candidates = [profile.max_priority or self.effective_priority(profile)]
        candidates += [p for g, p in self.group_max_priority.items() if g in set(groups)]
        return max(candidates, key=lambda p: self.priorities.get(p, -(2**63)))

    def allowed_priorities(self, profile: Profile, groups: set[str] | list[str]) -> list[str]:
        """The priorities these groups may pick on `profile`, lowest first."""
        ceiling = self.priorities.get(self.max_priority_for(profile, groups), -(2**63))
        return [n for n, v in sorted(self.priorities.items(), key=lambda kv: kv[1]) if v <= ceiling]


def slice_memory_gb(slice_name: str) -> int:
    return int(MIG_PROFILE_RE.match(slice_name)["mem"])
