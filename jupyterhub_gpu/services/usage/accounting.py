"""Showback arithmetic (pure): pod lifetimes → GPU-hours held, DCGM samples → GPU-hours used, $ from the
profiles file, Kueue Workloads → queue waits and evictions.

A "GPU" here is what a pod holds of one: a whole GPU, a MIG slice or a time-sliced share each count as one
device, like the culler's `Rule.gpus`; the $ figure already prices a slice or share as its part of the
node (`cluster/prices.hourly_cost`, through the rules of cluster/rules.py), so cost is the figure to compare
across kinds.

GPU-hours used and peak memory count only a pod's own DCGM series: a whole GPU's or a MIG slice's. On a
time-sliced or MPS pool the exporter reports the shared device's activity and memory for every pod on it
(cluster/dcgm.py `attribution`), so those pods' hours are held but their use is unknown, not their
neighbours'; each row says which evidence it used (`Row.evidence`).
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any, Iterable

from jupyterhub_gpu.cluster.conditions import condition
from jupyterhub_gpu.cluster.dcgm import PROF_METRIC, SHARED_DEVICE, UTIL_METRIC, device_of, pod_of
from jupyterhub_gpu.cluster.dcgm_nodes import node_range
from jupyterhub_gpu.cluster.dra_devices import chosen, claimed_devices, pod_claim_names
from jupyterhub_gpu.cluster.rules import Rule, rules_from_profiles
from jupyterhub_gpu.cluster.times import parse_time
from jupyterhub_gpu.cluster.workloads import admitted_at
from jupyterhub_gpu.contract import JOB_LABEL, PROFILE_LABEL, TEAM_LABEL, USER_ANNOTATION, USER_LABEL

#: KubeSpawner's annotation with the unescaped user name (servers carry no gpu-jobs annotations).
KUBESPAWNER_USER_ANNOTATION = "hub.jupyter.org/username"
#: DCGM's framebuffer use in MiB: the peak is the "peak GPU memory" of the report.
MEMORY_METRIC = "DCGM_FI_DEV_FB_USED"
GROUPINGS = ("user", "team", "profile", "job")


@dataclass(frozen=True)
class Lifetime:
    """One pod's hold on GPUs: what the report multiplies and sums. `end` None: still running."""

    uid: str
    kind: str  # "server" or "job"
    namespace: str
    pod: str
    user: str
    team: str  # "" for servers: a server belongs to a user, not to a team's queue
    profile: str
    job: str  # "" for servers
    gpus: int
    hourly_cost: float
    start: datetime
    end: datetime | None = None
    node: str = ""
    spot: bool = False  # on a spot pool (the profiles file's `spot: true`; AKS taints its nodes)
    #: How it ended when not by its owner: SPOT_EVICTION, PREEMPTED, EVICTED; "" otherwise (or still running).
    ended_by: str = ""
    #: The DRA devices its claims were allocated, `driver/pool/device` joined by ", " (pool = node on the NVIDIA
    #: driver; `gpu-0` a whole GPU, `gpu-0-mig-3g40gb-9-0` a 3g.40gb slice): what a server with alternatives got.
    #: "" without DRA, or when its claims were not read (gone before the collector saw them).
    devices: str = ""

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["start"] = self.start.isoformat()
        d["end"] = self.end.isoformat() if self.end else None
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Lifetime":
        return cls(**{**d, "start": parse_time(d["start"]), "end": parse_time(d.get("end"))})

    def held_hours(self, since: datetime, until: datetime) -> float:
        """Device-hours held inside [since, until]."""
        lo, hi = max(self.start, since), min(self.end or until, until)
        return max((hi - lo).total_seconds(), 0.0) / 3600 * self.gpus


def _finished_at(pod: dict[str, Any]) -> datetime | None:
    """When the pod let go of its GPUs: its last container's end, else its deletion time."""
    st = pod.get("status") or {}
    ends = [parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            for cs in st.get("containerStatuses") or []]
    if st.get("phase") in ("Succeeded", "Failed") and any(ends):
        return max(e for e in ends if e)
    return parse_time(pod.get("metadata", {}).get("deletionTimestamp"))


