"""The profiles-file reference, generated from the pydantic model in `profiles.py` (pure).

Field names, types, constraints and defaults come from the model itself; the descriptions come from a
field's own `description=` when it has one, else from `DESCRIPTIONS` below. A unit test fails when a
model field has no description, or when docs/profiles-reference.md or the reference section of
docs/admin-guide.md differ from what this renders, so the docs cannot drift from the model.

    python -m jupyterhub_gpu.tools.reference_docs          # rewrite both files
"""
from __future__ import annotations

import argparse
import re
import sys
import types
import typing
from decimal import Decimal
from pathlib import Path
from typing import Any

from annotated_types import Ge, Le, MinLen
from pydantic import BaseModel, BeforeValidator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from jupyterhub_gpu.model import datasets as D
from jupyterhub_gpu.model import identity as I
from jupyterhub_gpu.model import profiles as P
from jupyterhub_gpu.model import warm_schedule as W
from jupyterhub_gpu.model.gpus import GPU_MODELS
from jupyterhub_gpu.model.quantities import memory

#: Sections in order: (heading, model, where it sits in the file).
SECTIONS: list[tuple[str, type[BaseModel], str]] = [
    ("Top level", P.ProfilesConfig, "the file"),
    ("Pool", P.Pool, "`pools.<name>`"),
    ("Taint", P.Taint, "`pools.<name>.taints[]`"),
    ("PoolGPU", P.PoolGPU, "`pools.<name>.gpu`"),
    ("NoSharing", P.NoSharing, "`pools.<name>.sharing` with `strategy: none`"),
    ("TimeSlicing", P.TimeSlicing, "`pools.<name>.sharing` with `strategy: time-slicing`"),
    ("MPSSharing", P.MPSSharing, "`pools.<name>.sharing` with `strategy: mps`"),
    ("MIGSharing", P.MIGSharing, "`pools.<name>.sharing` with `strategy: mig`"),
    ("NodeShape", P.NodeShape, "`pools.<name>.node`"),
    ("WarmWindow", W.WarmWindow, "`pools.<name>.warm[]`"),
    ("Profile", P.Profile, "`profiles[]`"),
    ("ProfileGPU", P.ProfileGPU, "`profiles[].gpu`"),
    ("GPUChoice", P.GPUChoice, "`profiles[].gpu.alternatives[]` (`dra` pools)"),
    ("ProfileOption", P.ProfileOption, "`profiles[].options.<name>`"),
    ("OptionChoice", P.OptionChoice, "`profiles[].options.<name>.choices.<key>`"),
    ("UnlistedChoice", P.UnlistedChoice, "`profiles[].options.<name>.unlisted_choice`"),
    ("SpawnerOverride", P.SpawnerOverride, "`kubespawner_override` of a choice"),
    ("Team", P.Team, "`teams.<name>`"),
    ("TeamIdentity", I.TeamIdentity, "`teams.<name>.identity`"),
    ("Dataset", D.Dataset, "`datasets.<name>`"),
    ("BlobSource", D.BlobSource, "`datasets.<name>.blob`"),
    ("AzureFileSource", D.AzureFileSource, "`datasets.<name>.azurefile`"),
]

