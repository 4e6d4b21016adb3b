"""How much GPU a profile gives, said as people say it (pure): "¼ T4 (time-sliced)", "¼ T4 (MPS)",
"1g.10gb MIG slice", "2 × H100 NVL" — never "1 GPU" for a share or a slice of one."""
from __future__ import annotations

from jupyterhub_gpu.model.profiles import MPSSharing, Profile, ProfilesConfig, TimeSlicing

_FRACTIONS = {1: "1", 2: "½", 3: "⅓", 4: "¼", 5: "⅕", 6: "⅙", 8: "⅛", 10: "⅒"}


def gpu_amount(cfg: ProfilesConfig, profile: Profile) -> str:
    """What the profile's `gpu` block gives one server or job ("no GPU" without one)."""
    pool = cfg.pool_of(profile)
    if profile.gpu is None or pool is None or pool.gpu is None:
        return "no GPU"
    n = profile.gpu.count
    many = f"{n} × " if n > 1 else ""
    model = pool.label.removeprefix("NVIDIA ")
    if profile.gpu.kind == "mig":
        slice_ = profile.gpu.profile or next(iter(pool.mig_layout), "")
        return f"{many}{slice_} MIG slice{'s' if n > 1 else ''}"
    if profile.gpu.kind in ("time-sliced", "mps"):
        replicas = pool.sharing.replicas if isinstance(pool.sharing, (TimeSlicing, MPSSharing)) else 1
        share = _FRACTIONS.get(replicas, f"1/{replicas}")
        return f"{many}{share} {model} ({'MPS' if profile.gpu.kind == 'mps' else 'time-sliced'})"
    return f"{n} × {model}"
