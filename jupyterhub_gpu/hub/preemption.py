"""Preemptible servers in the hub (GPUSpawner mixes `PreemptionMixin` in): their pod's grace period, and why a
server Kueue stopped is gone, kept for the home page.

Kueue gives no notice before it preempts: it marks the pod (cluster/evictions.py) and deletes it. So the notice
is the pod's own grace period: a preemptible server gets `preemption_grace_period` seconds between SIGTERM and
SIGKILL, and $GPUHUB_PREEMPTION_GRACE_S says so to the server, whose extension warns the open JupyterLab and
has it save (jupyterhub_gpu/singleuser/stopping.py). Afterwards the hub notices the pod gone (`poll`) and keeps Kueue's
reason, in plain words, as a "stopped" record in the spawner's state (wait_messages.failure_record), which the home page
shows with "Start it again" until the next start.

The pod may be gone by the time the hub polls (a server that saved quickly exits before the grace period ends):
`StopReasons`, a view of the hub's one pod watch, remembers Kueue's reason for every pod it stops.
"""
from __future__ import annotations

from collections import OrderedDict

from traitlets import Integer
from traitlets.config import LoggingConfigurable

from jupyterhub_gpu.cluster.evictions import KueueStop, kueue_stop
from jupyterhub_gpu.contract import ENV_PREEMPTION_GRACE, PREEMPTIBLE_LABEL
from jupyterhub_gpu.hub import wait_messages

#: What to do next, said in every preemption message.
NEXT = ("start it again (it waits in your team's queue until there is room), pick a profile that is not "
        "preemptible, or send the notebook to the GPU queue with %gpu_submit (it runs as a job, without your "
        "browser, and its output lands in your home folder)")


def stopped_message(stop: KueueStop, profile: str, grace_s: int | None) -> str:
    """Why Kueue stopped a running server, in plain words, with what to do next (pure)."""
    if not stop.preempted:
        return (f"Your '{profile}' server was stopped by your team's GPU queue (Kueue: {stop.reason}: "
                f"{stop.message[:300]}). What next: {NEXT}.")
    if stop.by == "cohort":
        why = ("another team took back GPUs your team had borrowed from it, and your server, a preemptible one, "
               "was using them")
    else:
        why = ("a training job of your team (or a teammate's server that is not preemptible) needed its GPU quota: "
               "the profile is preemptible, so its servers make room")
    saved = (f" An open JupyterLab was warned and saved its notebooks within the {grace_s} s grace period; what the "
             "kernels held (variables, outputs of running cells) is lost." if grace_s else "")
    return f"Your '{profile}' server was preempted: {why}.{saved} What next: {NEXT}."


class StopReasons:
    """Kueue's reason for each pod it stopped, by `namespace/name` (a view of the hub's pod informer: `replace`,
    `apply`), the newest `limit` kept; read once by the spawner whose pod it was."""

    def __init__(self, limit: int = 2000):
        self.limit, self.seen = limit, OrderedDict()

    def replace(self, items: list[dict]) -> None:
        for pod in items:
            self.apply("ADDED", pod)

    def apply(self, kind: str, pod: dict) -> None:  # noqa: ARG002 - a DELETED pod carries the condition too
        stop = kueue_stop(pod)
        if stop is None:
            return
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        self.seen.pop(key, None)
        self.seen[key] = stop
        while len(self.seen) > self.limit:
            self.seen.popitem(last=False)

    def pop(self, key: str) -> KueueStop | None:
        return self.seen.pop(key, None)


class PreemptionMixin(LoggingConfigurable):
    """Mixed in before KubeSpawner, after QueuedSpawnMixin (whose `_last_failure` record it writes)."""

    preemption_grace_period = Integer(
        60,
        min=5,
        config=True,
        help="""Seconds a server of a `preemptible` profile has between Kueue's preemption and its end (the pod's
        terminationGracePeriodSeconds): the open JupyterLab is warned at once and saves its notebooks meanwhile.
        Servers of other profiles keep Kubernetes' default.""",
    )

    #: Kueue's stops the hub's pod watch saw (GPUSpawner attaches it with its informers), shared by all spawners.
    stop_reasons: StopReasons | None = None
    _kueue_stop: KueueStop | None = None

    def _profile_of_server(self):
        """The running server's profile: the start's, else (after a hub restart) its saved options' own."""
        profile = getattr(self, "gpu_profile", None)
        if profile is None:
            profile = self.profiles.by_slug.get((self.user_options or {}).get("profile"))
        return profile

    def add_preemption_notice(self, pod) -> None:
        """A preemptible server's pod (PREEMPTIBLE_LABEL, set with its queue labels): the grace period, and its
        length in the server's env."""
        from kubernetes_asyncio.client import V1EnvVar

        if (pod.metadata.labels or {}).get(PREEMPTIBLE_LABEL) != "true":
            return
        pod.spec.termination_grace_period_seconds = self.preemption_grace_period
        container = pod.spec.containers[0]
        container.env = [*(container.env or []),
                         V1EnvVar(name=ENV_PREEMPTION_GRACE, value=str(self.preemption_grace_period))]

    def start(self):
        if self.stop_reasons is not None:  # a stop of an earlier pod of this name is history
            self.stop_reasons.pop(self._pod_key())
        self._kueue_stop = None
        return super().start()

    async def poll(self):
        """KubeSpawner's poll; when the server is found stopped and Kueue stopped it, its reason is kept."""
        status = await super().poll()
        if not getattr(self, "profiles_file", None):
            return status
        key = self._pod_key()
        pod = self.pod_reflector.pods.get(key) if self.pod_reflector else None
        self._kueue_stop = kueue_stop(pod) or self._kueue_stop  # seen while the pod is still terminating
        if status is None:
            return status
        stop = self._kueue_stop or (self.stop_reasons.pop(key) if self.stop_reasons is not None else None)
        if stop is not None:
            profile = self._profile_of_server()
            name = profile.display_name if profile else "GPU"
            grace = self.preemption_grace_period if profile is not None and profile.preemptible else None
            self.log.info("%s: Kueue stopped its server (%s: %s)", self._log_name, stop.reason, stop.message)
            self._last_failure = wait_messages.failure_record(stopped_message(stop, name, grace), name,
                                                              kind=wait_messages.STOPPED)
            self._kueue_stop = None
        return status