DESCRIPTIONS: dict[str, str] = {
    "GPUChoice.pool": "A `dra` pool of this file; the server may land on its nodes (its taints are tolerated).",
    "GPUChoice.kind": "`full` (whole GPUs of the pool's `device_class`) or `mig` (a MIG slice, with `profile`, "
                      "of a MIG-partitioned `dra` pool).",
    "GPUChoice.count": "How many devices; one node of the pool must hold them.",
    "ProfilesConfig.pools": "Node pools as they exist in the cluster, by name (the name is used by profiles, "
                            "team quotas and the Kueue ResourceFlavor).",
    "ProfilesConfig.profiles": "What users pick in the spawn form, in this order.",
    "ProfilesConfig.teams": "Kueue quota per team: one ClusterQueue `team-<name>` and a LocalQueue `<name>` in "
                            "the team's namespace. A user's team is the first team named like one of their "
                            "JupyterHub groups, else the `default: true` team.",
    "ProfilesConfig.priorities": "Priority name → value; each becomes a Kueue WorkloadPriorityClass and a "
                                 "PriorityClass `gpuhub-<name>` (servers queue ahead, never preempt).",
    "Pool.node_selector": "Labels that select the pool's nodes (AKS: `kubernetes.azure.com/agentpool: <pool>`); "
                          "keys and values in Kubernetes label syntax (no spaces, commas, `=` or `$`).",
    "Pool.taints": "The pool's taints. A GPU pool needs a `NoSchedule` taint so CPU pods stay off it; pods of "
                   "this pool's profiles tolerate exactly these (plus the spot taint on spot pools).",
    "Pool.gpu": "The GPUs of one node; absent for a CPU pool.",
    "Pool.sharing": "How the GPUs are shared: `none` (whole GPUs), `time-slicing`, `mps` or `mig`. Decides the "
                    "resource name and the slots per node (see the table below).",
    "Pool.instance_type": "VM size (`node.kubernetes.io/instance-type`), e.g. `Standard_NC4as_T4_v3`; doctor "
                          "checks the nodes carry it.",
    "Pool.node": "CPU/memory/pods of one node, when the instance type is not one jupyterhub-gpu knows.",
    "Pool.spot": "A spot pool: AKS adds the `kubernetes.azure.com/scalesetpriority=spot:NoSchedule` taint, "
                 "and pods of its profiles tolerate it. Nodes may be evicted: checkpoint.",
    "Pool.cost_per_node_hour": "Price of one node per hour, for the picker and the culler's reclaimed-cost figures.",
    "Pool.min_nodes": "Autoscaler minimum; 0 lets the pool scale from zero (doctor accepts a pool with no nodes).",
    "Pool.max_nodes": "Autoscaler maximum; with `min_nodes: 0` it says the pool can scale from zero.",
    "Pool.display_name": "The pool's name in the picker (default: the GPU model, or CPU).",
    "Taint.key": "Taint key, e.g. `sku` (Kubernetes label key syntax).",
    "Taint.value": "Taint value, e.g. `gpu` (label value syntax); empty: the toleration uses `operator: Exists`.",
    "Taint.effect": "Taint effect.",
    "PoolGPU.model": "GPU model: " + ", ".join(f"`{m}`" for m in GPU_MODELS) + ".",
    "PoolGPU.count_per_node": "GPUs per node.",
    "NoSharing.strategy": "Whole GPUs: resource `nvidia.com/gpu`, one slot per GPU.",
    "TimeSlicing.strategy": "NVIDIA device plugin time-slicing.",
    "TimeSlicing.replicas": "Slots per GPU (device plugin `replicas`).",
    "TimeSlicing.rename_by_default": "`true`: the resource is `nvidia.com/gpu.shared`; `false`: `nvidia.com/gpu` "
                                     "(and the product label gets `-SHARED`).",
    "TimeSlicing.fail_requests_greater_than_one": "Device plugin `failRequestsGreaterThanOne`: a pod asking for "
                                                  "more than one slot fails instead of getting two time-slices.",
    "MPSSharing.strategy": "NVIDIA device plugin MPS (`sharing.mps`): one CUDA context per GPU through the node's "
                           "MPS control daemon, memory split evenly (see MPS below).",
    "MPSSharing.replicas": "Shares per GPU (device plugin `replicas`): each gets GPU memory / replicas and "
                           "at most 1/replicas of its threads; 2 to 48 (16 on V100).",
    "MPSSharing.rename_by_default": "`true`: the resource is `nvidia.com/gpu.shared`; `false`: `nvidia.com/gpu` "
                                    "(and the product label gets `-SHARED`).",
    "MIGSharing.strategy": "Multi-Instance GPU, partitioned by the GPU operator's mig-manager.",
    "MIGSharing.mig_strategy": "`mixed`: one resource per slice size, `nvidia.com/mig-<g>g.<mem>gb`; `single`: "
                               "every slice is `nvidia.com/gpu` (all slices must be the same size).",
    "MIGSharing.layout": "Slices per GPU: `all-<slice>` (e.g. `all-1g.10gb`), `all-balanced`, or a mapping "
                         "`{1g.10gb: 3, 2g.20gb: 2}`; becomes the node label `nvidia.com/mig.config` (a mapping: "
                         "`custom-...`, see deploy/mig-parted-config.yaml).",
    "NodeShape.cpu": "Allocatable CPU of one node.",
    "NodeShape.memory": "Allocatable memory of one node.",
    "NodeShape.max_pods": "Pods per node.",
    "Profile.slug": "Identifier (in URLs, pod labels, `%gpu_submit --profile`).",
    "Profile.display_name": "Name in the picker.",
    "Profile.description": "One line under the name in the picker.",
    "Profile.pool": "The pool its pods run on; absent (or a CPU pool) for a CPU-only profile.",
    "Profile.gpu": "The GPU request; absent for a CPU-only profile.",
    "Profile.cpu": "CPU request (guaranteed).",
    "Profile.cpu_limit": "CPU limit (default: none, the server may burst).",
    "Profile.memory": "Memory request and limit of the server.",
    "Profile.shm": "Size of the memory-backed `/dev/shm` (PyTorch data loaders need it; not on MPS profiles, whose "
                   "`/dev/shm` is the device plugin's); added to the memory "
                   "limit.",
    "Profile.image": "Singleuser image for this profile (also runs its `%gpu_submit` Jobs); default: the hub's.",
    "Profile.idle_timeout": "The culler stops a server idle this long (GPU profiles: 30–60 min).",
    "Profile.max_age": "The culler stops a server this old, busy or not.",
    "Profile.max_job_timeout": "The longest `%gpu_submit --timeout` allowed on this profile.",
    "Profile.groups": "JupyterHub groups allowed to use it; absent: everyone.",
    "Profile.priority": "A name from `priorities`, for its servers and Jobs.",
    "Profile.max_per_user": "At most this many servers/Jobs of this profile per user at once.",
    "Profile.default": "Preselected in the picker.",
    "ProfileGPU.kind": "`time-sliced` (a time-slicing pool), `mps` (an MPS pool; `count: 1`), `mig` (a MIG pool, "
                       "with `profile`) or `full` (whole GPUs).",
    "ProfileGPU.count": "How many GPUs / slots / slices.",
    "Team.namespace": "Namespace of the team's Jobs and LocalQueue (created by `gpuhub render kueue`).",
    "Team.cohort": "Kueue cohort: teams in the same cohort borrow each other's unused quota.",
    "Team.quota": "Pool name → GPUs (or slots, or MIG slices) the team is guaranteed. The ClusterQueue also "
                  "gets the CPU, memory and scratch disk that many servers of the team's profiles on the pool "
                  "ask (at least that many slots' share of a node), so N GPUs admit N servers; `gpuhub validate` "
                  "refuses a quota the pool's `max_nodes` nodes cannot run.",
    "Team.borrowing_limit": "At most this many GPUs borrowed from the cohort per pool (needs `cohort`).",
    "Team.default": "The team of users in no team's group (else `%gpu_submit` is refused for them).",
}


