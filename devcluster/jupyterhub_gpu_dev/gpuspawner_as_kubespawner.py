"""pytest plugin: KubeSpawner's own test suite with `GPUSpawner` in place of `KubeSpawner`.

Loaded with `-p jupyterhub_gpu_dev.gpuspawner_as_kubespawner` by kubespawner_compat.py beside it. It swaps the
class before KubeSpawner's test modules import it, and runs with no profiles file, so that GPUSpawner must behave
exactly like a plain KubeSpawner.
"""
import os

os.environ.pop("GPUHUB_PROFILES", None)

import kubespawner  # noqa: E402
import kubespawner.spawner  # noqa: E402

from jupyterhub_gpu.hub.spawner import GPUSpawner  # noqa: E402

kubespawner.KubeSpawner = GPUSpawner
kubespawner.spawner.KubeSpawner = GPUSpawner


def pytest_report_header(config):
    return f"kubespawner.KubeSpawner is {GPUSpawner.__module__}.{GPUSpawner.__name__} (no profiles file)"
