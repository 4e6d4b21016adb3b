"""SIMULATOR — init containers as a kubelet runs them, for the dev node agent (agent.py).

Kubernetes semantics: a pod's init containers run one at a time, in order, each to completion, before any
of its containers starts; the pod is Pending with `Initialized: False` meanwhile and each one's state is in
`status.initContainerStatuses` (running, then terminated: exit code, reason, its termination message). When
one fails, a pod whose restartPolicy is Never fails (phase Failed, that init container's terminated state
kept); otherwise the kubelet runs that init container again after a back-off (10 s, doubled up to 5 min:
CrashLoopBackOff, `restartCount`, the failed run in `lastState`) and the containers never start meanwhile.
"""
from __future__ import annotations

import asyncio
import logging
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

log = logging.getLogger("gpuhub.dev-agent")
BANNER = "[dev-agent SIMULATOR]"
#: The kubelet's crash-loop back-off: 10 s, doubled after each failure, at most 5 minutes.
BACKOFF, BACKOFF_MAX = 10.0, 300.0


@dataclass
class InitPending:
    """A pod whose init containers are running; `current`: the one now running (what a deletion ends)."""
    current: Any = None


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def terminated(code: int, message: str) -> dict:
    return {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                           "message": message.strip()[-4096:], "finishedAt": _now()}}


def init_status(container: dict, state: dict, restarts: int = 0, last: dict | None = None) -> dict:
    out = {"name": container["name"], "image": container.get("image", ""), "imageID": "", "ready": False,
           "restartCount": restarts, "state": state, "started": "running" in state}
    if last:
        out["lastState"] = last
    return out


def kept_times(pod: dict, wanted: tuple[tuple[str, str], ...]) -> tuple[str, list[dict]]:
    """(startTime, conditions) as a kubelet keeps them: `startTime` set once, when the pod is taken; a condition's
    `lastTransitionTime` moves only when its status does (PodScheduled keeps the scheduler's). `pod` is the agent's
    copy of the pod, which remembers what it reported."""
    now, status = _now(), pod.setdefault("status", {})
    start = status.setdefault("startTime", now)
    before = {c.get("type"): c for c in status.get("conditions") or []}
    conditions = [{"type": t, "status": s,
                   "lastTransitionTime": (before[t].get("lastTransitionTime") or now)
                   if t in before and before[t].get("status") == s else now} for t, s in wanted]
    status["conditions"] = [*[c for t, c in before.items() if t not in dict(wanted)], *conditions]
    return start, conditions


def pending_status(pod: dict, ip: str, inits: list[dict], phase: str = "Pending") -> dict:
    """The pod while (or because) its init containers run: not Initialized, its containers waiting."""
    start, conditions = kept_times(pod, (("PodScheduled", "True"), ("Initialized", "False"),
                                         ("ContainersReady", "False"), ("Ready", "False")))
    return {"phase": phase, "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1", "startTime": start,
            "conditions": conditions,
            "initContainerStatuses": inits,
            "containerStatuses": [{"name": c["name"], "ready": False, "restartCount": 0, "image": c.get("image", ""),
                                   "imageID": "", "started": False,
                                   "state": {"waiting": {"reason": "PodInitializing"}}}
                                  for c in pod["spec"]["containers"]]}


def termination_message(container: dict, message_file: Path, log_path: Path, code: int) -> str:
    """As a kubelet reads it: the container's termination-message file (its last 4 KiB); with
    `terminationMessagePolicy: FallbackToLogsOnError` and nothing in it, a failed container's last 80 log lines (at
    most 2 KiB); else nothing (`File`, the API's default). The agent's own lines are no container's log."""
    text = message_file.read_text(errors="replace")[-4096:] if message_file.exists() else ""
    if not text.strip() and code != 0 and container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
        lines = [ln for ln in log_path.read_text(errors="replace").splitlines() if not ln.startswith(BANNER)]
        text = "\n".join(lines[-80:])[-2048:]
    return text


def container_exit_code(returncode: int) -> int:
    """As a container runtime reports it: a process killed by signal N exits 128 + N (SIGKILL 137, SIGTERM 143);
    Python's returncode says -N."""
    return 128 - returncode if returncode < 0 else returncode


async def run_init_containers(agent, key: str, pod: dict, node: dict, ip: str) -> bool:
    """Run `pod`'s init containers in order; True when all completed (the containers may start), False when
    the pod failed or went away meanwhile. `agent`: the DevNodeAgent (launch, map_mounts, patch_status)."""
    specs = pod["spec"].get("initContainers") or []
    statuses = [init_status(c, {"waiting": {"reason": "PodInitializing"}}) for c in specs]
    never = pod["spec"].get("restartPolicy", "Always") == "Never"
    pending = agent.running.get(key)
    for i, container in enumerate(specs):
        restarts, delay = 0, BACKOFF
        while True:
            if agent.running.get(key) is not pending:
                return False  # deleted
            cmd = (container.get("command") or []) + (container.get("args") or [])
            if not cmd or shutil.which(cmd[0]) is None:  # as for a pod's container: simulated only, not run
                log.warning("%s %s: init container %s: command %r is not installed here; taken as completed",
                            BANNER, key, container["name"], cmd)
                statuses[i] = init_status(container, terminated(0, f"{BANNER} not run: {cmd!r} is not installed"))
                break
            mounts = await agent.map_mounts(key, pod, container, node["metadata"]["name"])
            run = await agent.launch(key, pod, container, node, ip, mounts, suffix=f".init-{container['name']}")
            pending.current = run
            statuses[i] = init_status(container, {"running": {"startedAt": _now()}}, restarts, statuses[i].get(
                "lastState"))
            await agent.patch_status(key, pending_status(pod, ip, statuses))
            code = container_exit_code(await run.proc.wait())
            if agent.running.get(key) is not pending:
                return False
            message = termination_message(container, run.termination_log, run.log_path, code)
            if code == 0:
                statuses[i] = init_status(container, terminated(0, message), restarts, statuses[i].get("lastState"))
                log.info("%s %s: init container %s completed", BANNER, key, container["name"])
                break
            if never:  # the pod fails with that init container's state; its containers never run
                statuses[i] = init_status(container, terminated(code, message), restarts)
                await agent.patch_status(key, pending_status(pod, ip, statuses, phase="Failed"))
                log.info("%s %s: init container %s exited %s → Failed", BANNER, key, container["name"], code)
                agent.release_claims(key)
                return False
            restarts += 1
            statuses[i] = init_status(container, {"waiting": {"reason": "CrashLoopBackOff", "message":
                                                              f"back-off {delay:g}s restarting failed container"}},
                                      restarts, terminated(code, message))
            await agent.patch_status(key, pending_status(pod, ip, statuses))
            log.info("%s %s: init container %s exited %s, again in %g s", BANNER, key, container["name"], code,
                     delay)
            await asyncio.sleep(delay)
            delay = min(BACKOFF_MAX, delay * 2)
    await agent.patch_status(key, {"initContainerStatuses": statuses})  # all completed; kept from now on
    return True
