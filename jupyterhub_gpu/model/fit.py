"""Warnings about node sizes in a valid profiles file (pure; `gpuhub validate` prints them).

Never errors: a pool whose size the file does not know (no `node:`, an instance type not in
`model/vm_sizes.py`) is unknown, not small, so its profiles cannot be checked here; `gpuhub doctor` and
the spawn-time check read the real nodes. And a GPU pool whose slots cannot all be used at once (4
time-sliced sessions of 1 CPU on a node whose pods get 3.86) is legal but wasteful: the team's GPU quota
promises more than the nodes hold. And a mixed-strategy MIG pool cannot rely on scaling from zero on AKS.
"""
from __future__ import annotations

from decimal import Decimal

from jupyterhub_gpu.model.profiles import MIGSharing, ProfilesConfig
from jupyterhub_gpu.model.quantities import human_bytes


def fit_warnings(cfg: ProfilesConfig) -> list[str]:
    out = []
    for name, pool in cfg.pools.items():
        profiles = [p for p in cfg.profiles if p.pool == name]
        if isinstance(pool.sharing, MIGSharing) and pool.sharing.mig_strategy == "mixed" and pool.min_nodes == 0 \
                and profiles:
            out.append(f"pools.{name}: a mixed-strategy MIG pool with min_nodes 0 does not scale up from zero on AKS: "
                       "the cluster autoscaler's template of a new node has no nvidia.com/mig-* resources, so a pod "
                       "waiting for a slice never triggers one (and a new node offers slices only after mig-manager "
                       f"has partitioned it, with a reboot). Set pools.{name}.min_nodes: 1 or more.")
        shape = pool.shape()
        if shape is None:
            if profiles:
                what = f"instance type {pool.instance_type!r} is not one jupyterhub-gpu knows" if pool.instance_type \
                    else "no instance_type or node"
                slugs = ", ".join(p.slug for p in profiles)
                out.append(f"pools.{name}: node size unknown ({what}), so profile(s) {slugs} are not checked "
                           f"against a node here; `gpuhub doctor` and each spawn check the real nodes. Set "
                           f"pools.{name}.node: {{cpu, memory}} (the allocatable) to check them now.")
            continue
        for p in profiles:
            if p.gpu is None:
                continue
            slots = pool.slots_per_node().get(pool.resource_name(p.gpu.profile), 0) // p.gpu.count
            if slots < 2:
                continue
            mem = Decimal(p.memory_limit)
            fit = int(min(shape.cpu // p.cpu if p.cpu else slots, shape.memory // mem if mem else slots, slots))
            if fit < slots:
                out.append(f"profiles {p.slug!r}: {slots} per node need {float(p.cpu * slots):g} CPUs / "
                           f"{human_bytes(mem * slots)}, but a node of pool {name!r} offers pods "
                           f"{float(shape.cpu):g} CPUs / {human_bytes(shape.memory)}: only {fit} run at "
                           f"once, and the team quota promises {slots}. Give it at most "
                           f"{float(shape.cpu / slots):.2f} CPUs / {human_bytes(shape.memory / slots)} "
                           "(memory + shm).")
    return out
