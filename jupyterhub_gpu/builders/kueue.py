"""Kueue objects that guard GPU quota, rendered from the profiles file (pure; `gpuhub render kueue`).

One ResourceFlavor per GPU pool (its node labels and tolerations, which Kueue copies into admitted
pods), one ClusterQueue per team (GPU quota in the pool's own resource name plus the CPU and memory
the team's profiles on the pool ask for with that many GPUs: model/quota.py), a LocalQueue in the
team's namespace and one of the same name in the hub's namespace (notebook servers queue there: Kueue's
pod integration), and a WorkloadPriorityClass and PriorityClass per priority, plus a server
WorkloadPriorityClass per priority above every job's (`server_priority_class`), and, when a profile is `preemptible`,
one per priority below every job's (`preemptible_priority_class`), and the ServiceAccounts of teams
with a workload identity (`builders.identity`). Kueue API v1beta2 only.
Team namespaces enforce the Pod Security `restricted` standard (Job pods are built to pass it: `hardening`).
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from jupyterhub_gpu.builders import dra
from jupyterhub_gpu.builders.hardening import MAX_EPHEMERAL_STORAGE, POD_SECURITY_LABELS
from jupyterhub_gpu.builders.identity import service_accounts
from jupyterhub_gpu.builders.names import DEFAULT_HUB_NAMESPACE
from jupyterhub_gpu.builders.pods import priority_class_name
from jupyterhub_gpu.contract import KUEUE_API, MANAGED_BY, PREEMPTIBLE_LABEL, PRIORITY_LABEL, QUEUE_LABEL, TEAM_LABEL
from jupyterhub_gpu.model import quantities, quota
from jupyterhub_gpu.model.profiles import Pool, Profile, ProfilesConfig, Team
from jupyterhub_gpu.model.queued_servers import queues_servers  # the model's rule (validation needs it); used here

EPHEMERAL = "ephemeral-storage"
SERVER_PRIORITY_PREFIX = "gpuhub-server-"
PREEMPTIBLE_PRIORITY_PREFIX = "gpuhub-preemptible-"


def local_queue_name(team_name: str) -> str:
    return team_name


def cluster_queue_name(team_name: str) -> str:
    return f"team-{team_name}"


def _meta(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "labels": dict(MANAGED_BY), **extra}


def resource_flavor(name: str, pool: Pool) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": dict(pool.node_selector)}
    if pool.effective_taints:
        spec["tolerations"] = pool.tolerations()
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": _meta(name), "spec": spec}


def _share(cfg: ProfilesConfig, pool_name: str, gpus: int) -> tuple[Decimal, Decimal]:
    """CPU and memory that `gpus` slots of a node carry (the node's allocatable, not its VM size); 0 when the
    pool's node size is unknown."""
    shape = cfg.pools[pool_name].shape()
    if shape is None:
        return Decimal(0), Decimal(0)
    per_node = sum(cfg.pools[pool_name].slots_per_node().values()) or 1
    return shape.cpu * gpus / per_node, shape.memory * gpus / per_node


def _up(value: Decimal, unit: Decimal) -> Decimal:
    """`value` rounded up to a whole `unit` (1m CPU, 1 MiB): a quota rounded down would admit one server
    fewer."""
    return -(-value // unit) * unit


def _quota(cfg: ProfilesConfig, team_name: str, pool_name: str, gpus: int) -> tuple[str, str, str]:
    """(cpu, memory, ephemeral-storage) quota for `gpus` units of the team's quota on the pool: what the
    profiles the team may choose there ask for with that many (model/quota.py), never less than the slots'
    share of a node, so the GPU quota, not CPU or memory, decides how many servers and jobs run. Scratch
    disk: the most one Job may ask for, per pod (Kueue refuses a workload asking for a resource its queue
    does not cover)."""
    wanted = quota.need(cfg, team_name, pool_name, gpus)
    cpu, mem = _share(cfg, pool_name, gpus)
    scratch = quantities.parse(MAX_EPHEMERAL_STORAGE) * max(gpus, wanted.pods)
    return (quantities.cpu(_up(max(cpu, wanted.cpu), Decimal("0.001"))),
            quantities.memory(_up(max(mem, wanted.memory), Decimal(quantities.MI))), quantities.memory(scratch))


def _cohort_pools(cfg: ProfilesConfig, team: Team) -> list[str]:
    """Pools the team has quota in, plus those its cohort has quota in (nominal 0, so it can borrow)."""
    names = list(team.quota)
    if team.cohort:
        for other in cfg.teams.values():
            if other.cohort == team.cohort:
                names += [p for p in other.quota if p not in names]
    return [n for n in cfg.pools if n in names]


def server_queue(cfg: ProfilesConfig, profile: Profile, groups: list[str]) -> tuple[str, Team] | None:
    """(team name, team) whose queue a server of `profile` waits in, for a user in `groups`; None when
    servers of this profile are not queued, the user has no team, or the team's queue does not cover the
    pool (Kueue could never admit it: the server is scheduled as before)."""
    found = cfg.team_for(groups) if queues_servers(cfg, profile) and profile.pool else None
    if found is None or profile.pool not in _cohort_pools(cfg, found[1]):
        return None
    return found


def server_priority_class(priority: str) -> str:
    """The WorkloadPriorityClass of a queued server at `priority`: its value is above every job's, so a job
    never preempts a running server within the team's ClusterQueue (`LowerPriority`), while servers keep
    their order among themselves."""
    return f"{SERVER_PRIORITY_PREFIX}{priority}"


def preemptible_priority_class(priority: str) -> str:
    """The WorkloadPriorityClass of a queued server of a `preemptible` profile at `priority`: its value is below
    every job's, so any job of the team that needs the quota preempts it (`LowerPriority`), as does a server that
    is not preemptible; preemptible servers keep their order among themselves."""
    return f"{PREEMPTIBLE_PRIORITY_PREFIX}{priority}"


def _shifted(cfg: ProfilesConfig, sign: int) -> dict[str, int]:
    """Priority name → the job value moved by the spread of the job values and one: up (`sign` 1), the lowest
    result is above the highest job value; down (-1), the highest is below the lowest."""
    if not cfg.priorities:
        return {}
    offset = max(cfg.priorities.values()) - min(cfg.priorities.values()) + 1
    return {name: value + sign * offset for name, value in cfg.priorities.items()}


def server_priority_values(cfg: ProfilesConfig) -> dict[str, int]:
    """Priority name → its server class's value, above every job value."""
    return _shifted(cfg, 1)


def preemptible_priority_values(cfg: ProfilesConfig) -> dict[str, int]:
    """Priority name → its preemptible server class's value, below every job value; {} when no profile is
    preemptible (nothing to apply)."""
    return _shifted(cfg, -1) if any(p.preemptible for p in cfg.profiles) else {}


def server_queue_labels(cfg: ProfilesConfig, profile: Profile, groups: list[str]) -> dict[str, str]:
    """Labels that put a server pod in its team's queue at the profile's priority, as a server class (Kueue's
    pod integration gates the pod until it admits it), or {} when it is not queued. A preemptible profile's
    server gets the preemptible class and PREEMPTIBLE_LABEL: only a queued server can be preempted."""
    found = server_queue(cfg, profile, groups)
    if found is None:
        return {}
    priority = cfg.effective_priority(profile)
    if profile.preemptible:
        return {QUEUE_LABEL: local_queue_name(found[0]), PRIORITY_LABEL: preemptible_priority_class(priority),
                PREEMPTIBLE_LABEL: "true"}
    return {QUEUE_LABEL: local_queue_name(found[0]), PRIORITY_LABEL: server_priority_class(priority)}


def cluster_queue(cfg: ProfilesConfig, team_name: str, team: Team,
                  hub_namespace: str = DEFAULT_HUB_NAMESPACE) -> dict[str, Any]:
    pools = _cohort_pools(cfg, team)
    gpu_resources = sorted({r for n in pools for r in cfg.pools[n].slots_per_node()})
    flavors = []
    for name in pools:
        pool = cfg.pools[name]
        gpus = team.quota.get(name, 0)
        cpu, mem, scratch = _quota(cfg, team_name, name, gpus)
        own = set(pool.slots_per_node())
        resources = [
            {"name": "cpu", "nominalQuota": cpu},
            {"name": "memory", "nominalQuota": mem},
            {"name": EPHEMERAL, "nominalQuota": scratch},
        ] + [{"name": r, "nominalQuota": gpus if r in own else 0} for r in gpu_resources]
        if team.cohort and team.borrowing_limit is not None:
            for r, limit in zip(resources, _quota(cfg, team_name, name, team.borrowing_limit)):
                r["borrowingLimit"] = limit
            for r in resources[3:]:
                r["borrowingLimit"] = team.borrowing_limit if r["name"] in own else 0
        flavors.append({"name": name, "resources": resources})
    spec: dict[str, Any] = {
        # the team's Jobs, and the servers in the hub's namespace
        "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                                    "values": sorted({team.namespace, hub_namespace})}]},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
        "resourceGroups": [{"coveredResources": ["cpu", "memory", EPHEMERAL, *gpu_resources], "flavors": flavors}],
    }
    if team.cohort:
        spec["cohortName"] = team.cohort
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": _meta(cluster_queue_name(team_name)),
            "spec": spec}


def local_queue(team_name: str, team: Team, namespace: str | None = None) -> dict[str, Any]:
    """The team's LocalQueue in its namespace (Jobs), or in `namespace` (the hub's: servers)."""
    return {"apiVersion": KUEUE_API, "kind": "LocalQueue",
            "metadata": _meta(local_queue_name(team_name), namespace=namespace or team.namespace),
            "spec": {"clusterQueue": cluster_queue_name(team_name)}}


def team_namespace(team_name: str, team: Team) -> dict[str, Any]:
    """The team's namespace, enforcing Pod Security `restricted`: the API server itself refuses a pod there
    that runs as root, escalates privileges, keeps capabilities or mounts host paths."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": _meta(team.namespace) | {"labels": {**MANAGED_BY, TEAM_LABEL: team_name,
                                                             **POD_SECURITY_LABELS}}}


def render_kueue(cfg: ProfilesConfig, hub_namespace: str = DEFAULT_HUB_NAMESPACE) -> list[dict[str, Any]]:
    """Every object, in the order `kubectl apply` needs them (the hub's namespace must exist)."""
    objs: list[dict[str, Any]] = []
    objs += [team_namespace(name, team) for name, team in cfg.teams.items()]
    objs += service_accounts(cfg, hub_namespace)  # teams' workload identities: servers' and jobs' accounts
    objs += dra.device_classes(cfg) + dra.claim_templates(cfg, hub_namespace)  # dra pools' GPUs, counted by Kueue
    for name, value in cfg.priorities.items():
        objs.append({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": _meta(priority_class_name(name)), "value": value, "globalDefault": False,
                     # a server goes ahead in the scheduling queue, but never evicts someone's running server
                     "preemptionPolicy": "Never",
                     "description": f"jupyterhub-gpu priority {name!r} for notebook servers (queues ahead; "
                                    "never preempts a running server)"})
        objs.append({"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": _meta(name),
                     "value": value, "description": f"jupyterhub-gpu priority {name!r} for queued GPU jobs"})
    for name, value in server_priority_values(cfg).items():
        objs.append({"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass",
                     "metadata": _meta(server_priority_class(name)), "value": value,
                     "description": f"jupyterhub-gpu priority {name!r} for queued notebook servers (above every "
                                    "job priority: a job never preempts a running server of its team)"})
    for name, value in preemptible_priority_values(cfg).items():
        objs.append({"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass",
                     "metadata": _meta(preemptible_priority_class(name)), "value": value,
                     "description": f"jupyterhub-gpu priority {name!r} for queued servers of preemptible profiles "
                                    "(below every job priority: a job of the team may preempt them)"})
    used = {p for team in cfg.teams.values() for p in _cohort_pools(cfg, team)}
    objs += [resource_flavor(n, p) for n, p in cfg.pools.items() if n in used]
    objs += [cluster_queue(cfg, n, t, hub_namespace) for n, t in cfg.teams.items()]
    objs += [local_queue(n, t) for n, t in cfg.teams.items()]
    if any(queues_servers(cfg, p) for p in cfg.profiles):
        objs += [local_queue(n, t, hub_namespace) for n, t in cfg.teams.items() if t.namespace != hub_namespace]
    return objs