def _validator_kind(meta: list[Any]) -> str | None:
    for m in meta:
        if isinstance(m, FieldInfo):
            inner = _validator_kind(list(m.metadata))
            if inner:
                return inner
        if isinstance(m, BeforeValidator):
            f = m.func
            if f is P.duration_seconds:
                return "duration (`30m`, `2h`, `1h30m`, seconds)"
            if f is W.parse_days:
                return "days (`Mon-Fri`, `Sat,Sun`)"
            if f is W.parse_hhmm:
                return "`\"HH:MM\"`"
            if f is W.zone_name:
                return "IANA time zone"
            if f is I.guid:
                return "GUID"
            if f is I.account:
                return "ServiceAccount name"
            if f is P.mig_layout_value:
                return "`all-<slice>` \\| `all-balanced` \\| map slice → count"
            if f.__qualname__.startswith("_quantity"):
                kind = f.__closure__[0].cell_contents if f.__closure__ else ""
                return "CPU quantity (`2`, `500m`)" if kind == "CPU" else "memory quantity (`8Gi`, `512Mi`)"
        if getattr(m, "pattern", None) == P.DNS_LABEL:
            return "DNS label"
        if getattr(m, "pattern", None) == P.DNS_SUBDOMAIN:
            return "DNS subdomain"
    return None


