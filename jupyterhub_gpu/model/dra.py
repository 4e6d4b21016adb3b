"""GPUs through Dynamic Resource Allocation (resource.k8s.io/v1): the driver's names and what a profiles file
may ask of a `dra` pool (pure).

Checked against Kubernetes v1.36.3 (k8s.io/api v0.36.3 resource/v1), the NVIDIA DRA driver
(kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 and v25.12.0: driver `gpu.nvidia.com`, DeviceClasses
`gpu.nvidia.com` and `mig.nvidia.com`, device attributes `type`, `uuid`, `productName`, `profile`, ...) and
Kueue v0.19.2 (DRA integration on by default; it counts `exactly.count` devices per DeviceClass under the name
`deviceClassMappings` gives it, and refuses `firstAvailable`, `allocationMode: All` and named claims).
"""
from __future__ import annotations

import re
from typing import NamedTuple

from jupyterhub_gpu.model.profiles import Profile, ProfileGPU

#: The NVIDIA DRA driver's name; also the domain of its device attributes and capacities.
DRIVER = "gpu.nvidia.com"
#: The DeviceClasses the driver's Helm chart installs (whole GPUs, MIG devices).
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
#: Prefix of the DeviceClasses gpuhub renders, one per MIG slice, so Kueue counts each slice size on its own.
MIG_CLASS_PREFIX = "gpuhub-mig-"
#: The most subrequests one `firstAvailable` request takes (FirstAvailableDeviceRequestMaxSize).
MAX_CHOICES = 8
#: Device attribute names the driver publishes (section "attributes" of docs/profiles-reference.md).
GPU_ATTRIBUTES = ("type", "uuid", "productName", "brand", "architecture", "cudaComputeCapability",
                  "driverVersion", "cudaDriverVersion")
MIG_ATTRIBUTES = (*GPU_ATTRIBUTES, "profile", "parentUUID")


class DRAProblem(NamedTuple):
    at: str
    message: str


def attribute(name: str, driver: str = DRIVER) -> str:
    """CEL for one of the driver's device attributes."""
    return f"device.attributes['{driver}'].{name}"


def type_selector(kind: str, driver: str = DRIVER) -> str:
    """The chart's own selector of a DeviceClass: the driver's devices of one `type` (gpu, mig)."""
    return f"device.driver == '{driver}' && {attribute('type', driver)} == '{kind}'"


def mig_class_name(slice_name: str) -> str:
    """gpuhub's DeviceClass of one MIG slice size, e.g. gpuhub-mig-3g.40gb (a DNS subdomain)."""
    return f"{MIG_CLASS_PREFIX}{slice_name}"


def mig_selector(slice_name: str, driver: str = DRIVER) -> str:
    return f"{type_selector('mig', driver)} && {attribute('profile', driver)} == '{slice_name}'"


def product_selector(product: str, driver: str = DRIVER) -> str:
    """CEL that picks one GPU model by the driver's `productName` (NVML's name, e.g. "NVIDIA A100 80GB PCIe"), from
    the product label GFD derives from that same name (`NVIDIA-A100-80GB-PCIe`, model/gpus.py): each of its words
    must be a whole word of the name, so `L4` never matches an L40S, whatever separates the words."""
    words_match = " && ".join(f"name.matches('{_word_pattern(w)}')" for w in product_words(product))
    return f"cel.bind(name, {attribute('productName', driver)}.lowerAscii(), {words_match})"


def product_words(product: str) -> list[str]:
    words = [w.lower() for w in re.split(r"[-\s]+", product) if w]
    assert all(w.isalnum() for w in words), product  # gpuhub's own model table: nothing to quote in CEL
    return words


def _word_pattern(word: str) -> str:
    return f"(^|[ -]){word}([ -]|$)"


def product_matches(product: str, product_name: str) -> bool:
    """What `product_selector(product)` says of a device whose productName is `product_name` (doctor reads the
    driver's ResourceSlices with it; RE2 and Python agree on these patterns)."""
    name = product_name.lower()
    return all(re.search(_word_pattern(w), name) for w in product_words(product))


def device_memory_bytes(gib: int) -> int:
    return gib * 2**30


# ---------------------------------------------------------------- what a profiles file may ask of a dra pool
def pool_problems(name: str, pool) -> list[DRAProblem]:
    """A `dra` pool hands out whole GPUs or static MIG slices; DRA cannot share one GPU between pods yet."""
    at = f"pools.{name}"
    if pool.allocation != "dra":
        if pool.device_class != GPU_CLASS:
            return [DRAProblem(f"{at}.device_class", "only a pool with `allocation: dra` has a DeviceClass; add "
                                                     "`allocation: dra` or remove device_class")]
        return []
    if pool.device_class == MIG_CLASS or pool.device_class.startswith(MIG_CLASS_PREFIX):
        return [DRAProblem(f"{at}.device_class", f"{pool.device_class!r} holds MIG slices, and device_class names "
                                                 "the DeviceClass of whole GPUs (Kueue would count slices as GPUs); "
                                                 f"keep the default {GPU_CLASS!r} or name your whole-GPU class")]
    if pool.gpu is None:
        return [DRAProblem(f"{at}.allocation", "`dra` allocates GPUs, and this pool has none; remove allocation "
                                               "or add gpu: {model: ..., count_per_node: ...}")]
    if pool.sharing.strategy == "mig" and pool.sharing.mig_strategy != "mixed":
        return [DRAProblem(f"{at}.sharing.mig_strategy", "the device plugin's `single` strategy does not apply to "
                                                         "DRA, which names every slice by its profile; remove it")]
    if pool.sharing.strategy in ("time-slicing", "mps"):
        return [DRAProblem(f"{at}.sharing", f"{pool.sharing.strategy!r}: DRA cannot share one GPU between pods "
                                            "yet (no time-slicing or MPS through the NVIDIA DRA driver); keep this "
                                            "pool on `allocation: device-plugin`, or use whole GPUs or MIG")]
    return []


