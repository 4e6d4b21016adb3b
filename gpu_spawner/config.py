"""What `jupyterhub_config.py` needs: the profiles file, validated before the hub starts."""
from __future__ import annotations

import sys

from gpu_spawner.model.profiles import ProfilesConfig
from gpu_spawner.model.profiles_file import cached_profiles, profiles_path
from gpu_spawner.model.validation import ProfilesError


def load_or_exit(path: str | None = None) -> tuple[str, ProfilesConfig]:
    """Load the profiles file or stop the hub, listing every problem (a bad file must not half-start)."""
    path = str(path or profiles_path())
    try:
        return path, cached_profiles(path)
    except ProfilesError as e:
        print(f"jupyterhub-gpu: refusing to start: {e}\nFix the file, check it with `gpuhub validate {path}`, "
              "and start the hub again.", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as e:
        print(f"jupyterhub-gpu: refusing to start: cannot read profiles file {path!r}: {e.strerror}",
              file=sys.stderr)
        raise SystemExit(2) from None
