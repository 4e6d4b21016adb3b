"""`python -m gpu_spawner.services.jobs`: the gpu-jobs service's settings, as traitlets with help text.

The hub starts it (`jobs_service.hub.configure`); an admin sets options in `jupyterhub_config.py`:

    configure_gpu_jobs(c, profiles_file, options={"storage-class": "azurefile-csi-retain",
                                                  "runner-image": "myregistry/jupyterhub-gpu/runner:0.1.0"})

Every option can also come from the environment (GPUHUB_* below), which is how deploy/values.yaml
sets them on the hub pod.
"""
from __future__ import annotations

import asyncio
import logging
import os

from traitlets import Bool, Int, Unicode, default
from traitlets.config import Application

from gpu_spawner.builders.hardening import MAX_EPHEMERAL_STORAGE, ephemeral_storage_bytes
from gpu_spawner.builders.jobs import JobSettings
from gpu_spawner.model.profiles import duration_seconds


class GPUJobs(Application):
    name = "gpu-jobs"
    description = "The gpu-jobs JupyterHub service behind %gpu_submit."

    profiles_file = Unicode(help="The profiles file (default $GPUHUB_PROFILES).").tag(config=True)
    url = Unicode(help="Listen URL (default $JUPYTERHUB_SERVICE_URL, which the hub sets).").tag(config=True)
    runner_image = Unicode(help="Image of the Job's runner container when a profile names no image of its own "
                                "($GPUHUB_RUNNER_IMAGE).").tag(config=True)
    storage_class = Unicode(help="StorageClass of the per-user ReadWriteMany checkpoint volume; empty: the "
                                 "cluster default. Use one with reclaimPolicy Retain, so checkpoints survive "
                                 "a deleted claim ($GPUHUB_JOBS_STORAGE_CLASS).").tag(config=True)
    storage_size = Unicode(JobSettings.storage_size, help="Size of each user's checkpoint volume.").tag(config=True)
    termination_grace = Unicode("10m", help="How long a stopped Job pod may take to checkpoint and save its "
                                            "output before it is killed (terminationGracePeriodSeconds).").tag(
        config=True)
    backoff_limit = Int(JobSettings.backoff_limit, help="Infrastructure failures (runner exit 4) a Job may retry; "
                                                        "preemptions and evictions do not count.").tag(config=True)
    default_timeout = Unicode("2h", help="A job's timeout when the user gives none.").tag(config=True)
    max_timeout = Unicode("7d", help="The longest timeout anyone may ask for (a profile's max_job_timeout "
                                     "can lower it).").tag(config=True)
    ephemeral_storage = Unicode(JobSettings.ephemeral_storage,
                                help="Scratch disk of each Job pod (request = limit: the writable layer, logs, "
                                     "non-memory emptyDirs); a pod that writes more is evicted instead of filling "
                                     f"the node's disk. At most {MAX_EPHEMERAL_STORAGE}.").tag(config=True)
    dev = Bool(False, help="DEV ONLY: Job pods are run by the dev node agent (SIMULATOR) ($GPUHUB_JOBS_DEV=1).").tag(
        config=True)
    dev_state = Unicode(help="DEV ONLY: the dev agent's state folder: pod logs, homes ($GPUHUB_DEV_STATE).").tag(
        config=True)

    aliases = {"profiles": "GPUJobs.profiles_file", "url": "GPUJobs.url", "runner-image": "GPUJobs.runner_image",
               "storage-class": "GPUJobs.storage_class", "storage-size": "GPUJobs.storage_size",
               "termination-grace": "GPUJobs.termination_grace", "backoff-limit": "GPUJobs.backoff_limit",
               "default-timeout": "GPUJobs.default_timeout", "max-timeout": "GPUJobs.max_timeout",
               "dev-state": "GPUJobs.dev_state", "ephemeral-storage": "GPUJobs.ephemeral_storage"}
    flags = {"dev": ({"GPUJobs": {"dev": True}}, dev.help)}

    @default("profiles_file")
    def _profiles_file(self):
        return os.environ.get("GPUHUB_PROFILES", "")

    @default("url")
    def _url(self):
        return os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101")

    @default("runner_image")
    def _runner_image(self):
        return os.environ.get("GPUHUB_RUNNER_IMAGE", JobSettings.runner_image)

    @default("storage_class")
    def _storage_class(self):
        return os.environ.get("GPUHUB_JOBS_STORAGE_CLASS", "")

    @default("dev")
    def _dev(self):
        return os.environ.get("GPUHUB_JOBS_DEV") == "1"

    @default("dev_state")
    def _dev_state(self):
        return os.environ.get("GPUHUB_DEV_STATE", "")

    def job_settings(self) -> JobSettings:
        """The Job builder's settings; a bad duration stops the service with the option's name."""
        seconds = {}
        for trait in ("termination_grace", "default_timeout", "max_timeout"):
            try:
                seconds[trait] = duration_seconds(getattr(self, trait))
            except ValueError as e:
                raise SystemExit(f"gpu-jobs: --{trait.replace('_', '-')}={getattr(self, trait)!r}: {e}") from None
        try:
            ephemeral_storage_bytes(self.ephemeral_storage)
        except ValueError as e:
            raise SystemExit(f"gpu-jobs: --ephemeral-storage: {e}") from None
        return JobSettings(runner_image=self.runner_image, storage_class=self.storage_class or None,
                           storage_size=self.storage_size, termination_grace_seconds=seconds["termination_grace"],
                           backoff_limit=self.backoff_limit, default_timeout=seconds["default_timeout"],
                           max_timeout=seconds["max_timeout"], ephemeral_storage=self.ephemeral_storage)

    def start(self) -> None:
        from gpu_spawner.services.jobs.app import serve

        logging.basicConfig(level=logging.INFO, format="[gpu-jobs %(levelname)1.1s %(asctime)s] %(message)s")
        asyncio.run(serve(self))


def main(argv: list[str] | None = None) -> int:
    app = GPUJobs()
    app.initialize(argv)
    app.start()
    return 0
