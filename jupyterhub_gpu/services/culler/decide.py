"""Pure culling decisions: the per-profile rule a server falls under (cluster/rules.py), DCGM evidence from
Prometheus results (its series read by cluster/dcgm.py), one decision per server.

No I/O here. The service (`service.py`) fetches the hub's server models (through jupyterhub-idle-culler's
loop) and Prometheus results, and calls these functions; everything they decide is unit-tested.

Policies (`gpu_idle_policy`), for GPU servers when GPU evidence is available:
  activity  the classic rule: idle when no activity for the profile's `idle_timeout`; GPU metrics ignored.
  gpu       the GPU decides: idle when the GPU stayed below the threshold for the whole window (the profile's
            `idle_timeout` unless a window is configured), even if the kernel is busy; a busy GPU keeps it.
  both      conservative: idle only when there is no activity AND the GPU stayed idle.
Missing evidence never culls: no Prometheus, no series for the pod or too few samples in the window
(`coverage`) → the activity rule decides, and the decision says which fallback applied.
Only samples from after the server's `started` count (a restarted server has its predecessor's pod name,
so the same DCGM series): a server younger than the window is never GPU-idle (`lookback`).
A full GPU is busy when EITHER metric says so; a MIG slice has only the profiling metric.
On a time-sliced or MPS pool DCGM reports the shared device's use for every pod on it (cluster/dcgm.py
`attribution`): it is never one server's evidence, so GPU policies judge such servers by activity alone
(fallback `gpu-shared`), whatever the device shows, and Prometheus is not asked about them.
Every decision carries `why`: the evidence it used, in words ("kernel idle 45 min (limit 30 min); GPU
utilisation not used: time-sliced T4 shared with up to 3 other pods").
Timestamps from the future (a server with a fast clock) count as "now", never as negative idleness.
CPU servers always use the activity rule. `max_age` stops a server whatever its activity.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Iterable, Literal

from jupyterhub_gpu.cluster.dcgm import PROF_METRIC, SHARED_DEVICE, UTIL_METRIC, device_of, pod_of
from jupyterhub_gpu.cluster.dcgm_nodes import node_range
from jupyterhub_gpu.cluster.rules import Rule
from jupyterhub_gpu.cluster.times import parse_time

Policy = Literal["activity", "gpu", "both"]
POLICIES = ("activity", "gpu", "both")

#: DCGM reports ~0.01 of activity on an idle GPU; 0.05 is safely above that noise floor.
DEFAULT_THRESHOLD = 0.05


# ---------------------------------------------------------------- rules


def profile_of(server: dict[str, Any]) -> str | None:
    """The profile slug the server was started with (`user_options['profile']`), if any."""
    opts = server.get("user_options") or {}
    slug = opts.get("profile")
    return slug if isinstance(slug, str) and slug else None


def rule_for(server: dict[str, Any], rules: dict[str, Rule], default: Rule) -> Rule:
    slug = profile_of(server)
    return rules.get(slug, default) if slug else default


def server_names(server: dict[str, Any]) -> tuple[str, str]:
    """(user, server name) from the server model's `full_name` ('user/' for a default server)."""
    full = server.get("full_name") or ""
    user, _, name = full.partition("/")
    return user, name if "/" in full else server.get("name", "")


# ---------------------------------------------------------------- pod names


def pod_name(user: str, server_name: str, template: str = "jupyter-{user_server}") -> str:
    """The pod KubeSpawner 7 names for this server (its default 'safe' slug scheme)."""
    from kubespawner.slugs import escape_slug, multi_slug, safe_slug

    max_len = 48
    safe_user = safe_slug(user, max_length=max_len)
    safe_server = safe_slug(server_name, max_length=max_len) if server_name else ""
    if len(safe_user) + len(safe_server) + 2 > max_len:
        user_server = multi_slug([user, server_name], max_length=max_len)
    elif server_name:
        user_server = f"{safe_user}--{safe_server}"
    else:
        user_server = safe_user
    esc_user, esc_server = escape_slug(user), escape_slug(server_name)
    ns = dict(username=safe_user, servername=safe_server, user_server=user_server,
              safe_username=safe_user, safe_servername=safe_server, safe_user_server=user_server,
              unescaped_username=user, unescaped_servername=server_name,
              escaped_username=esc_user, escaped_servername=esc_server,
              escaped_user_server=f"{esc_user}--{esc_server}")
    rendered = template.format(**ns)
    return rendered if template.endswith("-") else rendered.rstrip("-")


