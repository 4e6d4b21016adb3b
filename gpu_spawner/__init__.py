"""jupyterhub-gpu: the profile model, GPUSpawner, the gpu-jobs and culler services and the `gpuhub` CLI.

Importing the package is free: the kernel extension and the runner import only `gpu_spawner.contract`.
"""
from importlib import import_module

_EXPORTS = {
    "Pool": "gpu_spawner.model.profiles", "Profile": "gpu_spawner.model.profiles",
    "ProfilesConfig": "gpu_spawner.model.profiles", "Team": "gpu_spawner.model.profiles",
    "load_profiles": "gpu_spawner.model.profiles",
    "Problem": "gpu_spawner.model.validation", "ProfilesError": "gpu_spawner.model.validation",
    "parse_profiles": "gpu_spawner.model.validation", "parse_profiles_text": "gpu_spawner.model.validation",
    "GPUSpawner": "gpu_spawner.hub.spawner",
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(name)
