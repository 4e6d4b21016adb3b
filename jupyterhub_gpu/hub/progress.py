"""Spawn progress in plain language (pure): what Kubernetes says, told as what is happening and what
the user can do; and the cases where waiting is pointless because the pod can never be placed.
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from jupyterhub_gpu.contract import GPU_CHECK_CONTAINER, GPU_CHECK_FAILED, HOME_FOLDER_CONTAINER
from jupyterhub_gpu.hub.capacity import MILLI, ClusterState, amount, milli, slot_noun
from jupyterhub_gpu.model.profiles import Profile
from jupyterhub_gpu.model.quantities import human_bytes

INSUFFICIENT = re.compile(r"Insufficient ([\w./-]*[\w/-])")  # "Insufficient cpu." is cpu, not "cpu."
UNTOLERATED = re.compile(r"untolerated taint\(?s?\)? ?\{([^}]*)\}")
GPU_HEALTH_PREFIX = "GPU check failed"


def explain_event(event: dict[str, Any], profile: Profile | None, state: ClusterState | None) -> str | None:
    """A sentence for one pod event, or None to keep Kubernetes' own words."""
    reason, message = event.get("reason") or "", event.get("message") or ""
    if state is not None and not state.is_current():
        state = None  # stale informers: explain without numbers rather than with wrong ones
    if reason in ("FailedScheduling", "TriggeredScaleUp"):  # the pool at zero is adding a node: count it down
        pod = event.get("involvedObject") or {}
        if counted := node_add_message(state, profile, pod.get("namespace"), pod.get("name")):
            return counted
    if reason == "FailedScheduling":
        return explain_unschedulable(message, profile, state)
    if reason == "Scheduled":
        node = re.search(r" to (\S+)$", message)
        said = f"A node was found: your server is placed on {node.group(1) if node else 'a node'}"
        return said + (choice_got(profile, state, node.group(1)) if node else "") + "."
    if reason == "TriggeredScaleUp":
        return "The pool is adding a node for you; a new GPU node usually takes 3 to 6 minutes."
    if reason == "NotTriggerScaleUp":
        return ("The autoscaler cannot add a node that fits this profile (the pool may be at its maximum size); "
                "you are waiting for a running server or job to finish.")
    if reason == "Pulling":
        return ("Downloading the notebook image onto the node; GPU images are large, so the first start on a node "
                "can take a few minutes.")
    if reason == "Pulled":
        return "The notebook image is on the node."
    if reason in ("Failed", "ErrImagePull", "BackOff") and ("pull" in message.lower() or "image" in message.lower()):
        return (f"The notebook image could not be downloaded ({message.strip()}). This will not fix itself: "
                "ask an admin to check the profile's image name and registry access.")
    if reason == "Started":
        return "Your server's container has started; waiting for Jupyter to answer."
    return None


def choice_got(profile: Profile | None, state: ClusterState | None, node_name: str) -> str:
    """For a profile with alternatives, which choice its node's pool means: ', with the profile's own A100 80GB
    (DRA) GPU' or ', with an A100 80GB MIG (DRA) 3g.40gb slice instead (its own GPUs were all taken)'; '' when
    not known (no alternatives, node not seen yet, or two choices on that pool, its own among them)."""
    alternatives = state.alternatives.get(profile.slug) if state is not None and profile is not None else None
    node = state.nodes.get(node_name) if alternatives else None
    if node is None:
        return ""
    (choice, *more) = [c for c in [profile, *alternatives] if c.pool == node.pool] or [None]
    if choice is None or more:
        return ""
    if choice is profile:
        return f", with the profile's own {slot_noun(profile, state.cfg.pool_of(profile), profile.gpu.count != 1)}"
    noun = slot_noun(choice, state.cfg.pool_of(choice), choice.gpu.count != 1)
    return f", with {choice.gpu.count} {noun} instead (its own GPUs were all taken)"


def node_add_message(state: ClusterState | None, profile: Profile | None, namespace: str | None,
                     pod_name: str | None, now: datetime | None = None) -> str | None:
    """While a server waits for the node its pool (at zero when it asked) is adding, and the pool has measured
    times to add one (`node_add_times`): 'The T4 pool had no nodes when your server asked; a node is being
    added: about 4 min left.' (past the usual time: 'taking longer than usual'). Else None."""
    adds = getattr(state, "node_adds", None) if state is not None else None
    pool = state.cfg.pool_of(profile) if adds is not None and profile is not None else None
    said = adds.countdown(namespace, pod_name, now) if pool is not None else None
    return f"The {pool.label} pool had no nodes when your server asked; {said}." if said else None


