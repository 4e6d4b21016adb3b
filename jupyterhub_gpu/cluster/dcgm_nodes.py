"""DCGM series that name a node but no pod (pure): the query that gives each the pod it belongs to.

AKS's managed DCGM exporter (an AKS-managed GPU pool, model/gpu_stack.py) runs without the exporter's Kubernetes
pod mapping, and Azure Managed Prometheus's scrape of it keeps only `cluster`, `instance` (the node's name),
`gpu` and `job`: its series name a node and a GPU, never a pod. `node_range()` gives such a series the
namespace and pod of the one running GPU pod on its node (kube-state-metrics' `kube_pod_info`, the pod's phase
and its nvidia.com/gpu request), per step, so that `dcgm.pod_of` and everything after it read the result as
they read an operator exporter's series. The culler's evidence (services/culler/decide.py) and showback's GPU-hours
used (services/usage/accounting.py) add these parts to their queries.
"""
from __future__ import annotations

#: Where such a series names its node: Azure Managed Prometheus's scrape of AKS's managed exporter (job
#: `dcgm-exporter`) sets `instance` to the node's name and keeps only `cluster`, `instance`, `gpu` and `job`;
#: that exporter runs without its Kubernetes pod mapping, so no series of it names a pod.
NODE_LABEL = "instance"
#: kube-state-metrics' series of a container's nvidia.com/gpu request (its `resource` label writes `/` and `.`
#: as `_`); MIG slices (`nvidia_com_mig_*`) and shared GPUs (`nvidia_com_gpu_shared`) are not counted.
GPU_REQUESTS = 'kube_pod_container_resource_requests{resource="nvidia_com_gpu"}'


def _gpu_pods(pod_matchers: str) -> str:
    """Running pods that request whole GPUs (kube-state-metrics), one series each, its node in NODE_LABEL."""
    info = ",".join(filter(None, ['node!=""', pod_matchers]))
    pods = (f"max by (cluster, namespace, pod, node) (kube_pod_info{{{info}}})"
            ' and on (cluster, namespace, pod) (max by (cluster, namespace, pod) '
            '(kube_pod_status_phase{phase="Running"}) == 1)'
            f" and on (cluster, namespace, pod) (max by (cluster, namespace, pod) ({GPU_REQUESTS}) > 0)")
    return f'label_replace({pods}, "{NODE_LABEL}", "$1", "node", "(.+)")'


def sole_gpu_pods(pod_matchers: str = "") -> str:
    """The GPU pods that are the only running GPU pod on their node; `pod_matchers` (`pod="x",namespace="y"`)
    narrows which are kept, never the count of a node's GPU pods."""
    return (f"({_gpu_pods(pod_matchers)} and on (cluster, {NODE_LABEL}) "
            f"(count by (cluster, {NODE_LABEL}) ({_gpu_pods('')}) == 1))")


def _duration(seconds: float) -> str:
    return f"{max(int(round(seconds * 1000)), 1)}ms"


def node_range(func: str, metric: str, window: float, step: float, pod_matchers: str = "") -> str:
    """`func` (max_over_time, count_over_time, ...) over the window of `metric`'s series that name no pod, each
    step's sample given the namespace and pod of the only GPU pod running on its node at that step.

    Why only then: with one GPU pod on a node, every GPU of the node is that pod's; with two or more, which GPU
    is whose is not in the series, so theirs stay unknown (no series), never guessed. Evaluated per step (a
    subquery at `step`, the scrape interval): a pod that ended, or a second pod that came, changes the
    attribution from that step on. Needs kube-state-metrics in the same Prometheus (Azure Managed Prometheus
    scrapes it by default).
    """
    joined = (f'{metric}{{pod="",exported_pod=""}} * on (cluster, {NODE_LABEL}) group_left (namespace, pod) '
              f"{sole_gpu_pods(pod_matchers)}")
    return f"{func}(({joined})[{_duration(window)}:{_duration(step)}])"


def presence_query(window: float) -> str:
    """An instant query with a result (one number) only when some DCGM series in the window names no pod: the
    node parts, a subquery that joins kube-state-metrics at every step, are asked for only then, so a cluster
    whose exporters all label pods (the GPU operator's) pays nothing for them."""
    w = _duration(window)
    return " or ".join(f'count(last_over_time({m}{{pod="",exported_pod=""}}[{w}]))'
                       for m in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