#: How a pod's hold ended when not by its owner (`Lifetime.ended_by`).
SPOT_EVICTION, PREEMPTED, EVICTED = "spot-eviction", "preempted", "evicted"
#: Pod disruptions that mean its node went away or shut down: on a spot pool, that is the spot eviction
#: (AKS deletes the VM: the kubelet's graceful node shutdown, then the pod GC or the taint manager).
NODE_GONE = ("DeletionByPodGC", "DeletionByTaintManager", "TerminationByKubelet")
NODE_GONE_STATUS = ("Terminated", "Shutdown", "NodeShutdown", "NodeLost")


def interruption(pod: dict[str, Any], spot: bool) -> str:
    """How a pod was stopped from outside, from its DisruptionTarget condition and status reason: a
    preemption (the scheduler's, for a higher priority), a spot eviction (its spot node went away), another
    eviction (node pressure, a drain); "" when nothing says so."""
    st = pod.get("status") or {}
    c = condition(pod, "DisruptionTarget")
    reason = (c.get("reason") or "") if c and c.get("status") == "True" else ""
    if "Preempt" in reason or st.get("reason") == "Preempting":
        return PREEMPTED
    if reason in NODE_GONE or st.get("reason") in NODE_GONE_STATUS:
        return SPOT_EVICTION if spot else EVICTED
    if reason or st.get("reason") == "Evicted":
        return EVICTED
    return ""


def spot_profiles(cfg) -> frozenset[str]:
    """The slugs of the profiles whose pool is a spot pool."""
    return frozenset(p.slug for p in cfg.profiles if (pool := cfg.pool_of(p)) is not None and pool.spot)


def shared_profiles(rules: dict[str, Rule]) -> frozenset[str]:
    """The slugs whose pods share a device's DCGM series (time-slicing, MPS): their use is not their own."""
    return frozenset(slug for slug, r in rules.items() if r.is_gpu and r.attribution().source == SHARED_DEVICE)


def claimed_by(pod: dict[str, Any], claims: dict[str, dict[str, Any]]) -> str:
    """`Lifetime.devices` of a pod: the devices of its ResourceClaims among `claims` (name → claim, its namespace's)."""
    return ", ".join(k for name in pod_claim_names(pod) if name in claims for k in claimed_devices(claims[name]))


def held_and_price(pod: dict[str, Any], rule: Rule, claims: dict[str, dict[str, Any]]) -> tuple[int, float]:
    """(GPUs, $/h) of a pod: its profile's, or for a profile with alternatives the choice its claim was allocated
    (a 3g.40gb slice instead of a whole A100 is priced as the slice)."""
    got = next((i for name in pod_claim_names(pod) if name in claims and (i := chosen(claims[name])) is not None),
               None) if rule.choices else None
    return rule.choices[got] if got is not None and got < len(rule.choices) else (rule.gpus, rule.hourly_cost)


def lifetime_of(pod: dict[str, Any], rules: dict[str, Rule], teams: dict[str, str],
                now: datetime | None = None, spot: frozenset[str] = frozenset(),
                claims: dict[str, dict[str, Any]] | None = None) -> Lifetime | None:
    """A pod (API JSON) → its Lifetime, or None when it holds no GPU of a known profile or never started.
    `teams`: namespace → team name (a job's team); `now` closes nothing, it only bounds a bogus start;
    `spot`: the profiles on spot pools (`spot_profiles`); `claims`: its namespace's ResourceClaims by name."""
    meta, st = pod.get("metadata") or {}, pod.get("status") or {}
    labels, ann = meta.get("labels") or {}, meta.get("annotations") or {}
    rule = rules.get(labels.get(PROFILE_LABEL, ""))
    start = parse_time(st.get("startTime"))
    if rule is None or not rule.gpus or start is None or (now and start > now):
        return None
    job = labels.get(JOB_LABEL, "")
    ns = meta.get("namespace", "")
    end, on_spot = _finished_at(pod), rule.profile in spot
    user = ann.get(USER_ANNOTATION) or ann.get(KUBESPAWNER_USER_ANNOTATION) or labels.get(USER_LABEL) or "?"
    gpus, price = held_and_price(pod, rule, claims or {})
    return Lifetime(uid=meta.get("uid") or f"{ns}/{meta.get('name')}", kind="job" if job else "server",
                    namespace=ns, pod=meta.get("name", ""), user=user,
                    team=(labels.get(TEAM_LABEL) or teams.get(ns, "")) if job else "", profile=rule.profile,
                    job=job, gpus=gpus, hourly_cost=price, start=start, end=end,
                    node=(pod.get("spec") or {}).get("nodeName") or "", spot=on_spot,
                    ended_by=interruption(pod, on_spot) if end else "", devices=claimed_by(pod, claims or {}))