def type_name(tp: Any, meta: list[Any] | None = None) -> str:
    """A reader's name for a field type (`list of string`, `CPU quantity`, `[Taint](#taint)` ...)."""
    kind = _validator_kind(meta or [])
    if kind:
        return kind
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return type_name(args[0], list(args[1:]))
    if origin in (typing.Union, types.UnionType):
        real = [a for a in args if a is not type(None)]
        names = [type_name(a) for a in real]
        return " \\| ".join(names)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {type_name(args[0])}"
    if origin is dict:
        return f"map {type_name(args[0])} → {type_name(args[1])}"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        name = next((h for h, m, _ in SECTIONS if m is tp), tp.__name__)
        return f"[{name}](#{name.lower()})"
    return {str: "string", int: "integer", bool: "boolean", float: "number", Decimal: "number"}.get(tp, str(tp))


def _constraints(meta: list[Any]) -> str:
    out = []
    for m in meta:
        if isinstance(m, Ge):
            out.append(f"≥ {m.ge}")
        elif isinstance(m, Le):
            out.append(f"≤ {m.le}")
        elif isinstance(m, MinLen) and m.min_length:
            out.append("not empty")
    return ", ".join(out)


def _default(model: type[BaseModel], name: str, field) -> str:
    if field.is_required():
        return "**required**"
    value = field.default_factory() if field.default_factory else field.default
    if value is None or value is PydanticUndefined:
        return "—"
    if isinstance(value, Decimal) and name in ("memory", "shm"):
        return f"`{memory(value)}`"
    if isinstance(value, BaseModel):
        return "`" + ", ".join(f"{k}: {v}" for k, v in value.model_dump(exclude_none=True).items()) + "`" \
            if value.model_dump(exclude_none=True) else "—"
    if value == "":
        return '`""`'
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (list, dict)) and not value:
        return f"`{value}`"
    if isinstance(value, dict):
        return "`{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}`"
    return f"`{value}`"


