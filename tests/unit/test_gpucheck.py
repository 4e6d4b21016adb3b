"""The singleuser GPU health check against a simulated device folder and a simulated nvidia-smi."""
from __future__ import annotations

import os
import stat
import subprocess

import pytest

from jupyterhub_gpu.singleuser import gpucheck

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


# ---------------------------------------------------------------- a dra pool: the devices its claim put there
A100_LIST = "GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-a)\n"
TWO_A100 = A100_LIST + "GPU 1: NVIDIA A100 80GB PCIe (UUID: GPU-b)\n"
MIG_3G = "GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-p)\n  MIG 3g.40gb     Device  0: (UUID: MIG-c)\n"


def dra_env(devices: str, visible: str = "void", **kw):
    """What a dra pool's pod has: the NVIDIA DRA driver's CDI spec sets NVIDIA_VISIBLE_DEVICES=void."""
    return {**env_for("full", **kw), "GPUHUB_DRA_DEVICES": devices, "NVIDIA_VISIBLE_DEVICES": visible}


def test_dra_void_is_no_fault_and_the_given_gpu_is_named(device):
    env = {**device(A100_LIST), **dra_env("full:1")}
    assert gpucheck.verdict(env) == (None, "1 whole GPU (GPU-a)")


def test_dra_fewer_gpus_than_the_claim_asks_says_what_was_given(device):
    env = {**device(A100_LIST), **dra_env("full:2", count=2)}
    msg = gpucheck.check(env)
    assert msg.startswith("GPU check failed on node aks-gpumig-0: this server was given 2 whole GPUs through its "
                          "ResourceClaim (DRA), but its ResourceClaim put 1 whole GPU (GPU-a) in the container")
    assert "its DRA driver (kubelet plugin)" in msg and "device plugin on" not in msg


def test_dra_counts_the_uuids_nvidia_visible_devices_names(device):
    assert gpucheck.verdict({**device(TWO_A100), **dra_env("full:2", visible="GPU-a,GPU-b")})[1] == \
        "2 whole GPUs (GPU-a, GPU-b)"
    short = gpucheck.check({**device(TWO_A100), **dra_env("full:2", visible="GPU-a")})
    assert "put 1 whole GPU (GPU-a) in the container" in short  # nvidia-smi's second GPU was not given
    unseen = gpucheck.check({**device(A100_LIST), **dra_env("full:2", visible="GPU-a,GPU-z")})
    assert "NVIDIA_VISIBLE_DEVICES names GPU-z, which nvidia-smi -L does not show" in unseen


def test_dra_alternatives_accept_any_choice_and_a_mig_parent_is_not_a_whole_gpu(device):
    either = "full:1 mig:1:3g.40gb"
    assert gpucheck.verdict({**device(MIG_3G), **dra_env(either)}) == (None, "1 MIG 3g.40gb slice (MIG-c)")
    assert gpucheck.check({**device(A100_LIST), **dra_env(either)}) is None
    msg = gpucheck.check({**device(MIG_3G), **dra_env("full:1")})
    assert "was given 1 whole GPU through" in msg and "put 1 MIG 3g.40gb slice (MIG-c) in the container" in msg
    other = gpucheck.check({**device(MIG_3G.replace("3g.40gb", "1g.10gb")), **dra_env(either)})
    assert "given 1 whole GPU, else 1 MIG 3g.40gb slice through its ResourceClaim" in other


def test_dra_more_gpus_than_the_claim_or_a_uuid_twice_is_a_fault(device):
    """A 1-GPU claim with every GPU of the node in the container is an isolation failure, not a pass; a UUID
    named twice is one GPU."""
    leak = gpucheck.check({**device(TWO_A100), **dra_env("full:1", visible="GPU-a,GPU-b")})
    assert "put 2 whole GPUs (GPU-a, GPU-b) in the container" in leak
    twice = gpucheck.check({**device(TWO_A100), **dra_env("full:2", visible="GPU-a,GPU-a")})
    assert "put 1 whole GPU (GPU-a) in the container" in twice


def test_dra_nothing_listed(device):
    msg = gpucheck.check({**device("No devices found.\n"), **dra_env("full:1")})
    assert "its ResourceClaim put no GPU in the container" in msg


def test_dra_choices_parse():
    assert gpucheck.dra_choices("full:1 mig:2:3g.40gb bogus x:1") == [("full", 1, None), ("mig", 2, "3g.40gb")]


def test_dra_check_only_says_what_the_claim_gave(device, tmp_path):
    env = {**os.environ, **device(A100_LIST), **dra_env("full:1"), "GPUHUB_TERMINATION_LOG": str(tmp_path / "t")}
    r = subprocess.run(["gpuhub-singleuser", "--gpu-check-only"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "GPU check passed on node aks-gpumig-0: its ResourceClaim gave 1 whole GPU (GPU-a)"