def rules_and_teams(cfg) -> tuple[dict[str, Rule], dict[str, str]]:
    """The culler's per-profile rules (GPUs, $/h) and namespace → team, from a ProfilesConfig."""
    return rules_from_profiles(cfg), {t.namespace: name for name, t in cfg.teams.items()}


def fold_watched(open_: dict[str, Lifetime], watched: Iterable[Lifetime],
                 now: datetime) -> tuple[dict[str, Lifetime], dict[str, datetime]]:
    """The started pods the collector's watch saw since its last list, joined to the open lifetimes: a pod that
    started and went between two lists is then closed like one the list saw (`close_missing`). Also when each
    watched pod ended: its own end (a container's, else its deletion time), or `now` for one that was there at
    the watch and is gone from the list that followed it. A lifetime already finished is left as it is."""
    merged, ends = dict(open_), {}
    for lt in watched:
        prev = merged.get(lt.uid)
        if prev is not None and prev.end is not None:
            continue
        if prev is None:
            merged[lt.uid] = replace(lt, end=None)
        ends[lt.uid] = lt.end or now
    return merged, ends


def close_missing(open_: dict[str, Lifetime], live: Iterable[Lifetime], last_seen: datetime,
                  nodes: set[str] | None = None,
                  ends: dict[str, datetime] | None = None) -> tuple[dict[str, Lifetime], list[Lifetime]]:
    """One collection cycle: (what to remember, newly finished). A pod that vanished without an end time
    ends when the watch saw it end (`ends`, from `fold_watched`), else when it was last seen (at most one
    cycle late); if it ran on a spot node that is gone too (`nodes`: the names of the nodes there now), it was
    a spot eviction (the pod GC removes such pods within the cycle, before any condition could be read). A
    finished pod that is still listed (a Job's pod until its TTL) is finished once: it stays remembered, with
    its end, until it is gone. The devices read in an earlier cycle stay when its claim is gone by this one."""
    ends = ends or {}
    still, done = {}, []
    for lt in live:
        prev = open_.get(lt.uid)
        if prev is not None and prev.devices and not lt.devices:  # its claim went before the pod's last list
            lt = replace(lt, devices=prev.devices, gpus=prev.gpus, hourly_cost=prev.hourly_cost)
        if lt.end and not (prev and prev.end):
            done.append(lt)
        still[lt.uid] = lt
    for uid, lt in open_.items():
        if uid not in still and lt.end is None:
            gone = lt.spot and nodes is not None and lt.node and lt.node not in nodes
            done.append(replace(lt, end=ends.get(uid, last_seen),
                                ended_by=SPOT_EVICTION if gone else lt.ended_by))
    return still, done


# ------------------------------------------------------------------ DCGM: GPU-hours used