# ---------------------------------------------------------------- GPU evidence


def evidence_query(window: int, selector: str = "", step: float | None = None, pod_matchers: str = "") -> str:
    """One PromQL instant query: max and sample count over the window for both DCGM metrics.

    Each part is tagged with a `gpuhub_stat` label so `or` keeps all four and Python can tell them apart.
    `selector` (`{pod="..."}`) narrows it to one pod's series. With `step` (the scrape interval) the same four
    parts again over series that name a node but no pod (AKS's managed exporter), each sample given the only
    GPU pod on its node (cluster/dcgm_nodes.py); `pod_matchers` narrows those to one pod.
    """
    w = f"{int(window)}s"
    prof, util = PROF_METRIC + selector, UTIL_METRIC + selector
    parts = [
        (f"max_over_time({prof}[{w}])", "prof_max"),
        (f"count_over_time({prof}[{w}])", "prof_count"),
        (f"max_over_time({util}[{w}]) / 100", "util_max"),
        (f"count_over_time({util}[{w}])", "util_count"),
    ]
    return _tagged(parts + (_node_parts(window, step, pod_matchers) if step else []))


def _node_parts(window: int, step: float, pod_matchers: str = "") -> list[tuple[str, str]]:
    """`evidence_query`'s four parts over the series that name a node, not a pod (cluster/dcgm_nodes.py)."""
    return [(node_range("max_over_time", PROF_METRIC, window, step, pod_matchers), "prof_max"),
            (node_range("count_over_time", PROF_METRIC, window, step, pod_matchers), "prof_count"),
            (node_range("max_over_time", UTIL_METRIC, window, step, pod_matchers) + " / 100", "util_max"),
            (node_range("count_over_time", UTIL_METRIC, window, step, pod_matchers), "util_count")]


def _tagged(parts: list[tuple[str, str]]) -> str:
    return " or ".join(f'label_replace({expr}, "gpuhub_stat", "{tag}", "", "")' for expr, tag in parts)


def _promql_string(value: str) -> str:
    """A PromQL string literal (Go escapes, which JSON's are a subset of): pod names come from user names."""
    return json.dumps(value)


def pod_evidence_query(window: int, pod: str, namespace: str | None, step: float | None = None) -> str:
    """`evidence_query` for one pod, matched as `dcgm.pod_of` does: `exported_pod`, else `pod`; with `step`,
    also the node-named series of its node while it is the only GPU pod there (kube-state-metrics' labels)."""
    parts = []
    for pod_label, ns_label in (("exported_pod", "exported_namespace"), ("pod", "namespace")):
        matchers = [f"{pod_label}={_promql_string(pod)}"]
        if namespace is not None:
            matchers.append(f"{ns_label}={_promql_string(namespace)}")
        parts.append(evidence_query(window, "{" + ",".join(matchers) + "}"))
    if step:
        own = ",".join([f"pod={_promql_string(pod)}"] + ([f"namespace={_promql_string(namespace)}"]
                                                          if namespace is not None else []))
        parts.append(_tagged(_node_parts(window, step, own)))
    return " or ".join(parts)


def lookback(window: int, started: datetime | None, now: datetime, scrape_interval: float) -> int:
    """Seconds of GPU samples that belong to this server: the window, or less for a younger server.

    The DCGM exporter labels samples with the pod's name, which a restarted server reuses, so samples from
    before `started` are its predecessor's. One scrape interval more is left out: the exporter may still
    report the old pod's GPU for a moment after it is gone. 0: no sample is surely this server's.
    """
    if started is None:
        return 0
    usable = (now - started).total_seconds() - scrape_interval
    return int(window) if usable >= window else max(int(usable), 0)


@dataclass(frozen=True)
class GPUEvidence:
    """What DCGM says about one pod's GPUs over one window."""

    namespace: str
    pod: str
    max_activity: float  # the highest activity (0..1) any of its GPUs / MIG instances showed
    samples: int  # the fewest samples any of its devices has in the window
    metric: str  # PROF_METRIC, UTIL_METRIC, or "mixed"
    devices: tuple[str, ...] = ()  # 'gpu0', 'gpu0/mig1(1g.10gb)', ...

    def state(self, threshold: float, expected_samples: int, min_coverage: float = 0.8) -> str:
        """'busy' (any sample at/above the threshold), 'idle' (all below, window covered) or 'unknown'."""
        if self.samples <= 0:
            return "unknown"
        if self.max_activity >= threshold:
            return "busy"
        if self.samples >= max(1, int(expected_samples * min_coverage)):
            return "idle"
        return "unknown"


