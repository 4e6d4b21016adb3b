"""The singleuser GPU health check against a simulated device folder and a simulated nvidia-smi."""
from __future__ import annotations

import os
import stat
import subprocess

import pytest

from extension import gpucheck

MIG_LIST = """GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-sim-0)
  MIG 1g.10gb     Device  0: (UUID: MIG-sim-0)
"""


@pytest.fixture
def device(tmp_path):
    """A node as the device plugin prepares it: /dev/nvidiactl, /dev/nvidia0 and nvidia-smi."""
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidiactl").touch()
    (dev / "nvidia0").touch()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()

    def make(listing: str, rc: int = 0):
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\ncat <<'OUT'\n{listing}OUT\nexit {rc}\n")
        smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
        return {"GPUHUB_DEVICE_ROOT": str(dev), "PATH": f"{bin_dir}:{os.environ['PATH']}",
                "GPUHUB_NODE_NAME": "aks-gpumig-0", "NVIDIA_VISIBLE_DEVICES": "MIG-sim-0"}

    make.dev = dev
    return make


def env_for(kind, count=1, resource="nvidia.com/gpu", mig=None, **extra):
    env = {"GPUHUB_GPU_KIND": kind, "GPUHUB_GPU_COUNT": str(count), "GPUHUB_GPU_RESOURCE": resource, **extra}
    if mig:
        env["GPUHUB_MIG_PROFILE"] = mig
    return env


def test_cpu_profile_needs_no_gpu():
    assert gpucheck.check({"GPUHUB_GPU_KIND": "none", "PATH": "/nonexistent"}) is None


def test_mig_slice_visible(device):
    env = {**device(MIG_LIST), **env_for("mig", resource="nvidia.com/mig-1g.10gb", mig="1g.10gb")}
    assert gpucheck.check(env) is None


def test_wrong_mig_slice_fails(device):
    env = {**device(MIG_LIST), **env_for("mig", resource="nvidia.com/mig-3g.40gb", mig="3g.40gb")}
    msg = gpucheck.check(env)
    assert msg.startswith("GPU check failed on node aks-gpumig-0: this server was given 1 x nvidia.com/mig-3g.40gb")
    assert "nvidia-smi -L shows 0 MIG 3g.40gb device(s)" in msg


def test_missing_device_files_name_node_and_cause(device):
    env = {**device("GPU 0: Tesla T4 (UUID: GPU-sim)\n"), **env_for("time-sliced")}
    (device.dev / "nvidiactl").unlink()
    msg = gpucheck.check(env)
    assert "on node aks-gpumig-0" in msg and "nvidiactl does not exist" in msg
    assert "driver or device plugin on that node is probably not ready" in msg


def test_void_visible_devices(device):
    env = {**device("GPU 0: Tesla T4\n"), **env_for("full"), "NVIDIA_VISIBLE_DEVICES": "void"}
    assert "NVIDIA_VISIBLE_DEVICES is 'void'" in gpucheck.check(env)


def test_full_gpu_count_short(device):
    env = {**device("GPU 0: NVIDIA H100 NVL (UUID: GPU-a)\n"), **env_for("full", count=2)}
    assert "nvidia-smi -L lists 1 GPU(s)" in gpucheck.check(env)


def test_nvidia_smi_error(device):
    env = {**device("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", rc=9),
           **env_for("full")}
    assert "nvidia-smi failed: NVIDIA-SMI has failed" in gpucheck.check(env)


def test_entrypoint_exits_with_termination_message(device, tmp_path):
    log = tmp_path / "termination-log"
    env = {**os.environ, **device(""), **env_for("full"), "GPUHUB_TERMINATION_LOG": str(log)}
    r = subprocess.run(["gpuhub-singleuser", "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == gpucheck.EXIT_GPU_MISSING
    assert "nvidia-smi -L lists no GPU" in r.stderr
    assert log.read_text() == r.stderr.strip()


def test_entrypoint_execs_singleuser_when_gpu_is_there(device):
    env = {**os.environ, **device("GPU 0: Tesla T4 (UUID: GPU-sim)\n"), **env_for("time-sliced")}
    r = subprocess.run(["gpuhub-singleuser", "--version"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()[0].isdigit()  # jupyterhub-singleuser printed its version


def test_check_only_the_init_containers_run_checks_and_never_starts_jupyter(device, tmp_path):
    """`gpuhub-singleuser --gpu-check-only` (the GPU server pod's init container): the verdict alone, in its
    own termination message; 0 when the GPU is there, without starting jupyterhub-singleuser."""
    log = tmp_path / "termination-log"
    env = {**os.environ, **device("GPU 0: Tesla T4 (UUID: GPU-sim)\n"), **env_for("time-sliced"),
           "GPUHUB_TERMINATION_LOG": str(log)}
    r = subprocess.run(["gpuhub-singleuser", "--gpu-check-only"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("GPU check passed on node aks-gpumig-0"), (r.stdout, r.stderr)
    assert not log.exists()
    broken = {**env, **env_for("full", count=2)}
    r = subprocess.run(["gpuhub-singleuser", "--gpu-check-only"], env=broken, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == gpucheck.EXIT_GPU_MISSING and log.read_text().startswith("GPU check failed on node")