def used_query(window_s: int, step: float | None = None) -> str:
    """One instant query (at the end of the range): per device, the sum and count of activity samples over
    the window for both DCGM metrics, and the peak framebuffer use; tagged like the culler's evidence.
    With `step` (the scrape interval) the same parts again over series that name a node, not a pod (AKS's
    managed exporter), each sample given the only GPU pod on its node (cluster/dcgm_nodes.py)."""
    w = f"{int(window_s)}s"
    parts = [(f"sum_over_time({PROF_METRIC}[{w}])", "prof_sum"), (f"count_over_time({PROF_METRIC}[{w}])", "prof_count"),
             (f"sum_over_time({UTIL_METRIC}[{w}]) / 100", "util_sum"),
             (f"count_over_time({UTIL_METRIC}[{w}])", "util_count"),
             (f"max_over_time({MEMORY_METRIC}[{w}])", "mem_max")]
    if step:
        parts += [(node_range("sum_over_time", PROF_METRIC, window_s, step), "prof_sum"),
                  (node_range("count_over_time", PROF_METRIC, window_s, step), "prof_count"),
                  (node_range("sum_over_time", UTIL_METRIC, window_s, step) + " / 100", "util_sum"),
                  (node_range("count_over_time", UTIL_METRIC, window_s, step), "util_count"),
                  (node_range("max_over_time", MEMORY_METRIC, window_s, step), "mem_max")]
    return " or ".join(f'label_replace({e}, "gpuhub_stat", "{t}", "", "")' for e, t in parts)


@dataclass(frozen=True)
class PodUse:
    used_hours: float  # device-hours of activity (activity x time)
    peak_memory_mib: float | None


