"""JupyterHub configuration for jupyterhub-gpu.

`configure(c)` wires GPUSpawner, the `gpu-jobs` service (behind `%gpu_submit`) and the GPU-aware culler with
their least-privilege roles. The profiles file is named by $GPUHUB_PROFILES (default: the example shipped in
the package); a file with problems stops the hub with every problem listed. Services' settings come from
GPUHUB_* env vars or `configure(c, options={"gpu-jobs": {"storage-class": ..., "max-timeout": "3d"}})`
(`python -m gpu_spawner.services.jobs --help-all`, `python -m gpu_spawner.services.culler --help`).
"""
from gpu_spawner.config import configure

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)

configure(c)
