"""jupyterhub-gpu, hub side: the profile model, GPUSpawner and the `gpuhub` CLI."""
from gpu_spawner.model.profiles import Pool, Profile, ProfilesConfig, Team, load_profiles
from gpu_spawner.model.validation import Problem, ProfilesError, parse_profiles, parse_profiles_text

__all__ = [
    "Pool", "Profile", "ProfilesConfig", "Team", "load_profiles",
    "Problem", "ProfilesError", "parse_profiles", "parse_profiles_text", "GPUSpawner",
]


def __getattr__(name):
    # GPUSpawner imports KubeSpawner (and JupyterHub); keep `import gpu_spawner` light for the CLI.
    if name == "GPUSpawner":
        from gpu_spawner.hub.spawner import GPUSpawner

        return GPUSpawner
    raise AttributeError(name)