def description(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    return field.description or DESCRIPTIONS.get(f"{model.__name__}.{name}", "")


def undocumented() -> list[str]:
    """`Model.field` for every field without a description (a test keeps this empty)."""
    return [f"{m.__name__}.{n}" for _, m, _ in SECTIONS for n, f in m.model_fields.items()
            if not f.exclude and not description(m, n)]


def reference() -> str:
    """The reference as Markdown (headings start at ###, so it fits inside another document)."""
    out = ["Generated from the pydantic model (`jupyterhub_gpu/model/profiles.py`) by "
           "`python -m jupyterhub_gpu.tools.reference_docs`; "
           "do not edit by hand. Unknown keys are errors everywhere; `gpuhub validate FILE` lists every problem "
           "with its path, the bad value and what would be valid.", ""]
    for heading, model, where in SECTIONS:
        doc = "" if model is P.ProfilesConfig else (model.__doc__ or "").strip().split("\n")[0]
        out += [f"### {heading}", "", f"{where[0].upper()}{where[1:]}" + (f": {doc}" if doc else "."), "",
                "| key | type | default | constraints | meaning |", "|---|---|---|---|---|"]
        for name, field in model.model_fields.items():
            if field.exclude:
                continue
            out.append(f"| `{field.alias or name}` | {type_name(field.annotation, field.metadata)} "
                       f"| {_default(model, name, field)} | {_constraints(field.metadata)} "
                       f"| {description(model, name)} |")
        out.append("")
    out += ["### Resource names and slots", "",
            "| sharing | resource a pod asks for | slots per node |", "|---|---|---|",
            "| `none` | `nvidia.com/gpu` | GPUs per node |",
            ("| `time-slicing` | `nvidia.com/gpu` (`nvidia.com/gpu.shared` with `rename_by_default`) "
             "| GPUs × replicas |"),
            ("| `mps` | `nvidia.com/gpu` (`nvidia.com/gpu.shared` with `rename_by_default`) "
             "| GPUs × replicas |"),
            "| `mig`, `mixed` | `nvidia.com/mig-<g>g.<mem>gb` | GPUs × slices of that size in the layout |",
            "| `mig`, `single` | `nvidia.com/gpu` | GPUs × slices |", "",
            *MPS_FACTS, *PREEMPTIBLE_FACTS, *DRA_FACTS,
            "### MIG slices per GPU", "", "| model | slices (max per GPU) |", "|---|---|"]
    for m in GPU_MODELS.values():
        if m.mig:
            out.append(f"| {m.name} | " + ", ".join(f"{s} ×{n}" for s, n in m.mig.items()) + " |")
    out.append("")
    return "\n".join(out)


#: What MPS does and refuses, as the NVIDIA device plugin's own source says (checked at v0.20.0).
MPS_FACTS = [
    "### MPS", "",
    "Checked against the NVIDIA device plugin's source at v0.20.0 (`sharing.mps` exists since v0.15):", "",
    "- The config entry of an MPS pool is `sharing.mps` with `resources: [{name: nvidia.com/gpu, replicas: N}]`, "
    "`renameByDefault` and `failRequestsGreaterThanOne: true`; `flags.migStrategy` is `none` (the plugin refuses "
    "`mixed` with MPS).",
    "- Each node runs an MPS control daemon (a DaemonSet of the device plugin, on nodes labelled "
    "`nvidia.com/mps.capable=true` by GPU feature discovery); the pods on a GPU share one CUDA context. The "
    "daemon pins GPU memory / replicas to each client and caps its threads at 100 / replicas %.",
    "- `replicas` must be at least 2; the daemon refuses more than 48 per GPU of compute capability 7.5 or newer "
    "and more than 16 on older GPUs (V100).",
    "- Not on MIG-enabled GPUs: the daemon skips MIG devices and the node is not labelled MPS-capable. A "
    "MIG-capable GPU (A100, H100, H200) runs MPS with MIG disabled (`nvidia.com/mig.config=all-disabled`); "
    "`gpuhub validate` refuses an MPS pool whose `node_selector` names a MIG layout or strategy, or that selects "
    "the nodes of a MIG pool.",
    "- A container gets one replica: the plugin fails a request for more than one (always before v0.20, by "
    "default since), so an MPS profile has `gpu.count: 1`.",
    "- The plugin mounts the node's MPS shm directory (a tmpfs of half the node's memory, shared by the daemon and "
    "every MPS pod of the node) at `/dev/shm` in each MPS container, so an MPS profile sets no `shm`: its pods "
    "mount no `/dev/shm` of their own and their memory limit is `memory` alone.",
    "- Labels: `nvidia.com/gpu.sharing-strategy=mps`, `nvidia.com/gpu.replicas=<N>`, `nvidia.com/mps.capable=true`; "
    "`gpuhub doctor` checks them and that the MPS control daemon is ready on every node of the pool.", "",
]


#: What `preemptible: true` does, as Kueue's own source says (checked at v0.19.2: pkg/controller/jobs/pod).
PREEMPTIBLE_FACTS = [
    "### Preemptible servers", "",
    "Checked against Kueue's source at v0.19.2 (its pod integration, which admits the servers):", "",
    "- A server's Workload gets its priority from the pod's `kueue.x-k8s.io/priority-class` label. Servers of other "
    "profiles get `gpuhub-server-<priority>`, above every job priority (a job never preempts them); a `preemptible` "
    "profile's server gets `gpuhub-preemptible-<priority>`, below every job priority (job value minus the spread "
    "of the job values and one), so preemptible servers keep their order among themselves. `gpuhub render kueue` "
    "writes these classes only when some profile is preemptible; `gpuhub doctor` checks them like the others.",
    "- Each team's ClusterQueue preempts `withinClusterQueue: LowerPriority`: a job of the team that needs the "
    "quota, at any priority, preempts a preemptible server, and so does a server that is not preemptible. "
    "`reclaimWithinCohort: Any` is unchanged: a team taking back quota another team borrowed preempts what runs "
    "on it, preemptible or not. A waiting preemptible server never preempts a job.",
    "- Kueue gives no notice: it writes a `TerminationTarget` condition on the pod (reason "
    "`WorkloadEvictedDueToPreempted`, its message says whose workload it made room for) and deletes the pod with "
    "the pod's grace period. A preemptible server's pod has `terminationGracePeriodSeconds` = the hub's "
    "`GPUSpawner.preemption_grace_period` (default 60) and `$GPUHUB_PREEMPTION_GRACE_S`; on SIGTERM its server "
    "tells the open JupyterLab at once (an event on jupyter_server's event bus, which a background tab hears too), "
    "which warns the user and saves every unsaved document, and stops about 15 s later (at once when no "
    "JupyterLab is open). The hub reads the condition and the home page says the server "
    "was preempted, with \"Start it again\" and `%gpu_submit`.",
    "- Only a server that waits in its team's queue can be preempted: `gpuhub validate` refuses `preemptible` on "
    "a profile whose servers are not queued (CPU profiles, `queue_servers: false`) or on a pool no team has quota "
    "on, and the picker says \"Preemptible\" only to users whose team queues the server.", "",
]


#: What a `dra` pool renders and what validate refuses (the admin guide's "GPUs through DRA" says how to run it).
DRA_FACTS = [
    "### DRA pools (`allocation: dra`)", "",
    "Checked against Kubernetes v1.36.3 (`resource.k8s.io/v1`), the NVIDIA DRA driver v0.4.1 (driver and "
    "DeviceClass `gpu.nvidia.com`) and Kueue v0.19.2 (how to run it: docs/admin-guide.md, \"GPUs through DRA\"):", "",
    "- A profile on an `allocation: dra` pool asks for its GPUs as one ResourceClaim per pod, made from the "
    "ResourceClaimTemplate `gpuhub-<profile>` that `gpuhub render kueue` writes in the hub's namespace (servers) "
    "and in each team's (jobs; `gpuhub-<profile>.job` when the profile has `alternatives`): `count` devices of "
    "the pool's `device_class` (whole GPUs) or of `gpuhub-mig-<slice>` (one DeviceClass per MIG slice, rendered "
    "too), selected by the driver's `productName` for the pool's GPU model. A template cannot be changed: "
    "delete it before applying a changed profile's.",
    "- Kueue counts them through `deviceClassMappings` (`gpuhub render kueue-config`): whole GPUs as "
    "`nvidia.com/gpu`, each MIG slice as `nvidia.com/mig-<slice>`, the names a device-plugin pool uses, so a "
    "team's `quota` is the same number of GPUs either way.",
    "- `gpuhub validate` refuses time-slicing and MPS on a `dra` pool (DRA shares no GPU between pods there: "
    "keep such a pool on the device plugin), `mig_strategy: single` on one, `device_class` on a pool that is not "
    "`dra`, and `alternatives` on a profile whose pool is not `dra` or whose servers wait in a Kueue queue "
    "(Kueue v0.19 leaves a claim with `firstAvailable` inadmissible: set `queue_servers: false`), or whose "
    "choice is on a pool that is not `dra`, is a kind that pool does not offer, or is more than one node holds. "
    "At most 7 alternatives (DRA's limit is 8 choices with the profile's own). Jobs of such a profile take the "
    "profile's own GPUs.", "",
]


BEGIN = "<!-- BEGIN GENERATED: profiles reference (python -m jupyterhub_gpu.tools.reference_docs) -->"
END = "<!-- END GENERATED: profiles reference -->"


def standalone() -> str:
    return "# Profiles file reference\n\n" + reference().replace("\n### ", "\n## ")


def splice(text: str) -> str:
    """`text` with the part between BEGIN and END replaced by the current reference."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"no {BEGIN} ... {END} markers")
    return pattern.sub(lambda _: f"{BEGIN}\n{reference()}\n{END}", text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jupyterhub_gpu.tools.reference_docs",
                                description=__doc__.split("\n")[0])
    p.add_argument("--docs", default="docs", help="the docs folder (default: docs)")
    a = p.parse_args(argv)
    missing = undocumented()
    if missing:
        print(f"error: fields without a description: {', '.join(missing)}", file=sys.stderr)
        return 1
    docs = Path(a.docs)
    (docs / "profiles-reference.md").write_text(standalone())
    guide = docs / "admin-guide.md"
    guide.write_text(splice(guide.read_text()))
    print(docs / "profiles-reference.md")
    print(guide)
    return 0


if __name__ == "__main__":
    sys.exit(main())

