"""GPU health check run before the singleuser server reports ready (`gpuhub-singleuser`).

For GPU profiles the hub runs it first as the pod's init container (`gpuhub-singleuser --gpu-check-only`,
contract.GPU_CHECK_CONTAINER): same image, no home volume, so nothing of the user's (a `.pth` in home,
~/.jupyter config) runs before it or writes its verdict; only that verdict marks a node's GPU as failing.

A pod that got a GPU from the scheduler but cannot see it (driver or device plugin not ready on the
node) would otherwise start a Jupyter with no GPU and keep billing for it. We check what the
profile promised (env set by GPUSpawner) against the device files and `nvidia-smi -L`, and if it is
not there we exit with a message that names the node and the likely cause; the hub shows it.

On a dra pool ($GPUHUB_DRA_DEVICES set) the GPUs come from the pod's ResourceClaim: the NVIDIA DRA driver (v0.4.1,
through nvidia-container-toolkit's CDI spec) puts the allocated devices' nodes in the container and sets
NVIDIA_VISIBLE_DEVICES=void, which here is no fault. The check counts the devices it was given (the UUIDs
NVIDIA_VISIBLE_DEVICES names, if it names any, else those nvidia-smi lists) against what the claim may hold.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from jupyterhub_gpu.contract import (
    ENV_DEVICE_ROOT,
    ENV_DRA_DEVICES,
    ENV_GPU_COUNT,
    ENV_GPU_KIND,
    ENV_GPU_RESOURCE,
    ENV_MIG_PROFILE,
    ENV_NODE_NAME,
    ENV_TERMINATION_LOG,
    GPU_CHECK_FAILED,
    GPU_CHECK_ONLY,
)

EXIT_GPU_MISSING = GPU_CHECK_FAILED
PREFIX = "GPU check failed"
#: A device's UUID on an `nvidia-smi -L` line: `GPU-<uuid>`, `MIG-<uuid>` (or an older driver's `MIG-GPU-<uuid>/1/0`).
_UUID = re.compile(r"\(UUID: ((?:GPU|MIG)-[^)\s]+)\)")


@dataclass(frozen=True)
class Expected:
    kind: str  # none | time-sliced | mps | mig | full
    count: int
    resource: str
    mig_profile: str | None
    node: str

    @classmethod
    def from_env(cls, env=os.environ) -> "Expected":
        return cls(
            kind=env.get(ENV_GPU_KIND, "none"),
            count=int(env.get(ENV_GPU_COUNT, "0") or 0),
            resource=env.get(ENV_GPU_RESOURCE, ""),
            mig_profile=env.get(ENV_MIG_PROFILE) or None,
            node=env.get(ENV_NODE_NAME) or env.get("NODE_NAME") or "its node",
        )


def _nvidia_smi_list(env) -> tuple[list[str], str | None]:
    exe = shutil.which("nvidia-smi", path=env.get("PATH"))
    if exe is None:
        return [], "nvidia-smi is not installed in the image"
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20, env=dict(env))
    except subprocess.TimeoutExpired:
        return [], "nvidia-smi did not answer within 20 s"
    if out.returncode != 0:
        return [], f"nvidia-smi failed: {(out.stderr or out.stdout).strip()[:200]}"
    return out.stdout.splitlines(), None


# ---------------------------------------------------------------- a dra pool's claim
def dra_choices(text: str) -> list[tuple[str, int, str | None]]:
    """contract.ENV_DRA_DEVICES: (kind, count, MIG slice) for each device choice of the claim, in order."""
    out = []
    for item in text.split():
        kind, _, rest = item.partition(":")
        count, _, profile = rest.partition(":")
        if kind in ("full", "mig") and count.isdigit():
            out.append((kind, int(count), profile or None))
    return out


def _choice_words(kind: str, count: int, profile: str | None) -> str:
    return (f"{count} MIG {profile} slice{'s' * (count != 1)}" if kind == "mig" else
            f"{count} whole GPU{'s' * (count != 1)}")


def listed_devices(lines: list[str]) -> dict[str, str]:
    """UUID → "gpu" or the MIG slice (`3g.40gb`), for each device an `nvidia-smi -L` listing shows."""
    out = {}
    for line in lines:
        m, words = _UUID.search(line), line.split()
        if m and words[:1] == ["GPU"]:
            out[m.group(1)] = "gpu"
        elif m and words[:1] == ["MIG"] and len(words) > 1:
            out[m.group(1)] = words[1]
    return out


def given_devices(env, lines: list[str]) -> tuple[list[str], dict[str, str], str | None]:
    """(the UUIDs the container was given, what nvidia-smi shows of each, a problem): the UUIDs
    NVIDIA_VISIBLE_DEVICES names, else the MIG devices nvidia-smi lists, else its GPUs (a MIG device's parent
    GPU is listed with it, and is not given whole)."""
    shown = listed_devices(lines)
    visible = env.get("NVIDIA_VISIBLE_DEVICES", "")
    named = list(dict.fromkeys(u.strip() for u in visible.split(",") if u.strip().startswith(("GPU-", "MIG-"))))
    if named:
        unseen = [u for u in named if u not in shown]
        if unseen:
            return named, shown, (f"NVIDIA_VISIBLE_DEVICES names {', '.join(unseen)}, which nvidia-smi -L does not "
                                  "show")
        return named, shown, None
    migs = [u for u, kind in shown.items() if kind != "gpu"]
    return migs or [u for u in shown if shown[u] == "gpu"], shown, None


def dra_verdict(env, choices: list[tuple[str, int, str | None]], lines: list[str]) -> tuple[str | None, str]:
    """(the problem, or None; what the claim put in the container, in words) for a dra pool's pod."""
    uuids, shown, problem = given_devices(env, lines)
    have: dict[str, int] = {}
    for u in uuids:
        kind = shown.get(u, "gpu" if u.startswith("GPU-") else "MIG")
        have[kind] = have.get(kind, 0) + 1
    words = ", ".join(_choice_words("full", n, None) if k == "gpu" else _choice_words("mig", n, k)
                      for k, n in have.items()) or "no GPU"
    given = f"{words} ({', '.join(uuids)})" if uuids else words
    if problem is None and not any(
            have == ({profile: count} if kind == "mig" else {"gpu": count})  # exactly the claim: more is a leak
            for kind, count, profile in choices):
        problem = f"its ResourceClaim put {given} in the container"
    return problem, given


