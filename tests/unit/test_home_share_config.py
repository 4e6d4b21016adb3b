"""The servers' and the Jobs' view of the home share agree: z2jh's values (what a real deployment sets),
the dev hub's KubeSpawner settings and gpu-jobs' defaults name the same claim, subPath and mount path."""
from __future__ import annotations

from pathlib import Path

import yaml

from jupyterhub_gpu.builders.jobs import JobSettings
from jupyterhub_gpu.builders.storage import spawner_settings
from jupyterhub_gpu.services.jobs.options import GPUJobs

ROOT = Path(__file__).resolve().parents[2]


def test_values_yaml_static_storage_is_what_jobs_mount():
    values = yaml.safe_load((ROOT / "deploy" / "values.yaml").read_text())
    storage = values["singleuser"]["storage"]
    app = GPUJobs()
    app.initialize([])
    home = app.job_settings().home
    assert storage["type"] == "static"
    assert (storage["static"]["pvcName"], storage["static"]["subPath"], storage["homeMountPath"]) == \
        (home.claim, home.subpath, home.mount_path) == ("gpuhub-home", "{username}", "/home/jovyan")
    # z2jh's static storage = these KubeSpawner settings; the dev hub applies exactly them
    assert spawner_settings(home) == {
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": storage["static"]["pvcName"]}}],
        "volume_mounts": [{"name": "home", "mountPath": storage["homeMountPath"],
                           "subPath": storage["static"]["subPath"]}],
        "storage_pvc_ensure": False}
    assert JobSettings().home == home