def parse_evidence(result: Iterable[dict[str, Any]]) -> dict[tuple[str, str], GPUEvidence]:
    """Prometheus vector result of `evidence_query` → evidence per (namespace, pod).

    Per device: a full GPU is as busy as the busier of PROF_GR_ENGINE_ACTIVE and GPU_UTIL/100 (either
    one seeing work is work: the profiling metric can read ~0 while GPU_UTIL shows kernels running) and
    as well covered as the better-covered one. On MIG instances GPU_UTIL is ignored: it measures the
    whole GPU, not the slice. A pod with several devices is as busy as its busiest one and as well
    covered as its worst-covered one.
    """
    devices: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    mig: dict[tuple[str, str], dict[str, bool]] = {}
    for series in result:
        labels = series.get("metric") or {}
        stat = labels.get("gpuhub_stat")
        key = pod_of(labels)
        if key is None or stat is None:
            continue
        try:
            value = float(series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if value != value:  # NaN
            continue
        dev = device_of(labels)
        devices.setdefault(key, {}).setdefault(dev, {})[stat] = value
        mig.setdefault(key, {})[dev] = labels.get("GPU_I_ID") not in (None, "")
    out = {}
    for key, devs in devices.items():
        maxes, counts, metrics = [], [], set()
        for dev, stats in devs.items():
            seen = [(stats[f"{m}_max"], int(stats[f"{m}_count"]), metric)
                    for m, metric in (("prof", PROF_METRIC), ("util", UTIL_METRIC))
                    if stats.get(f"{m}_count", 0) > 0 and f"{m}_max" in stats
                    and not (m == "util" and mig[key][dev])]
            if not seen:
                continue
            top = max(seen, key=lambda s: s[0])  # ties: PROF (listed first)
            maxes.append(top[0])
            counts.append(max(s[1] for s in seen))
            metrics.add(top[2])
        if not maxes:
            continue
        metric = metrics.pop() if len(metrics) == 1 else "mixed"
        out[key] = GPUEvidence(namespace=key[0], pod=key[1], max_activity=max(maxes), samples=min(counts),
                               metric=metric, devices=tuple(sorted(devs)))
    return out


def lookup_evidence(evidence: dict[tuple[str, str], GPUEvidence], pod: str,
                    namespace: str | None) -> GPUEvidence | None:
    if namespace is not None:
        return evidence.get((namespace, pod))
    return next((e for (ns, p), e in evidence.items() if p == pod), None)


# ---------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Settings:
    policy: Policy = "activity"
    threshold: float = DEFAULT_THRESHOLD
    min_coverage: float = 0.8
    scrape_interval: float = 15.0
    gpu_window: int | None = None  # None: the profile's idle_timeout
    warn_before: int = 600
    exempt_admins: bool = False

    def window(self, rule: Rule) -> int | None:
        return self.gpu_window or rule.idle_timeout

    def expected_samples(self, window: int) -> int:
        return int(window / self.scrape_interval)


@dataclass(frozen=True)
class GPUView:
    """The GPU evidence available for one server this cycle.

    `prometheus` False: no Prometheus configured; `reachable` False: it did not answer this cycle.
    `now` is the evidence over the cull window, `soon` over the window shortened by `warn_before`.
    """

    prometheus: bool = False
    reachable: bool = True
    now: GPUEvidence | None = None
    soon: GPUEvidence | None = None


@dataclass(frozen=True)
class Decision:
    action: Literal["keep", "warn", "cull"]
    reason: str  # cull: idle | gpu-idle | idle+gpu-idle | max-age ; keep/warn: why
    profile: str
    inactive_s: float | None
    age_s: float | None
    cull_in_s: float | None = None  # for warn: seconds until the server is expected to be stopped
    gpu_state: str | None = None  # busy | idle | unknown (None: not looked at)
    fallback: str | None = None  # why the activity rule decided for a GPU server under a GPU policy
    evidence: dict[str, Any] | None = None
    future_s: float | None = None  # how far in the future the server's last_activity / started was
    why: str | None = None  # the evidence used, in words (`explain`)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_log(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in _DECISION_FIELDS}
        return {k: v for k, v in {**d, **self.extra}.items() if v is not None}


_DECISION_FIELDS = [f for f in Decision.__dataclass_fields__ if f != "extra"]


def _seconds(now: datetime, then: datetime | None) -> float | None:
    return None if then is None else (now - then).total_seconds()


def admin_flag(user_model: Any) -> bool | None:
    """The `admin` field of a hub user model; None when the answer does not carry it (scope too narrow)."""
    if isinstance(user_model, dict) and isinstance(user_model.get("admin"), bool):
        return user_model["admin"]
    return None


def gpu_shared(rule: Rule) -> bool:
    """Are the DCGM series of this rule's servers their shared device's, not their own (time-slicing, MPS)?"""
    return rule.is_gpu and rule.attribution().source == SHARED_DEVICE


def decide(server: dict[str, Any], rule: Rule, settings: Settings, now: datetime,
           gpu: GPUView = GPUView(), admin: bool = False, activity_seen: datetime | None = None) -> Decision:
    """Keep, warn or cull one ready server, with the evidence it used in words (`Decision.why`)."""
    d = _decide(server, rule, settings, now, gpu, admin, activity_seen)
    return replace(d, why=explain(d, rule, settings))


def _decide(server: dict[str, Any], rule: Rule, settings: Settings, now: datetime,
            gpu: GPUView, admin: bool, activity_seen: datetime | None) -> Decision:
    """Keep, warn or cull one ready server, and why. Pure: `now` and the evidence are inputs.

    A last_activity or started in the future is not trusted: inactivity would go negative and the hub
    (which only moves last_activity forward) would keep it there. Activity from the future counts as of
    `activity_seen`, when the culler first saw that value (default: now); `future_s` records the skew.
    """
    started = parse_time(server.get("started"))
    last = parse_time(server.get("last_activity"))
    future = max((t - now).total_seconds() for t in (started, last, now) if t is not None)
    if started is not None and started > now:
        started = now
    if last is not None and last > now:
        last = min(activity_seen or now, now)
    age = _seconds(now, started)
    inactive = _seconds(now, last) if last else age
    base = dict(profile=rule.profile, inactive_s=inactive, age_s=age, future_s=future or None)

    if admin and settings.exempt_admins:
        return Decision("keep", "admin-exempt", **base)

    # max_age: whatever the activity.
    if rule.max_age and age is not None and age >= rule.max_age:
        return Decision("cull", "max-age", **base)

    gpu_state = gpu_soon = None
    fallback = None
    evidence = None
    use_gpu = rule.is_gpu and settings.policy != "activity"
    if use_gpu:
        window = settings.window(rule)
        if gpu_shared(rule):  # the device's series, not this server's: never evidence either way
            fallback = "gpu-shared"
        elif not gpu.prometheus:
            fallback = "no-prometheus"
        elif not gpu.reachable:
            fallback = "prometheus-unreachable"
        elif window is None:
            fallback = "no-window"
        elif gpu.now is None:
            fallback = "no-gpu-series"
        else:
            gpu_state = gpu.now.state(settings.threshold, settings.expected_samples(window), settings.min_coverage)
            if gpu_state != "busy" and _young(age, window, settings):  # its own samples cannot span the window
                gpu_state, fallback = "unknown", "younger-than-gpu-window"
            evidence = {"max_activity": gpu.now.max_activity, "samples": gpu.now.samples,
                        "expected_samples": settings.expected_samples(window), "metric": gpu.now.metric,
                        "window_s": window, "threshold": settings.threshold, "pod": gpu.now.pod,
                        "namespace": gpu.now.namespace, "devices": list(gpu.now.devices)}
            if gpu_state == "unknown" and fallback is None:
                fallback = "short-gpu-coverage"
            soon_window = max(window - settings.warn_before, 1)
            if gpu.soon is not None:
                gpu_soon = gpu.soon.state(settings.threshold, settings.expected_samples(soon_window),
                                          settings.min_coverage)
                if gpu_soon == "idle" and _young(age, soon_window, settings):
                    gpu_soon = "unknown"
    base.update(gpu_state=gpu_state, fallback=fallback, evidence=evidence)

    idle_limit = rule.idle_timeout
    activity_idle = idle_limit is not None and inactive is not None and inactive >= idle_limit
    activity_left = (idle_limit - inactive) if (idle_limit is not None and inactive is not None) else None

    if use_gpu and gpu_state in ("idle", "busy"):
        # The GPU looked idle over the window shortened by warn_before: a cull is about warn_before away.
        gpu_left = float(settings.warn_before) if gpu_soon == "idle" else None
        if settings.policy == "gpu":
            if gpu_state == "idle":
                return Decision("cull", "gpu-idle", **base)
            reason, left = "gpu-busy", gpu_left
        elif gpu_state == "idle":  # both: the GPU agrees, activity decides
            if activity_idle:
                return Decision("cull", "idle+gpu-idle", **base)
            reason, left = "active", activity_left
        else:  # both, GPU busy
            reason = "gpu-busy"
            left = None if gpu_left is None or activity_left is None else max(gpu_left, activity_left)
    else:
        if activity_idle:
            return Decision("cull", "idle", **base)
        if inactive is None:
            reason, left = "no-activity-data", None
        elif idle_limit is None:
            reason, left = "no-idle-timeout", None
        else:
            reason, left = "active", activity_left

    # Warn when either limit is within warn_before.
    age_left = (rule.max_age - age) if (rule.max_age and age is not None) else None
    candidates = [(t, r) for t, r in ((left, "idle"), (age_left, "max-age")) if t is not None]
    if candidates:
        t, why = min(candidates)
        if 0 < t <= settings.warn_before:
            return Decision("warn", f"{why}-soon", cull_in_s=t, **base)
    return Decision("keep", reason, **base)


def _duration(seconds: float) -> str:
    s = max(seconds, 0.0)
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def explain(d: Decision, rule: Rule, settings: Settings) -> str:
    """The evidence a decision used, in words: the kernel's activity, the age, and what DCGM said or why it
    was not used (a shared device, missing series, the activity policy). Bounded: no user input in it."""
    if d.reason == "admin-exempt":
        return "admin: exempt from culling"
    parts = []
    if d.reason in ("max-age", "max-age-soon") and d.age_s is not None and rule.max_age:
        parts.append(f"age {_duration(d.age_s)} (max_age {_duration(rule.max_age)})")
    if d.inactive_s is None:
        parts.append("no kernel activity reported")
    else:
        limit = f" (limit {_duration(rule.idle_timeout)})" if rule.idle_timeout else " (no idle_timeout)"
        parts.append(f"kernel idle {_duration(d.inactive_s)}{limit}")
    if rule.is_gpu:
        if gpu_shared(rule):
            parts.append(rule.attribution().note)
        elif settings.policy == "activity":
            parts.append("GPU not used (gpu_idle_policy: activity)")
        elif d.gpu_state in ("idle", "busy") and d.evidence:
            e = d.evidence
            own = rule.attribution(tuple(e["devices"])).note
            parts.append(f"GPU {d.gpu_state}: at most {100 * e['max_activity']:.0f} % over "
                         f"{_duration(e['window_s'])} (threshold {100 * e['threshold']:.0f} %; {own})")
        elif d.fallback:
            parts.append(f"GPU evidence not used: {d.fallback}")
    return "; ".join(parts)


def _young(age: float | None, window: int, settings: Settings) -> bool:
    """Too young for GPU evidence over `window` to be only its own (see `lookback`)."""
    return age is None or age < window + settings.scrape_interval


def reclaimed(rule: Rule, decision: Decision, horizon_s: float) -> tuple[float, float, float]:
    """Estimates for one cull: (GPU-hours reclaimed, $ reclaimed, idle GPU-hours it had held).

    Reclaimed = what the server would otherwise still have held: until its max_age when it has one,
    else `horizon_s`, whichever is sooner. Idle GPU-hours = GPUs x the time it sat idle before the cull.
    """
    if decision.action != "cull":
        return 0.0, 0.0, 0.0
    remaining = horizon_s
    if rule.max_age and decision.age_s is not None:
        remaining = min(remaining, max(rule.max_age - decision.age_s, 0.0))
    hours = remaining / 3600
    idle_hours = max(decision.inactive_s or 0.0, 0.0) / 3600 if decision.reason != "max-age" else 0.0
    return rule.gpus * hours, rule.hourly_cost * hours, rule.gpus * idle_hours