def node_add_event(state: ClusterState | None, profile: Profile | None, namespace: str | None,
                   pod_name: str | None) -> dict[str, Any] | None:
    """KubeSpawner's periodic "please be patient" turned into the countdown (`node_add_message`), else None."""
    said = node_add_message(state, profile, namespace, pod_name) if state and state.is_current() else None
    return {"message": said} if said else None


def explain_unschedulable(message: str, profile: Profile | None, state: ClusterState | None) -> str:
    cfg = state.cfg if state else None
    pool = cfg.pool_of(profile) if cfg and profile else None
    resource = cfg.resource_name(profile) if cfg and profile else None
    nodes = state.pool_nodes(profile.pool) if state and pool else []
    if pool is not None and nodes and any(n.mig_state not in (None, "success") for n in nodes):
        states = sorted({n.mig_state for n in nodes if n.mig_state not in (None, "success")})
        return (f"The {pool.label} nodes are still being partitioned into MIG slices "
                f"(mig.config.state: {', '.join(states)}); this usually takes a few minutes.")
    short = [r for r in INSUFFICIENT.findall(message)]
    if resource and resource in short:
        cap = state.profile_capacity(profile) if state else None
        noun = slot_noun(profile, pool)
        total = f"All {cap.total_slots} " if cap and cap.total_slots else "All "
        grow = " or for the pool to grow" if cap is None or cap.can_grow else ""
        waiting = f" ({cap.waiting} servers and jobs are waiting)" if cap and cap.waiting > 1 else ""
        return f"{total}{noun} are in use{waiting}; you are waiting for one to free up{grow}."
    if short and profile is not None and state is not None and pool is not None and (
            held := fits_only_empty(profile, state)):
        return held + (" You are waiting for the pool to add a node." if state.profile_capacity(profile).can_grow
                       else "")
    if short and profile is not None:
        what = " and ".join(sorted(set(short) & {"cpu", "memory"})) or ", ".join(short)
        return (f"The {pool.label if pool else 'CPU'} nodes have no {what} left for a server this size; you are "
                "waiting for room to free up or for the pool to grow.")
    if pool is not None and not nodes:
        return (f"The {pool.label} pool has no nodes running right now; waiting for the autoscaler to add one "
                "(a few minutes).")
    if UNTOLERATED.search(message):
        return ("The matching nodes carry a taint this profile does not tolerate; this usually means the cluster "
                "and the profiles file disagree. Ask an admin to run `gpuhub doctor`.")
    return f"Waiting for a node: {message}"


def never_fits(profile: Profile, state: ClusterState) -> str | None:
    """Why no node of the cluster could ever take this profile (and none can be added), else None. A profile
    with alternatives never fits only when none of its choices ever could."""
    reason = _never_fits_own(profile, state)
    if reason and any(_never_fits_own(a, state) is None for a in state.alternatives.get(profile.slug, ())):
        return None
    return reason


def _never_fits_own(profile: Profile, state: ClusterState) -> str | None:
    cfg = state.cfg
    pool = cfg.pool_of(profile)
    if pool is None:
        return None
    cap = state.profile_capacity(profile)
    if not cap.known:  # unknown is not "never": only a current view may refuse a spawn
        return None
    if too_small := _nodes_too_small(profile, pool, state.pool_nodes(profile.pool)):
        return too_small  # the nodes a growing pool adds are the same size
    if cap.can_grow:
        return None
    if held := fits_only_empty(profile, state):
        return held + " The pool cannot grow, so it can never start: choose a smaller profile, or ask an admin."
    if cap.nodes == 0:
        return (f"The {pool.label} pool ({profile.pool}) has no nodes and cannot grow, so '{profile.display_name}' "
                "can never start. Choose another profile, or ask an admin to add nodes to the pool.")
    resource = cap.resource
    if resource and profile.gpu:
        biggest = max(int(state.offered(n).allocatable.get(resource, 0)) for n in state.pool_nodes(profile.pool))
        if biggest < profile.gpu.count:
            return (f"No node of the {pool.label} pool offers {profile.gpu.count} x {resource} (the most any node "
                    f"offers is {biggest}), so '{profile.display_name}' can never start. The nodes may not match "
                    "the profiles file: ask an admin to run `gpuhub doctor`.")
    return None


