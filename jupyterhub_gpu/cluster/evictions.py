"""Why Kueue stopped a pod (pure), read from the pod itself.

Kueue gives no advance notice: when it evicts the Workload of a pod-integration pod (a preemption, a stopped
queue, a deleted Workload) its pod controller writes a `TerminationTarget` condition on the pod, reason
`WorkloadEvictedDueTo<Evicted reason>` (or `WorkloadDeleted`, `NotAdmitted`, ...), and its own message, then deletes
the pod with the pod's grace period (Kueue v0.19 pkg/controller/jobs/pod: `Pod.Stop`; the message of a preemption
is "Preempted to accommodate a workload (UID: …) due to prioritization in the ClusterQueue; …"). The condition is
on every update of the pod from then on, its final DELETED event included.
"""
from __future__ import annotations

from dataclasses import dataclass

from jupyterhub_gpu.cluster.conditions import condition
from jupyterhub_gpu.contract import KUEUE_TERMINATION_TARGET

PREEMPTED = "WorkloadEvictedDueToPreempted"
#: Kueue's words for why a workload was preempted (its HumanReadablePreemptionReasons) → who took the quota.
_BY = (("prioritization in the ClusterQueue", "team"), ("reclamation within the cohort", "cohort"),
       ("Fair Sharing within the cohort", "cohort"))


@dataclass(frozen=True)
class KueueStop:
    """Kueue's reason and message for stopping a pod."""

    reason: str
    message: str

    @property
    def preempted(self) -> bool:
        return self.reason == PREEMPTED

    @property
    def by(self) -> str | None:
        """Who took the quota: "team" (a higher-priority workload of the same ClusterQueue), "cohort" (another team
        reclaiming what this one borrowed), or None when Kueue did not say."""
        return next((who for words, who in _BY if words in self.message), None) if self.preempted else None


def kueue_stop(pod: dict | None) -> KueueStop | None:
    """Kueue's stop of this pod, if it stopped it."""
    c = condition(pod, KUEUE_TERMINATION_TARGET)
    if not c or c.get("status") != "True" or not c.get("reason"):
        return None
    return KueueStop(str(c["reason"])[:200], str(c.get("message") or "")[:1000])
