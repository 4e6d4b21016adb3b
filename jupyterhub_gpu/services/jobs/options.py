"""`python -m jupyterhub_gpu.services.jobs`: the gpu-jobs service's settings, as traitlets with help text
(with the notification service's it hosts: services/jobs/app.py `configured`).

The hub starts it (`jupyterhub_gpu.config.configure`, via services/jobs/hub.py); an admin sets options in
`jupyterhub_config.py`:

    configure(c, options={"gpu-jobs": {"home-claim": "gpuhub-home", "max-timeout": "3d",
                                       "runner-image": "myregistry/jupyterhub-gpu/runner:0.1.0"}})

Every option can also come from the environment (GPUHUB_* below), which is how deploy/values.yaml
sets them on the hub pod.
"""
from __future__ import annotations

import os

from traitlets import Dict, Int, Type, Unicode, default
from traitlets.config import Application

from jupyterhub_gpu.builders.hardening import MAX_EPHEMERAL_STORAGE, ephemeral_storage_bytes
from jupyterhub_gpu.builders.jobs import JobSettings
from jupyterhub_gpu.builders.storage import HomeStorage, StorageError, home_subpath
from jupyterhub_gpu.contract import JOBS_METRICS_PORT
from jupyterhub_gpu.model.profiles import duration_seconds
from jupyterhub_gpu.services.jobs.throughput_metrics import METRICS_TOKEN_ENV


