"""JupyterHub configuration for jupyterhub-gpu.

The profiles file is named by $GPUHUB_PROFILES (default: the example shipped in the package).
A file with problems stops the hub with every problem listed.
"""
from gpu_spawner.hubconfig import load_or_exit

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)

profiles_file, profiles = load_or_exit()

c.JupyterHub.spawner_class = "gpu_spawner.spawner.GPUSpawner"
c.GPUSpawner.profiles_file = profiles_file
# Servers are pods: give them time to be scheduled onto a (possibly scaling) GPU pool.
c.GPUSpawner.start_timeout = 600
c.GPUSpawner.http_timeout = 120
