"""What each make target installs and builds, read from make's own dry run (`make -n -B`: every recipe
printed as if nothing were built yet, nothing executed): a fresh machine's `make dev` installs what the dev
hub needs and nothing more, and `make unit` needs no Go build."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GO_BUILD = "devcluster/jupyterhub_gpu_dev/binaries.py build"
TEST_ONLY = ("install -y -qq chromium", "install -y -qq prometheus")


def recipes(target: str) -> str:
    if shutil.which("make") is None:
        pytest.fail("make is missing: README's commands need it")
    # --no-print-directory: under `make test` this runs as a sub-make, which would print "Entering directory"
    r = subprocess.run(["make", "--no-print-directory", "-n", "-B", target], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_make_dev_builds_the_cluster_and_installs_no_test_only_packages():
    out = recipes("dev")
    assert GO_BUILD in out and "gpuhub dev" in out and "npm ci" in out
    for package in TEST_ONLY:
        assert package not in out


def test_make_unit_needs_no_go_build_and_no_test_only_packages():
    out = recipes("unit")
    assert "pytest -m" in out
    assert GO_BUILD not in out
    for package in TEST_ONLY:
        assert package not in out


def test_make_test_still_installs_chromium_and_prometheus_before_pytest():
    out = recipes("test")
    assert GO_BUILD in out
    for package in TEST_ONLY:
        assert package in out
        assert out.index(package) < out.index("-m pytest")


def test_dev_and_test_say_the_build_plan_first_before_any_install_and_the_build_does_not_repeat_it():
    for target in ("dev", "test"):
        lines = recipes(target).splitlines()
        assert lines[0].startswith("python3 devcluster/jupyterhub_gpu_dev/binaries.py plan"), lines[:3]
        (build,) = [line for line in lines if GO_BUILD in line]
        assert build.startswith("GPUHUB_BUILD_PLAN_SAID=1 ")


@pytest.mark.parametrize("target, parallel, then", [("test", "-j2 test-binaries test-installs", "-m pytest"),
                                                    ("dev", "-j2 dev-binaries install", "gpuhub dev")])
def test_make_test_and_dev_build_go_beside_the_installs_with_the_system_python(target, parallel, then):
    """The cold Go build (most of a fresh machine's first run) needs no venv, so the installs (and, for the
    tests, the image builds) go on beside it instead of before it."""
    out = recipes(target)
    (build,) = [line for line in out.splitlines() if GO_BUILD in line]
    assert build.split()[1] == "python3", build
    assert parallel in out
    assert out.index(parallel) < out.index(then)


@pytest.mark.parametrize("target", ["dev", "unit", "test"])
def test_the_dev_distribution_is_installed_editable_after_the_product(target):
    """devcluster/ is a distribution of its own (jupyterhub-gpu-dev, never in the product's wheel): the targets
    that run the dev hub or the suite install it into the venv, editable, right after the product it imports."""
    lines = recipes(target).splitlines()
    product = next(k for k, line in enumerate(lines) if line.endswith("pip install -q -e '.[test]'"))
    dev = next(k for k, line in enumerate(lines) if line.endswith("pip install -q --no-deps -e ./devcluster"))
    assert product < dev
