"""JupyterHub configuration for jupyterhub-gpu.

The profiles file is named by $GPUHUB_PROFILES (default: the example shipped in the package).
A file with problems stops the hub with every problem listed.
"""
from gpu_spawner.config import load_or_exit

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)

profiles_file, profiles = load_or_exit()

c.JupyterHub.spawner_class = "gpu_spawner.hub.spawner.GPUSpawner"
c.GPUSpawner.profiles_file = profiles_file
# Servers are pods: give them time to be scheduled onto a (possibly scaling) GPU pool.
c.GPUSpawner.start_timeout = 600
c.GPUSpawner.http_timeout = 120

# The `gpu-jobs` hub service behind `%gpu_submit` (users reach it with their own hub token). Its settings
# (runner image, checkpoint storage class and size, grace period, timeouts) come from GPUHUB_* env vars or
# `options={"storage-class": ..., "max-timeout": "3d"}`; `python -m gpu_spawner.services.jobs --help-all`.
from gpu_spawner.services.jobs.hub import DEFAULT_PORT, configure as configure_gpu_jobs  # noqa: E402

configure_gpu_jobs(c, profiles_file, port=int(__import__("os").environ.get("GPUHUB_JOBS_PORT", DEFAULT_PORT)))

# Idle culling that understands GPUs (gpu_spawner/culler): a hub service with exactly the scopes it needs
# (list:users, read:users:activity, read:servers, delete:servers). Options from GPUHUB_CULLER_* env vars.
from gpu_spawner.services.culler import configure as configure_culler  # noqa: E402

configure_culler(c, profiles_file)
