"""The images `make images` builds (devcluster/jupyterhub_gpu_dev/images.py, images/README.md): each is in the cache
under the key of its current inputs, and a container of each really runs here with podman and runc, as uid 1000 (the
chart's proxy stand-in as 65534, configurable-http-proxy of z2jh 4.4.0 serving its REST API). The hub's
JupyterHub is the z2jh 4.4.0 hub's 5.5 and validates the example profiles file; the singleuser server's GPU
check lets a CPU server through to jupyterhub-singleuser and stops a GPU one that sees no GPU; the runner
executes a notebook in a real kernel inside its container."""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import time

import pytest

from jupyterhub_gpu_dev import images

EXAMPLE = "$(python3 -c 'from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES; print(EXAMPLE_PROFILES)')"


@pytest.fixture(scope="module")
def built_images() -> dict[str, str]:
    """name -> tag in podman's storage (loaded from the cache if need be); fails if `make images` has not run."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed: `make images` installs it with apt and builds the images")
    names = images.buildable()
    gone = [n for n in names if not images.archive(n).is_file()]
    if gone:
        pytest.fail(f"{', '.join(gone)}: no image in {images.images_dir()} for the current sources; run `make images`")
    images.images_dir().mkdir(parents=True, exist_ok=True)
    return {n: images.ensure(n, images.images_dir() / "build.log") for n in names}


@pytest.fixture(scope="module")
def hub_image(built_images) -> str:
    if "hub" not in built_images:
        pytest.skip(images.NO_PINS.format(images.hub_pins()))
    return built_images["hub"]


def run(ref: str, *cmd: str, env: dict[str, str] | None = None, volume: str | None = None):
    """One container of the image, no network, with this machine's runtime settings (runc, lowered rlimits)."""
    args = ["run", "--rm", "--network", "none", *(a for k, v in (env or {}).items() for a in ("-e", f"{k}={v}"))]
    if volume:
        args += ["--volume", volume]
    return images.podman(*args, ref, *cmd, capture_output=True, text=True, timeout=300)


def test_every_image_is_cached_under_the_key_of_its_inputs_and_runs_as_uid_1000(built_images):
    assert set(built_images) >= {"singleuser-cpu", "singleuser-cuda", "runner-cuda", "chp"}
    for name, ref in built_images.items():
        assert ref == f"{images.REPO}/{name}:{images.key(name)}"
        assert images.archive(name).name == f"{name}-{images.key(name)}.tar" and images.archive(name).stat().st_size
        out = run(ref, "id", "-u")
        uid = "65534" if name == "chp" else "1000"  # the chart runs its proxy as nobody
        assert (out.returncode, out.stdout.strip()) == (0, uid), f"{name}: {out.stdout}{out.stderr}"


def test_proxy_stand_in_is_the_charts_configurable_http_proxy_and_serves_its_api(built_images):
    ref = built_images["chp"]
    out = run(ref, "configurable-http-proxy", "--version")
    assert (out.returncode, out.stdout.strip()) == (0, images.CHP_VERSION), out.stdout + out.stderr
    chart = ("configurable-http-proxy --ip= --api-ip= --api-port=8001 --default-target=http://hub:8081 "
             "--error-target=http://hub:8081/hub/error --port=8000")  # the chart's Deployment's command line
    api = "fetch('http://127.0.0.1:8001/api/routes').then(r => r.text()).then(console.log)"
    out = run(ref, "sh", "-c", f'timeout 5 {chart} & sleep 3; node -e "{api}"; wait')
    assert '{"/":{"target":"http://hub:8081"' in out.stdout, out.stdout + out.stderr


def test_hub_image_runs_jupyterhub_5_5_and_validates_the_example_profiles(hub_image):
    version = run(hub_image, "jupyterhub", "--version")
    assert version.returncode == 0 and version.stdout.strip().startswith("5.5."), version.stdout + version.stderr
    out = run(hub_image, "sh", "-c", f'gpuhub validate "{EXAMPLE}" && python3 -c "import kubespawner, '
              'jupyterhub_gpu.hub.spawner; print(kubespawner.__version__)"')
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1] == "7.0.0"  # z2jh 4.4.0's KubeSpawner, kept by the package


@pytest.mark.parametrize("name", ["singleuser-cpu", "singleuser-cuda"])
def test_singleuser_checks_the_gpu_then_becomes_jupyterhub_singleuser(built_images, name):
    ref = built_images[name]
    out = run(ref, "gpuhub-singleuser", "--help-all")  # a CPU server: no GPU promised, straight to Jupyter
    assert out.returncode == 0 and "JupyterHubSingleUser(ExtensionApp) options" in out.stdout, out.stdout + out.stderr
    gpu = {"GPUHUB_GPU_KIND": "full", "GPUHUB_GPU_COUNT": "1", "GPUHUB_GPU_RESOURCE": "nvidia.com/gpu"}
    out = run(ref, "gpuhub-singleuser", env=gpu)
    assert out.returncode == 3 and "GPU check failed" in out.stderr and "nvidiactl does not exist" in out.stderr
    lab = run(ref, "jupyter", "labextension", "list")
    assert "jupyterhub-gpu-labextension" in lab.stdout + lab.stderr and "enabled" in lab.stdout + lab.stderr


def test_cuda_variants_carry_the_nvidia_environment_of_the_cuda_base(built_images):
    for name in ("singleuser-cuda", "runner-cuda"):
        out = run(built_images[name], "printenv", "NVIDIA_VISIBLE_DEVICES")
        assert out.stdout.strip() == "all", name
    assert run(built_images["singleuser-cpu"], "printenv", "NVIDIA_VISIBLE_DEVICES").returncode == 1


def test_runner_executes_a_notebook_in_a_kernel_inside_its_container(built_images, tmp_path):
    notebook = {"cells": [{"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {}, "outputs": [],
                           "source": "import os\nprint(6 * 7, os.getuid())"}],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "notebook.gz").write_bytes(gzip.compress(json.dumps(notebook).encode()))
    tmp_path.chmod(0o777)  # the container's uid 1000 writes the output here
    out = run(built_images["runner-cuda"], "gpuhub-runner", "--snapshot", "/work/notebook.gz", "--output",
              "/work/out.ipynb", volume=f"{tmp_path}:/work")
    assert out.returncode == 0, out.stdout + out.stderr
    cell = json.loads((tmp_path / "out.ipynb").read_text())["cells"][0]
    assert "".join(cell["outputs"][0]["text"]).strip() == "42 1000"


def test_a_warm_make_images_builds_nothing(built_images):
    """Everything cached: `python devcluster/jupyterhub_gpu_dev/images.py build` only checks keys (seconds, no build
    tool runs)."""
    start = time.monotonic()
    script = images.ROOT / "devcluster" / "jupyterhub_gpu_dev" / "images.py"
    out = subprocess.run(["python3", str(script), "build"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "building" not in out.stderr, out.stderr
    assert time.monotonic() - start < 30  # measured: under a second
    assert {line.split("\t")[0] for line in out.stdout.splitlines()} == set(built_images)


def test_the_build_machines_own_ca_certificates_stay_out_of_the_images(built_images):
    """The host's CA bundle is mounted into builds only: no image trusts this machine's local CAs."""
    from pathlib import Path

    local = [p.read_text().strip() for p in Path("/usr/local/share/ca-certificates").glob("*.crt")]
    if not local:
        pytest.skip("this machine adds no local CA certificates")
    for name, ref in built_images.items():
        bundle = run(ref, "cat", "/etc/ssl/certs/ca-certificates.crt").stdout
        assert bundle and not any(cert.splitlines()[1] in bundle for cert in local), name
