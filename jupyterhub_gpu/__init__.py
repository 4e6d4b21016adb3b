"""jupyterhub-gpu: the profile model, GPUSpawner, the gpu-jobs and culler services and the `gpuhub` CLI.

Importing the package is free: the kernel extension and the runner import only `jupyterhub_gpu.contract`.
"""
from importlib import import_module

_EXPORTS = {
    "Pool": "jupyterhub_gpu.model.profiles", "Profile": "jupyterhub_gpu.model.profiles",
    "ProfilesConfig": "jupyterhub_gpu.model.profiles", "Team": "jupyterhub_gpu.model.profiles",
    "load_profiles": "jupyterhub_gpu.model.profiles",
    "Problem": "jupyterhub_gpu.model.validation", "ProfilesError": "jupyterhub_gpu.model.validation",
    "parse_profiles": "jupyterhub_gpu.model.validation", "parse_profiles_text": "jupyterhub_gpu.model.validation",
    "GPUSpawner": "jupyterhub_gpu.hub.spawner",
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(name)
