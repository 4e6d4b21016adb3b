"""`gpu-jobs`: the JupyterHub service behind `%gpu_submit` (submit, list, get, logs, cancel GPU Jobs).

Users reach it with their own hub token; it checks who is asking and what their groups allow, and
only then creates Kubernetes objects with the hub's (service's) credentials. Pure parts:
`status` (a Job + its Kueue Workload + pods → one status dict) and `submission` (a request → the
manifests, or a 4xx reason). `kube` and `app` are the thin async shells.
"""
from jupyterhub_gpu.contract import JOBS_SERVICE as SERVICE_NAME  # noqa: F401
