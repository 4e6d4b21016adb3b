"""What each GPU sharing strategy of a pool cannot do (pure): the MIG layout's and MPS's own rules.

`validation.py` calls these on each parsed pool and profile; each rule gives the path, the bad value and what
would be valid. MPS facts, as the NVIDIA device plugin (checked at v0.20.0) enforces them:

- replicas: at least 2 per GPU (the config parser refuses fewer), at most 48 MPS clients per GPU of compute
  capability 7.5 or newer and 16 on older GPUs (the MPS control daemon refuses the config otherwise);
- not on MIG-enabled GPUs: the daemon skips MIG devices and GPU feature discovery reports the node not
  MPS-capable, and the plugin refuses `--mig-strategy=mixed` with MPS. A MIG-capable GPU (A100, H100, H200)
  may run MPS with MIG disabled: such a pool's nodes must not be labelled for a MIG layout, and no MIG pool
  of the file may select the same nodes;
- one replica per container: the plugin fails a request for more than one shared replica
  (`failRequestsGreaterThanOne`, always on before v0.20 and on by default since; the rendered config sets it);
- its own /dev/shm: the plugin mounts the node's MPS shm directory at /dev/shm in every MPS container, so an
  MPS profile sets no `shm` (its pods mount none of their own: `Profile.own_shm`).
"""
from __future__ import annotations

from dataclasses import dataclass

from jupyterhub_gpu.model.gpus import GPU_MODELS, mig_layout_problems
from jupyterhub_gpu.model.profiles import MPS_MAX_REPLICAS, MIGSharing, MPSSharing, Pool, Profile, TimeSlicing
from jupyterhub_gpu.model.quantities import human_bytes

#: GPU models of compute capability below 7.5 (Volta and older), whose MPS server takes at most 16 clients.
MPS_MAX_REPLICAS_OLD_GPUS = 16
PRE_TURING = frozenset({"V100"})
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_DISABLED = "all-disabled"


@dataclass(frozen=True)
class SharingProblem:
    at: str
    message: str


def mps_max_replicas(model: str) -> int:
    """The most MPS clients one GPU of this model serves."""
    return MPS_MAX_REPLICAS_OLD_GPUS if model in PRE_TURING else MPS_MAX_REPLICAS


def _mig_problems(at: str, pool: Pool) -> list[SharingProblem]:
    s, model = pool.sharing, pool.gpu.spec
    if not model.supports_mig:
        migs = [m.name for m in GPU_MODELS.values() if m.supports_mig]
        return [SharingProblem(f"{at}.sharing.strategy", f"{model.name} does not support MIG; MIG GPUs: "
                                                         f"{', '.join(migs)}")]
    layout = s.layout
    if isinstance(layout, str) and layout != "all-balanced":
        if layout.removeprefix("all-") not in model.mig:
            return [SharingProblem(f"{at}.sharing.layout", f"{layout!r} is not a MIG layout of {model.name}; valid: "
                                   + ", ".join(["all-balanced"] + [f"all-{x}" for x in model.mig]))]
    elif isinstance(layout, dict):
        if found := mig_layout_problems(model, layout):
            return [SharingProblem(f"{at}.sharing.layout", msg) for msg in found]
    if s.mig_strategy == "single" and len(pool.mig_layout) != 1:
        return [SharingProblem(f"{at}.sharing.layout", f"{layout!r}: the single MIG strategy needs one slice type "
                                                       f"per node (e.g. all-{next(iter(model.mig))}); use "
                                                       "mig_strategy: mixed for a mixed layout")]
    return []