class GPUJobs(Application):
    name = "gpu-jobs"
    description = "The gpu-jobs JupyterHub service behind %gpu_submit."

    profiles_file = Unicode(help="The profiles file (default $GPUHUB_PROFILES).").tag(config=True)
    url = Unicode(help="Listen URL (default $JUPYTERHUB_SERVICE_URL, which the hub sets).").tag(config=True)
    runner_image = Unicode(help="Image of the Job's runner container when a profile names no image of its own "
                                "($GPUHUB_RUNNER_IMAGE).").tag(config=True)
    home_claim = Unicode(HomeStorage.claim, help="The users' home share as a claim in each team namespace (bound to "
                                                 "a PersistentVolume on the share the servers mount; labelled "
                                                 "gpuhub.io/home-share=true; `gpuhub render storage`). A Job mounts "
                                                 "the user's folder of it, so its output lands in their home.").tag(
        config=True)
    home_subpath = Unicode(HomeStorage.subpath, help="A user's folder on the share: the same KubeSpawner template as "
                                                     "the servers' volume_mounts subPath (z2jh "
                                                     "singleuser.storage.static.subPath).").tag(config=True)
    home_mount_path = Unicode(HomeStorage.mount_path,
                              help="Where the home is mounted in a Job's pod: the same as in the servers (z2jh "
                                   "singleuser.storage.homeMountPath).").tag(config=True)
    home_slug_scheme = Unicode("safe", help="The hub's KubeSpawner.slug_scheme ('safe', KubeSpawner 7's default, "
                                            "or 'escape'): how {username} in home_subpath is spelled, so a Job "
                                            "mounts the folder the user's server mounts.").tag(config=True)
    pod_labels = Dict(help="Labels added to every Job's pod (e.g. for cost allocation, or a policy that selects "
                           "them).").tag(config=True)
    log_source_class = Type("jupyterhub_gpu.services.jobs.kube.PodLogs", klass=object,
                            help="Where job logs are read: a class (or its import path) built as cls(api=ApiClient, "
                                 "parent=this app) with an async fetch(namespace, pod, tail_lines, limit_bytes) "
                                 "that answers as the kubelet's log API does. Default: that API, through the API "
                                 "server.").tag(config=True)
    orphan_grace = Unicode("2m", help="A half-created submission (a notebook ConfigMap without its Job, or a Job "
                                      "without its ConfigMap) older than this is removed by the reconcile loop.").tag(
        config=True)
    termination_grace = Unicode("10m", help="How long a stopped Job pod may take to checkpoint and save its "
                                            "output before it is killed (terminationGracePeriodSeconds).").tag(
        config=True)
    backoff_limit = Int(JobSettings.backoff_limit, help="Infrastructure failures (runner exit 4) a Job may retry; "
                                                        "preemptions and evictions do not count.").tag(config=True)
    default_timeout = Unicode("2h", help="A job's timeout when the user gives none.").tag(config=True)
    max_jobs_per_user = Int(10, min=0, help="Unfinished jobs (queued or running) one user may have over all "
                                            "profiles; 0: no limit. Enforced per user under a lock, so parallel "
                                            "submissions cannot pass it together; a profile's max_per_user "
                                            "applies as well.").tag(config=True)
    submissions_in_flight = Int(2, min=1, help="Submissions of one user that may be in progress at once (their "
                                               "bodies read, checked, created); one more is answered 429 before "
                                               "its body is read, so a user's parallel requests cannot pile up "
                                               "big bodies in the service.").tag(config=True)
    lease_namespace = Unicode(help="Namespace of the per-user submit locks and the notification leader "
                                   "(coordination.k8s.io Leases shared by every replica); default $POD_NAMESPACE "
                                   "(deploy/gpu-jobs.yaml sets it). Neither: the locks stay in this process (a "
                                   "hub-managed service is one process).").tag(config=True)
    max_timeout = Unicode("7d", help="The longest timeout anyone may ask for (a profile's max_job_timeout "
                                     "can lower it).").tag(config=True)
    metrics_port = Int(0, min=0, max=65535, help="Serve running jobs' training throughput (the notebooks' "
                                                 "gpuhub.report()) for Prometheus on this port at /metrics; 0: off. "
                                                 "A port of its own: the series name users and jobs "
                                                 f"(deploy/gpu-jobs.yaml: {JOBS_METRICS_PORT}).").tag(config=True)
    metrics_token_file = Unicode(help="File whose first line is the bearer token Prometheus sends to the metrics "
                                      f"port (default ${METRICS_TOKEN_ENV}, which deploy/gpu-jobs.yaml takes from "
                                      "the Secret gpu-jobs-metrics-token); none: the port listens on loopback only, "
                                      "since its series name every user's jobs.").tag(config=True)
    metrics_interval = Unicode("30s", help="How often those series are refreshed (each refresh reads the log tail of "
                                           "every running job).").tag(config=True)
    ephemeral_storage = Unicode(JobSettings.ephemeral_storage,
                                help="Scratch disk of each Job pod (request = limit: the writable layer, logs, "
                                     "non-memory emptyDirs); a pod that writes more is evicted instead of filling "
                                     f"the node's disk. At most {MAX_EPHEMERAL_STORAGE}.").tag(config=True)

    aliases = {"profiles": "GPUJobs.profiles_file", "url": "GPUJobs.url", "runner-image": "GPUJobs.runner_image",
               "home-claim": "GPUJobs.home_claim", "home-subpath": "GPUJobs.home_subpath",
               "home-mount-path": "GPUJobs.home_mount_path", "home-slug-scheme": "GPUJobs.home_slug_scheme",
               "orphan-grace": "GPUJobs.orphan_grace",
               "termination-grace": "GPUJobs.termination_grace", "backoff-limit": "GPUJobs.backoff_limit",
               "default-timeout": "GPUJobs.default_timeout", "max-timeout": "GPUJobs.max_timeout",
               "ephemeral-storage": "GPUJobs.ephemeral_storage", "max-jobs-per-user": "GPUJobs.max_jobs_per_user",
               "submissions-in-flight": "GPUJobs.submissions_in_flight", "lease-namespace": "GPUJobs.lease_namespace",
               "metrics-port": "GPUJobs.metrics_port", "metrics-interval": "GPUJobs.metrics_interval",
               "metrics-token-file": "GPUJobs.metrics_token_file"}

    @default("profiles_file")
    def _profiles_file(self):
        return os.environ.get("GPUHUB_PROFILES", "")

    @default("url")
    def _url(self):
        return os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101")

    @default("runner_image")
    def _runner_image(self):
        return os.environ.get("GPUHUB_RUNNER_IMAGE", JobSettings.runner_image)

    def job_settings(self) -> JobSettings:
        """The Job builder's settings; a bad duration stops the service with the option's name."""
        seconds = {}
        for trait in ("termination_grace", "default_timeout", "max_timeout", "orphan_grace"):
            try:
                seconds[trait] = duration_seconds(getattr(self, trait))
            except ValueError as e:
                raise SystemExit(f"gpu-jobs: --{trait.replace('_', '-')}={getattr(self, trait)!r}: {e}") from None
        try:
            ephemeral_storage_bytes(self.ephemeral_storage)
        except ValueError as e:
            raise SystemExit(f"gpu-jobs: --ephemeral-storage: {e}") from None
        home = HomeStorage(claim=self.home_claim, subpath=self.home_subpath, mount_path=self.home_mount_path,
                           slug_scheme=self.home_slug_scheme)
        try:
            home_subpath(home.subpath, "someone", home.slug_scheme)
        except StorageError as e:
            raise SystemExit(f"gpu-jobs: --home-subpath / --home-slug-scheme: {e}") from None
        return JobSettings(runner_image=self.runner_image, home=home, pod_labels=dict(self.pod_labels),
                           termination_grace_seconds=seconds["termination_grace"],
                           backoff_limit=self.backoff_limit, default_timeout=seconds["default_timeout"],
                           max_timeout=seconds["max_timeout"], ephemeral_storage=self.ephemeral_storage)

    def orphan_grace_seconds(self) -> int:
        return duration_seconds(self.orphan_grace)

    def metrics_interval_seconds(self) -> int:
        try:
            return max(1, duration_seconds(self.metrics_interval))
        except ValueError as e:
            raise SystemExit(f"gpu-jobs: --metrics-interval={self.metrics_interval!r}: {e}") from None
