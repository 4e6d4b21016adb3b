"""SIMULATOR — what the dev node agent (agent.py) gives a container's process: a GPU node's simulated devices
and `nvidia-smi`, the image's IPython config, its env with the downward-API fields a kubelet fills in, and
paths inside mounts pointed at their local folders, its read-only mounts made read-only. Pure apart from the files
it writes under the state dir (and a one-off probe of whether read-only mounts work here)."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from jupyterhub_gpu.contract import ENV_DEVICE_ROOT
from jupyterhub_gpu_dev.simulator_keys import SIM_PATH_ENV, SIMULATE_GPU_ANNOTATION

#: What the singleuser and runner images put in /etc/ipython: kernels auto-load %gpu_submit.
IMAGE_IPYTHON_CONFIG = Path(__file__).resolve().parents[2] / "images" / "singleuser" / "ipython_config.py"


def simulated_gpu(state_dir: Path, node: dict) -> dict[str, str]:
    """Device files and an `nvidia-smi` for a node, from the labels GFD would have put on it."""
    labels = node["metadata"].get("labels") or {}
    name = node["metadata"]["name"]
    if labels.get("nvidia.com/gpu.present") != "true":
        return {}
    if (node["metadata"].get("annotations") or {}).get(SIMULATE_GPU_ANNOTATION) == "missing":
        return {ENV_DEVICE_ROOT: str(state_dir / "gpus" / name / "no-driver")}
    root = state_dir / "gpus" / name
    dev, bin_dir = root / "dev", root / "bin"
    dev.mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(parents=True, exist_ok=True)
    product = labels.get("nvidia.com/gpu.product", "NVIDIA GPU").replace("-SHARED", "")
    gpus = int(labels.get("nvidia.com/gpu.count", "1"))
    mig = {m.group(1): int(v) for k, v in labels.items() if (m := re.fullmatch(r"nvidia\.com/mig-(.+)\.count", k))}
    (dev / "nvidiactl").touch()
    lines = []
    for i in range(gpus):
        (dev / f"nvidia{i}").touch()
        lines.append(f"GPU {i}: {product.replace('-', ' ')} (UUID: GPU-sim-{name}-{i})")
        for sl, count in mig.items():
            for j in range(count // max(gpus, 1)):
                lines.append(f"  MIG {sl:<12} Device {j:>2}: (UUID: MIG-sim-{name}-{i}-{sl}-{j})")
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n# SIMULATED nvidia-smi written by the gpuhub dev agent\ncat <<'EOF'\n"
                   + "\n".join(lines) + "\nEOF\n")
    smi.chmod(0o755)
    return {ENV_DEVICE_ROOT: str(dev), "NVIDIA_VISIBLE_DEVICES": "all", SIM_PATH_ENV: str(bin_dir)}


def image_ipython_dir(state_dir: Path) -> dict[str, str]:
    """$IPYTHONDIR with the image's ipython_config.py, so local kernels load the extension as the
    image's kernels do (the image has it in /etc/ipython, which a local process cannot use)."""
    if not IMAGE_IPYTHON_CONFIG.is_file():
        return {}
    profile = state_dir / "ipython" / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(IMAGE_IPYTHON_CONFIG, profile / "ipython_config.py")
    return {"IPYTHONDIR": str(profile.parent)}


def allow_root_config(state_dir: Path) -> dict[str, str]:
    """Run as root, the agent's Jupyter servers need `allow_root` (the pod's uid is a kubelet's to apply): a
    config folder that says so, on $JUPYTER_CONFIG_PATH. Nothing when the agent is not root."""
    import json
    import os

    if os.geteuid() != 0:
        return {}
    folder = state_dir / "jupyter-as-root"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": {"allow_root": True}}))
    rest = os.environ.get("JUPYTER_CONFIG_PATH")
    return {"JUPYTER_CONFIG_PATH": os.pathsep.join([str(folder), *([rest] if rest else [])])}


def container_port(container: dict) -> int:
    """The port the container serves on: its readiness probe's, else its first declared one, else 8888."""
    probe = ((container.get("readinessProbe") or {}).get("httpGet") or {}).get("port")
    if isinstance(probe, int):
        return probe
    ports = [p.get("containerPort") for p in container.get("ports") or [] if isinstance(p.get("containerPort"), int)]
    return ports[0] if ports else 8888


def container_env(pod: dict, container: dict) -> dict[str, str]:
    """The container's env with the downward-API fields a kubelet would fill in."""
    fields = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": pod["metadata"]["namespace"],
              "spec.nodeName": pod["spec"].get("nodeName", ""), "status.podIP": pod["status"].get("podIP", "")}
    env = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = e["value"] or ""
        elif ref := ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath"):
            if m := re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", ref):  # e.g. a JobSet rank
                env[e["name"]] = (pod["metadata"].get(m.group(1)) or {}).get(m.group(2), "")
            else:
                env[e["name"]] = fields.get(ref, "")
    return env


def rewrite_paths(env: dict[str, str], mounts: dict[str, Path]) -> dict[str, str]:
    """Env values that are paths inside a mount, pointed at the mount's local folder (longest mount wins)."""
    out = {}
    for k, v in env.items():
        for mount in sorted(mounts, key=len, reverse=True):
            if v == mount or v.startswith(mount.rstrip("/") + "/"):
                out[k] = str(mounts[mount]) + v[len(mount.rstrip("/")):]
                break
    return out


def mount_parents(env: dict[str, str], mounts: dict[str, Path], root: Path) -> dict[str, str]:
    """Env values naming a folder that holds mounts without being one (`/datasets` over `/datasets/NAME`): a folder
    of the pod's own under `root` with a link per mount, as a container's file system has its mount points."""
    out = {}
    for k, v in env.items():
        inside = [m for m in mounts if m.startswith(v.rstrip("/") + "/")]
        if (not v.startswith("/") or not v.strip("/") or not inside  # "/" (JUPYTERHUB_BASE_URL) is a URL prefix
                or any(v == m or v.startswith(m.rstrip("/") + "/") for m in mounts)):
            continue
        for mount in inside:
            link = root / mount.strip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            link.unlink(missing_ok=True)
            link.symlink_to(mounts[mount], target_is_directory=True)
        out[k] = str(root / v.strip("/"))
    return out


def read_only_command(cmd: list[str], folders: list[Path], as_root: bool) -> list[str]:
    """`cmd` in a mount namespace of its own where each folder is bound read-only over itself, as a kubelet mounts a
    `readOnly` volume: a write fails with EROFS, even as root. Not root: a user namespace maps the agent's user."""
    import shlex

    binds = " && ".join(f"mount --bind {shlex.quote(str(f))} {shlex.quote(str(f))} && "
                        f"mount -o remount,bind,ro {shlex.quote(str(f))}" for f in folders)
    own_user = [] if as_root else ["--map-root-user"]
    return ["unshare", "--mount", "--propagation", "private", *own_user, "sh", "-c", f'{binds} && exec "$@"', "sh",
            *cmd]


def read_only_mounts_work(scratch: Path) -> bool:
    """Whether this machine lets the agent make read-only mounts (`read_only_command`): tried once on a scratch
    folder, since containers and hardened kernels may forbid mount namespaces."""
    import os
    import subprocess

    if shutil.which("unshare") is None:
        return False
    folder = scratch / "read-only-probe"
    folder.mkdir(parents=True, exist_ok=True)
    probe = read_only_command(["sh", "-c", f'! touch "{folder}/written" 2>/dev/null'], [folder], os.geteuid() == 0)
    try:
        ok = subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return ok and not (folder / "written").exists()