def parse_used(result: Iterable[dict[str, Any]], scrape_interval: float) -> dict[tuple[str, str], PodUse]:
    """`used_query`'s vector → (namespace, pod) → use. Per device: PROF_GR_ENGINE_ACTIVE when it has
    samples, else GPU_UTIL/100 (never on a MIG slice: it measures the whole GPU), as the culler reads them;
    each sample stands for one scrape interval."""
    stats: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    mig: dict[tuple[str, str, str], bool] = {}
    for series in result:
        labels = series.get("metric") or {}
        key, stat = pod_of(labels), labels.get("gpuhub_stat")
        if key is None or stat is None:
            continue
        try:
            value = float(series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if value != value:
            continue
        dev = device_of(labels)
        stats.setdefault(key, {}).setdefault(dev, {})[stat] = value
        mig[(*key, dev)] = labels.get("GPU_I_ID") not in (None, "")
    out = {}
    for key, devs in stats.items():
        used, mem = 0.0, []
        for dev, s in devs.items():
            if s.get("prof_count", 0) > 0:
                used += s.get("prof_sum", 0.0)
            elif s.get("util_count", 0) > 0 and not mig[(*key, dev)]:
                used += s.get("util_sum", 0.0)
            if "mem_max" in s:
                mem.append(s["mem_max"])
        out[key] = PodUse(used * scrape_interval / 3600, max(mem) if mem else None)
    return out


# ------------------------------------------------------------------ the report


@dataclass
class Row:
    key: str
    gpu_hours_held: float = 0.0
    gpu_hours_used: float = 0.0
    cost: float = 0.0
    pods: int = 0
    peak_memory_mib: float | None = None
    spot_evictions: int = 0
    preemptions: int = 0  # pods preempted by the scheduler (Kueue's preemptions of jobs: `evictions`)
    #: Hours held on shared devices (time-slicing, MPS), whose DCGM series are not the pods' own: not in `used`.
    gpu_hours_shared: float = 0.0
    use_known: bool = False  # DCGM use was read (Prometheus answered)

    @property
    def utilisation(self) -> float | None:
        """Used / the hours held on devices whose use is known, in %; None when there are none."""
        own = self.gpu_hours_held - self.gpu_hours_shared
        return 100 * self.gpu_hours_used / own if own > 1e-9 else None

    @property
    def evidence(self) -> str:
        """Which evidence `gpu_hours_used` and the peak memory come from ("" when no use was read)."""
        if not self.use_known or not self.gpu_hours_held:
            return ""
        if self.gpu_hours_shared <= 1e-9:
            return "DCGM, own devices"
        if self.gpu_hours_held - self.gpu_hours_shared <= 1e-9:
            return "not attributable: shared devices (time-sliced / MPS)"
        return f"DCGM, own devices; {self.gpu_hours_shared:.2f} GPU-h on shared devices not counted"

    def as_dict(self) -> dict[str, Any]:
        u = self.utilisation
        return {"key": self.key, "gpu_hours_held": round(self.gpu_hours_held, 4),
                "gpu_hours_used": round(self.gpu_hours_used, 4),
                "utilisation_pct": None if u is None else round(u, 1), "cost": round(self.cost, 2),
                "pods": self.pods, "peak_memory_mib": self.peak_memory_mib,
                "spot_evictions": self.spot_evictions, "preemptions": self.preemptions,
                "gpu_hours_shared": round(self.gpu_hours_shared, 4), "evidence": self.evidence}


def key_of(lt: Lifetime, by: str) -> str:
    if by not in GROUPINGS:
        raise ValueError(f"--by must be one of {', '.join(GROUPINGS)}, not {by!r}")
    if by == "team":
        return lt.team or "(servers)"
    if by == "job":
        return f"{lt.namespace}/{lt.job}" if lt.job else "(servers)"
    return getattr(lt, by)


def aggregate(lifetimes: Iterable[Lifetime], since: datetime, until: datetime, by: str,
              used: dict[tuple[str, str], PodUse] | None = None, shared: frozenset[str] = frozenset()) -> list[Row]:
    """Rows per `by` key, most $ first. `used` (from `parse_used` over the same range) is per pod name,
    which a restarted server reuses: a pod's use is split over its lifetimes by the hours each held.
    `shared` (`shared_profiles`): profiles whose pods' series are their device's, never counted as used."""
    lts = [lt for lt in lifetimes if lt.held_hours(since, until) > 0]
    held_per_pod: dict[tuple[str, str], float] = {}
    for lt in lts:
        k = (lt.namespace, lt.pod)
        held_per_pod[k] = held_per_pod.get(k, 0.0) + lt.held_hours(since, until)
    rows: dict[str, Row] = {}
    for lt in lts:
        held = lt.held_hours(since, until)
        row = rows.setdefault(key_of(lt, by), Row(key_of(lt, by), use_known=used is not None))
        row.gpu_hours_held += held
        row.cost += held / lt.gpus * lt.hourly_cost
        row.pods += 1
        if lt.end is not None and since <= lt.end <= until:  # counted in the range where it ended
            row.spot_evictions += lt.ended_by == SPOT_EVICTION
            row.preemptions += lt.ended_by == PREEMPTED
        if lt.profile in shared:
            row.gpu_hours_shared += held
            continue
        use = (used or {}).get((lt.namespace, lt.pod))
        if use is not None:
            row.gpu_hours_used += use.used_hours * held / held_per_pod[(lt.namespace, lt.pod)]
            if use.peak_memory_mib is not None:
                row.peak_memory_mib = max(row.peak_memory_mib or 0.0, use.peak_memory_mib)
    return sorted(rows.values(), key=lambda r: (-r.cost, -r.gpu_hours_held, r.key))


# ------------------------------------------------------------------ Kueue: waits and evictions


def queue_waits(workloads: Iterable[dict[str, Any]], since: datetime, until: datetime) -> list[float]:
    """Seconds from creation to quota reservation of the workloads admitted inside [since, until]."""
    out = []
    for wl in workloads:
        created, admitted = parse_time(wl.get("metadata", {}).get("creationTimestamp")), admitted_at(wl)
        if created and admitted and since <= admitted <= until:
            out.append(max((admitted - created).total_seconds(), 0.0))
    return out


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50 and p90 (linear interpolation between closest ranks); None for no values."""
    if not values:
        return {"p50": None, "p90": None, "count": 0}
    if len(values) == 1:
        return {"p50": values[0], "p90": values[0], "count": 1}
    q = statistics.quantiles(values, n=10, method="inclusive")
    return {"p50": statistics.median(values), "p90": q[8], "count": len(values)}


def evictions(workloads: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Workload evictions by reason (Kueue's counters: 'Preempted', 'PodsReadyTimeout', ...)."""
    out: dict[str, int] = {}
    for wl in workloads:
        stats = ((wl.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
        counted = 0
        for e in stats:
            out[e.get("reason") or "Unknown"] = out.get(e.get("reason") or "Unknown", 0) + int(e.get("count") or 0)
            counted += int(e.get("count") or 0)
        c = condition(wl, "Evicted")
        if not counted and c and c.get("status") == "True":
            out[c.get("reason") or "Unknown"] = out.get(c.get("reason") or "Unknown", 0) + 1
    return out