def check(env=os.environ) -> str | None:
    """None when the promised GPU is visible, else the message to show the user."""
    return verdict(env)[0]


def verdict(env=os.environ) -> tuple[str | None, str]:
    """(the message to show the user, or None when the promised GPU is visible; what the container was given)."""
    want = Expected.from_env(env)
    if want.kind == "none" or want.count == 0:
        return None, "no GPU"
    what = f"{want.count} x {want.resource}"
    choices = dra_choices(env.get(ENV_DRA_DEVICES, ""))
    if choices:
        what = ", else ".join(_choice_words(*c) for c in choices) + " through its ResourceClaim (DRA)"
    visible = env.get("NVIDIA_VISIBLE_DEVICES", env.get("CUDA_VISIBLE_DEVICES"))
    problem, given = None, what
    if not choices and visible is not None and visible.strip() in ("", "void", "none", "-1"):
        problem = f"NVIDIA_VISIBLE_DEVICES is {visible!r}, so no GPU was handed to the container"
    dev = Path(env.get(ENV_DEVICE_ROOT, "/dev"))
    devices = sorted(p.name for p in dev.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name)) if dev.is_dir() else []
    if problem is None and not (dev / "nvidiactl").exists():
        problem = f"{dev / 'nvidiactl'} does not exist (no NVIDIA driver device files)"
    elif problem is None and not devices:
        problem = f"no {dev}/nvidia<N> device file is present"
    if problem is None:
        lines, err = _nvidia_smi_list(env)
        if err:
            problem = err
        elif choices:
            problem, given = dra_verdict(env, choices, lines)
        elif want.kind == "mig":
            migs = [ln for ln in lines if ln.strip().startswith("MIG")]
            if want.mig_profile:
                migs = [ln for ln in migs if want.mig_profile in ln]
            if len(migs) < want.count:
                problem = f"nvidia-smi -L shows {len(migs)} MIG {want.mig_profile or ''} device(s)".replace("  ", " ")
        else:
            gpus = [ln for ln in lines if ln.startswith("GPU ")]
            if not gpus:
                problem = "nvidia-smi -L lists no GPU"
            elif want.kind == "full" and len(gpus) < want.count:
                problem = f"nvidia-smi -L lists {len(gpus)} GPU(s)"
    if problem is None:
        return None, given
    stack = "its DRA driver (kubelet plugin)" if choices else "device plugin"
    return (f"{PREFIX} on node {want.node}: this server was given {what}, but {problem}. The NVIDIA driver or "
            f"{stack} on that node is probably not ready. The server was stopped so no GPU is billed "
            "while you cannot use it; try again in a few minutes, or ask an admin to check the node "
            "(`gpuhub doctor`)."), given


def write_termination_message(message: str, env=os.environ) -> None:
    """Kubernetes shows the termination log in the pod status; the hub reads it from there."""
    path = Path(env.get(ENV_TERMINATION_LOG, "/dev/termination-log"))
    try:
        path.write_text(message)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    """Check the GPU, then become `jupyterhub-singleuser` with the same arguments (`--gpu-check-only`: the
    init container's run, the check alone: 0 when the GPU is there)."""
    argv = sys.argv[1:] if argv is None else argv
    message, given = verdict()
    if message:
        print(message, file=sys.stderr, flush=True)
        write_termination_message(message)
        return EXIT_GPU_MISSING
    if argv[:1] == [GPU_CHECK_ONLY]:
        want = Expected.from_env()
        if os.environ.get(ENV_DRA_DEVICES):
            print(f"GPU check passed on node {want.node}: its ResourceClaim gave {given}", flush=True)
        else:
            print(f"GPU check passed on node {want.node}: {want.count} x {want.resource or 'no GPU'}", flush=True)
        return 0
    exe = shutil.which("jupyterhub-singleuser")
    if exe is None:
        print("jupyterhub-singleuser is not installed in this image", file=sys.stderr)
        return 127
    os.execv(exe, [exe, *argv])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
