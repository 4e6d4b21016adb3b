"""The product's wheel, built from this checkout as a release builds it (`pip wheel --no-deps --no-build-isolation`,
from a copy of the checkout's files): one importable package named like the distribution, `jupyterhub_gpu`, and the
notebooks' `gpuhub`, nothing else; nothing in it imports the development distribution (devcluster/, package
jupyterhub_gpu_dev); its entry points resolve inside it; the server extension's config ships as a data file. The
JupyterLab extension's build output ships too when `make labextension` has built it (else that check skips)."""
from __future__ import annotations

import ast
import configparser
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = {"jupyterhub_gpu", "gpuhub"}
DEV_PACKAGE = "jupyterhub_gpu_dev"
LAB_BUILD = REPO / "labextension" / "build" / "jupyterhub-gpu-labextension"
LAB_DATA = "data/share/jupyter/labextensions/jupyterhub-gpu-labextension"
SERVER_CONFIG = "data/etc/jupyter/jupyter_server_config.d/jupyterhub_gpu.json"


def checkout_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [f for f in out.stdout.splitlines() if (REPO / f).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel's zip, built from a copy (the build writes build/ and *.egg-info beside the sources)."""
    src = tmp_path_factory.mktemp("checkout")
    for name in checkout_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    if LAB_BUILD.is_dir():  # `make labextension`'s output: ignored by git, shipped as data_files
        shutil.copytree(LAB_BUILD, src / LAB_BUILD.relative_to(REPO))
    dist = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                        str(src), "-w", str(dist)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (path,) = dist.glob("jupyterhub_gpu-*.whl")
    with zipfile.ZipFile(path) as z:
        yield z


def special(first: str) -> bool:
    return first.endswith((".dist-info", ".data"))


def modules(z: zipfile.ZipFile) -> list[str]:
    return [n for n in z.namelist() if n.endswith(".py") and not special(PurePosixPath(n).parts[0])]


def data_dir(z: zipfile.ZipFile) -> str:
    (name,) = {PurePosixPath(n).parts[0] for n in z.namelist() if PurePosixPath(n).parts[0].endswith(".data")}
    return name


def entry_points(z: zipfile.ZipFile) -> configparser.ConfigParser:
    (name,) = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
    cfg = configparser.ConfigParser(delimiters=("=",))
    cfg.optionxform = str
    cfg.read_string(z.read(name).decode())
    return cfg


def in_wheel(z: zipfile.ZipFile, module: str) -> bool:
    path = module.replace(".", "/")
    return f"{path}.py" in z.namelist() or f"{path}/__init__.py" in z.namelist()


def test_the_wheel_holds_jupyterhub_gpu_and_gpuhub_only(wheel):
    top = set()
    for name in wheel.namelist():
        first = PurePosixPath(name).parts[0]
        if not special(first):
            top.add(first.removesuffix(".py"))
    assert top == PRODUCT
    assert "jupyterhub_gpu/singleuser/__init__.py" in wheel.namelist()
    assert "jupyterhub_gpu/runner/main.py" in wheel.namelist()
    assert "jupyterhub_gpu/examples/profiles.yaml" in wheel.namelist()  # package data
    assert any(n.startswith("jupyterhub_gpu/hub/templates/") and n.endswith(".html") for n in wheel.namelist())


def test_nothing_in_the_wheel_imports_or_names_the_dev_distribution(wheel):
    offenders = {}
    for name in modules(wheel):
        text = wheel.read(name).decode()
        found = set()
        for node in ast.walk(ast.parse(text, name)):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
        bad = sorted(m for m in found if m == DEV_PACKAGE or m.startswith(f"{DEV_PACKAGE}."))
        bad += [q for q in (f'"{DEV_PACKAGE}.', f"'{DEV_PACKAGE}.") if q in text]  # a class path in a string
        if bad:
            offenders[name] = bad
    assert modules(wheel) and not offenders


def test_the_entry_points_keep_their_names_and_resolve_inside_the_wheel(wheel):
    eps = entry_points(wheel)
    assert set(eps["console_scripts"]) == {"gpuhub", "gpuhub-singleuser", "gpuhub-runner"}
    assert set(eps["jupyterhub.spawners"]) == {"gpu"}
    # `gpuhub dev` / `gpuhub cluster` come from the dev distribution's metadata, never the product's
    assert "gpuhub.commands" not in eps
    for group in eps.sections():
        for name, value in eps[group].items():
            assert in_wheel(wheel, value.split(":")[0].strip()), f"{group} {name} = {value}"


def test_the_server_extension_config_ships_and_names_a_module_of_the_wheel(wheel):
    config = json.loads(wheel.read(f"{data_dir(wheel)}/{SERVER_CONFIG}"))
    enabled = config["ServerApp"]["jpserver_extensions"]
    assert enabled == {"jupyterhub_gpu.singleuser.server": True}
    assert all(in_wheel(wheel, module) for module in enabled)


def test_the_lab_extension_build_ships_as_data_files(wheel):
    if not LAB_BUILD.is_dir():
        pytest.skip(f"{LAB_BUILD.relative_to(REPO)} is absent (`make labextension` builds it): the wheel's JupyterLab "
                    "extension files are not checked")
    shipped = {n for n in wheel.namelist() if n.startswith(f"{data_dir(wheel)}/{LAB_DATA}/")}
    assert f"{data_dir(wheel)}/{LAB_DATA}/package.json" in shipped
    assert any("/static/" in n for n in shipped)
