"""The admin's profiles file on disk: where it is, how it is read (the model's only I/O), and one parsed
model per file version, shared by every spawner of the hub and by the services (which must not import the
spawner, and KubeSpawner with it).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from jupyterhub_gpu.contract import ENV_PROFILES
from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.model.validation import Problem, ProfilesError, parse_profiles_text

#: The bundled example: for `gpuhub dev`, the tests and the docs only (never a default for a real hub).
EXAMPLE_PROFILES = Path(__file__).resolve().parents[1] / "examples" / "profiles.yaml"
PROFILES_ENV = ENV_PROFILES

_loaded: dict[tuple[str, float], ProfilesConfig] = {}
_recent: dict[str, tuple[float, ProfilesConfig]] = {}
#: How often a spawner looks at the profiles file's mtime (spawns come in bursts; stat once, not per call).
RECHECK_SECONDS = 2.0


def load_profiles(path: str | Path) -> ProfilesConfig:
    """Read and validate a profiles file; raises `ProfilesError` listing every problem."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ProfilesError([Problem("", f"cannot read profiles file {str(path)!r}: {e.strerror}")],
                            str(path)) from None
    return parse_profiles_text(text, source=str(path))


def profiles_path() -> Path | None:
    """The file named by $GPUHUB_PROFILES, else None. Never the example file: a real hub without a
    profiles file is a plain KubeSpawner hub, not one offering demo profiles on demo pools (`gpuhub dev`
    and the tests name their file explicitly)."""
    value = os.environ.get(PROFILES_ENV)
    return Path(value) if value else None


def cached_profiles(path: str | Path) -> ProfilesConfig:
    """Parse once per file version: every spawner of the hub shares one model."""
    now = time.monotonic()
    recent = _recent.get(str(path))
    if recent and now - recent[0] < RECHECK_SECONDS:
        return recent[1]
    cfg = _load_if_changed(Path(path))
    _recent[str(path)] = (now, cfg)
    return cfg


def _load_if_changed(path: Path) -> ProfilesConfig:
    key = (str(path.resolve()), path.stat().st_mtime)
    if key not in _loaded:
        _loaded.clear()
        _loaded[key] = load_profiles(path)
    return _loaded[key]