def _mps_problems(at: str, pool: Pool) -> list[SharingProblem]:
    s, model, sel = pool.sharing, pool.gpu.spec, pool.node_selector
    out = []
    most = mps_max_replicas(model.name)
    if s.replicas > most:
        out.append(SharingProblem(f"{at}.sharing.replicas", f"{s.replicas}: the MPS control daemon serves at most "
                                                            f"{most} clients per {model.name}; valid: 2..{most}"))
    says_mig = {k: v for k, v in sel.items() if (k == MIG_CONFIG_LABEL and v != MIG_DISABLED)
                or (k == "nvidia.com/mig.strategy" and v != "none") or "-MIG-" in v
                or (k.startswith("nvidia.com/mig-") and k.endswith(".count"))}
    if says_mig:
        what = ", ".join(f"{k}={v}" for k, v in says_mig.items())
        out.append(SharingProblem(f"{at}.node_selector", f"{what}: these nodes run MIG, and MPS does not work on "
                                  "MIG-enabled GPUs; select nodes with MIG disabled (nvidia.com/mig.config="
                                  f"{MIG_DISABLED}) or use strategy: mig"))
    for key, want in (("nvidia.com/gpu.sharing-strategy", "mps"), ("nvidia.com/mps.capable", "true")):
        if key in sel and sel[key] != want:
            out.append(SharingProblem(f"{at}.node_selector", f"{key}={sel[key]}: an MPS pool's nodes say {key}="
                                                             f"{want}; remove the label from node_selector"))
    return out


def pool_problems(name: str, pool: Pool) -> list[SharingProblem]:
    """The sharing rules of one pool whose GPU model is known; any problem makes the pool broken (its
    profiles and quotas are not checked against it)."""
    at = f"pools.{name}"
    if isinstance(pool.sharing, MIGSharing):
        return _mig_problems(at, pool)
    if isinstance(pool.sharing, MPSSharing):
        return _mps_problems(at, pool)
    return []


def _same_nodes(a: dict[str, str], b: dict[str, str]) -> bool:
    """Does every node of one selector match the other too (one selector's labels hold the other's)?"""
    return a.items() <= b.items() or b.items() <= a.items()


def file_problems(pools: dict[str, Pool]) -> list[SharingProblem]:
    """A node is either MIG or MPS: no MPS pool may select nodes a MIG pool of the same file selects."""
    migs = {n: p for n, p in pools.items() if isinstance(p.sharing, MIGSharing)}
    return [SharingProblem(f"pools.{name}.node_selector",
                           f"selects the same nodes as MIG pool {mig!r} ({pools[mig].node_selector}); MPS does not "
                           "work on MIG-enabled GPUs, so give the pools node selectors that tell their nodes apart")
            for name, p in pools.items() if isinstance(p.sharing, MPSSharing)
            for mig, m in migs.items() if _same_nodes(p.node_selector, m.node_selector)]


def shm_problem(at: str, p: Profile, pool: Pool) -> SharingProblem | None:
    """An MPS profile that sizes its own /dev/shm: the device plugin mounts the node's MPS /dev/shm there."""
    if isinstance(pool.sharing, MPSSharing) and "shm" in p.model_fields_set:
        return SharingProblem(f"{at}.shm", f"{human_bytes(p.shm)}: an MPS pod gets the device plugin's /dev/shm (the "
                                           "node's MPS daemon and its clients talk through it; it is shared by the "
                                           "node's MPS pods), not one of its own; remove shm")
    return None


def count_problem(at: str, p: Profile, pool: Pool) -> SharingProblem | None:
    """A request for more than one shared replica, which the pool's device plugin config fails."""
    if p.gpu.count <= 1:
        return None
    if isinstance(pool.sharing, MPSSharing):
        return SharingProblem(f"{at}.gpu.count", f"{p.gpu.count}: the device plugin fails an MPS request for more "
                                                 "than one replica (each container gets one share of one GPU); "
                                                 "valid: 1 (for more, use a pool with whole GPUs)")
    if isinstance(pool.sharing, TimeSlicing) and pool.sharing.fail_requests_greater_than_one:
        return SharingProblem(f"{at}.gpu.count", f"{p.gpu.count}: pool {p.pool!r} fails time-sliced requests greater "
                                                 "than one (fail_requests_greater_than_one); valid: 1")
    return None