def choice_problems(at: str, choice, pools: dict) -> list[DRAProblem]:
    """One alternative: a dra pool of this file, a kind its sharing offers, a count one node holds."""
    pool = pools.get(choice.pool)
    if pool is None or not pool.is_dra:
        dra_pools = [n for n, p in pools.items() if p.is_dra]
        return [DRAProblem(f"{at}.pool", f"{choice.pool!r} is not a `dra` pool of this file; alternatives are "
                                         f"DRA device choices; dra pools: {', '.join(dra_pools) or '(none)'}")]
    if pool.queue_servers:
        return [DRAProblem(f"{at}.pool", f"pool {choice.pool!r} queues its servers in Kueue (`queue_servers: true`), "
                                         "and a server of this profile would hold its GPUs outside the team's "
                                         "quota; choose a pool that does not queue servers")]
    offered = pool.mig_layout
    if choice.kind == "mig":
        if not offered:
            return [DRAProblem(f"{at}.kind", f"pool {choice.pool!r} has no MIG slices; valid: full")]
        if choice.profile not in offered:
            return [DRAProblem(f"{at}.profile", f"{choice.profile!r} is not offered by pool {choice.pool!r}; "
                                                f"offered: {', '.join(offered)}")]
        per_node = pool.gpu.count_per_node * offered[choice.profile]
    else:
        if offered:
            return [DRAProblem(f"{at}.kind", f"pool {choice.pool!r} is MIG-partitioned; valid: mig with a profile "
                                             f"({', '.join(offered)})")]
        if choice.profile is not None:
            return [DRAProblem(f"{at}.profile", "only MIG choices name a slice; remove it")]
        per_node = pool.gpu.count_per_node
    if choice.count > per_node:
        return [DRAProblem(f"{at}.count", f"{choice.count} never fits: a node of pool {choice.pool!r} has "
                                          f"{per_node}; valid: 1..{per_node}")]
    return []


def file_problems(cfg, queued) -> list[DRAProblem]:
    """Alternatives: on a dra profile whose servers no Kueue queue holds (`queued(cfg, profile)`), each valid."""
    out: list[DRAProblem] = []
    for i, p in enumerate(cfg.profiles):
        if p.gpu is None or not p.gpu.alternatives:
            continue
        at = f"profiles[{i}].gpu.alternatives"
        pool = cfg.pool_of(p)
        if pool is None or not pool.is_dra:
            out.append(DRAProblem(at, f"profile {p.slug!r}: alternatives are DRA's prioritized list, and pool "
                                      f"{p.pool!r} is not `allocation: dra`; remove them or move the profile"))
            continue
        if queued(cfg, p):
            out.append(DRAProblem(at, f"profile {p.slug!r}: its servers wait in a Kueue queue, and Kueue (v0.19) "
                                      "cannot admit a claim with a prioritized list (`firstAvailable`); set "
                                      "`queue_servers: false` on the profile, or remove the alternatives"))
            continue
        for j, choice in enumerate(p.gpu.alternatives):
            out.extend(choice_problems(f"{at}[{j}]", choice, cfg.pools))
    return out


#: Joins a profile's slug and an alternative's place in its list: the counters' key for that choice (no slug has it).
CHOICE_MARK = "~"


def alternative_profiles(profile: Profile) -> list[Profile]:
    """Each of a profile's `gpu.alternatives` as a profile of its own pool, with the server's size: what the
    picker counts to say which choice a server would get now, and what showback prices the one it got at."""
    if profile.gpu is None:
        return []
    return [profile.model_copy(update={"slug": f"{profile.slug}{CHOICE_MARK}{i}", "pool": choice.pool,
                                       "gpu": ProfileGPU(kind=choice.kind, count=choice.count, profile=choice.profile)})
            for i, choice in enumerate(profile.gpu.alternatives, 1)]


#: A subrequest of a prioritized list as an allocation result names it: `<request>/c<place>-<what>`
#: (builders/dra.choice_name writes them).
SUBREQUEST = re.compile(r"^[^/]+/c(\d{1,2})-")


def choice_index(request: str) -> int:
    """The place in the profile's prioritized list of the choice an allocation result came from: 0 (its own GPUs)
    for a plain request, 1 for `gpu/c1-mig-3g-40gb`."""
    m = SUBREQUEST.match(request)
    return int(m.group(1)) if m else 0
