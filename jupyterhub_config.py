"""JupyterHub configuration for jupyterhub-gpu.

`configure(c)` wires GPUSpawner, the `gpu-jobs` service (behind `%gpu_submit`) and the GPU-aware culler with
their least-privilege roles. The profiles file is named by $GPUHUB_PROFILES (required here; the example file
is for `gpuhub dev` and the docs); a file with problems, or a KubeSpawner `profile_list` set as well, stops the
hub with every problem listed. Services' settings come from
GPUHUB_* env vars or `configure(c, options={"gpu-jobs": {"home-claim": ..., "max-timeout": "3d"}})`
(`python -m jupyterhub_gpu.services.jobs --help-all`, `python -m jupyterhub_gpu.services.culler --help`).
"""
from jupyterhub_gpu.config import configure

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)

configure(c)