def fits_only_empty(profile: Profile, state: ClusterState) -> str | None:
    """Why the profile fits the pool's nodes only when they are empty: each node is big enough, but pods that
    stay there (not servers nor jobs: the hub's own, system daemons) hold too much of it; else None."""
    pool = state.cfg.pool_of(profile)
    nodes = {n.name: n for n in state.pool_nodes(profile.pool)} if pool is not None else {}
    need = {"cpu": milli(str(profile.cpu)) or 0, "memory": int(profile.memory_limit) * MILLI}
    if not nodes or not all(amount(n.alloc, r) >= v for n in nodes.values() for r, v in need.items()):
        return None  # no nodes, or too small even when empty (`_nodes_too_small` says so)
    held: dict[str, dict[str, int]] = {name: {} for name in nodes}
    for pod in state.pods.values():
        if pod.node in held and pod.profile is None:
            for res, v in pod.requests:
                held[pod.node][res] = held[pod.node].get(res, 0) + v
    if any(all(amount(n.alloc, r) - held[name].get(r, 0) >= v for r, v in need.items()) for name, n in nodes.items()):
        return None
    name, node = max(nodes.items(), key=lambda kv: amount(kv[1].alloc, "cpu") - held[kv[0]].get("cpu", 0))
    return (f"'{profile.display_name}' needs {float(profile.cpu):g} CPUs and {human_bytes(profile.memory_limit)}; "
            f"the {pool.label} node {name} offers pods {amount(node.alloc, 'cpu') / MILLI:g} CPUs and "
            f"{human_bytes(amount(node.alloc, 'memory') // MILLI)}, but pods that stay there (the hub's own, system "
            f"daemons) hold {held[name].get('cpu', 0) / MILLI:g} CPUs and "
            f"{human_bytes(held[name].get('memory', 0) // MILLI)} of it, so it fits only on an empty node.")


def _nodes_too_small(profile: Profile, pool, nodes) -> str | None:
    """The profile against the real allocatable of the pool's nodes (the file may not know their size)."""
    if not nodes:
        return None
    cpu, mem = float(profile.cpu), float(profile.memory_limit)
    if any(n.allocatable.get("cpu", 0) >= cpu and n.allocatable.get("memory", 0) >= mem for n in nodes):
        return None
    best = max(nodes, key=lambda n: (n.allocatable.get("cpu", 0), n.allocatable.get("memory", 0)))
    return (f"'{profile.display_name}' needs {cpu:g} CPUs and {human_bytes(mem)} (memory + /dev/shm), but the "
            f"largest node of the {pool.label} pool offers pods {best.allocatable.get('cpu', 0):g} CPUs and "
            f"{human_bytes(best.allocatable.get('memory', 0))}, so it can never start there. Choose a smaller "
            "profile, or ask an admin to run `gpuhub doctor`.")


def _terminated(cs: dict[str, Any]) -> dict[str, Any] | None:
    return (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")


def gpu_check_failure(pod: dict[str, Any] | None) -> str | None:
    """The GPU check's verdict when it failed: only the init container's (contract.GPU_CHECK_CONTAINER, which
    nothing of the user's reaches), never words a server container wrote (user code runs there)."""
    for cs in ((pod or {}).get("status") or {}).get("initContainerStatuses") or []:
        term = _terminated(cs)
        if cs.get("name") == GPU_CHECK_CONTAINER and term and term.get("exitCode") == GPU_CHECK_FAILED:
            msg = (term.get("message") or "").strip()
            if GPU_HEALTH_PREFIX in msg:
                return msg
    return None


def container_failure(pod: dict[str, Any] | None) -> str | None:
    """Why the server cannot start: an init container that failed (other than a failed GPU check, see
    gpu_check_failure), or a server container that exited before it was ready. A server container's own words
    are quoted as its message, never taken for the GPU check's (the user's code may have written them)."""
    if not pod:
        return None
    node = (pod.get("spec") or {}).get("nodeName") or "its node"
    status = pod.get("status") or {}
    for cs in status.get("initContainerStatuses") or []:
        term = _terminated(cs)
        if term and term.get("exitCode") not in (0, None) and not gpu_check_failure(pod):
            msg = (term.get("message") or "").strip()[-500:]
            said = (f"The server's {cs.get('name')} step failed on {node} (exit code {term.get('exitCode')})"
                    + (f": {msg}" if msg else "."))
            if cs.get("name") == HOME_FOLDER_CONTAINER:
                said += (" Your home folder could not be created on the home share: its top folder must be "
                         "writable by the users (uid 1000, gid 100). Ask an admin (admin guide, storage step).")
            return said
    for cs in status.get("containerStatuses") or []:
        term = _terminated(cs)
        if term and not cs.get("ready"):
            msg = (term.get("message") or "").strip()
            if msg:
                return f"The server stopped on {node} before it was ready: {msg}"
            return (f"The server stopped on {node} before it was ready (exit code {term.get('exitCode')}, "
                    f"{term.get('reason') or 'no reason given'}).")
    return None
