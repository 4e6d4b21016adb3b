"""The layering rules, checked on the source tree: the product never imports the simulator, and nothing
in the repository points at files outside it."""
from __future__ import annotations

import argparse
import ast
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: The product's packages (setup.cfg); the simulator is the development distribution's package (devcluster/).
PRODUCT = ("jupyterhub_gpu", "gpuhub")
SIMULATOR = "jupyterhub_gpu_dev"


def imported_modules(path: Path) -> set[str]:
    """Every absolute import, function-local ones too."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def tracked(*suffixes: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [REPO / f for f in out.stdout.splitlines() if f.endswith(suffixes) and (REPO / f).is_file()]


def product_files() -> list[Path]:
    return [p for p in tracked(".py") if p.relative_to(REPO).parts[0] in PRODUCT]


def test_the_product_never_imports_the_simulator():
    offenders = {}
    for p in product_files():
        name = str(p.relative_to(REPO))
        modules = imported_modules(p)
        bad = sorted(m for m in modules if m == SIMULATOR or m.startswith(f"{SIMULATOR}."))
        if bad:
            offenders[name] = bad
    assert not offenders


def test_the_product_names_no_simulator_module_in_strings_either():
    """Config strings such as a class path count too (the dev configuration sets those, not the product)."""
    offenders = [str(p.relative_to(REPO)) for p in product_files() if f'"{SIMULATOR}.' in p.read_text()]
    assert not offenders


def test_nothing_points_outside_the_repository():
    here = Path(__file__).resolve()
    texts = tracked(".py", ".md", ".ts", ".yaml", ".yml", ".cfg", ".toml", ".sh", "Dockerfile", "Makefile")
    offenders = [str(p.relative_to(REPO)) for p in texts if p != here  # this file names what it looks for
                 and any(ref in p.read_text(errors="replace") for ref in ("DESIGN.md", "../shared/"))]
    assert not offenders


def test_gpuhub_reaches_the_simulator_only_through_its_entry_point():
    """`gpuhub dev` and `gpuhub cluster` come from the dev distribution's `gpuhub.commands` entry point
    (devcluster/pyproject.toml)."""
    from importlib.metadata import entry_points

    from jupyterhub_gpu.tools.cli import COMMANDS_GROUP, build_parser

    assert {ep.name: ep.value for ep in entry_points(group=COMMANDS_GROUP)} == {
        "devcluster": "jupyterhub_gpu_dev.commands:add_commands"}
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"validate", "render", "doctor", "report", "dev", "cluster"} <= set(commands)


def test_a_declared_command_whose_module_is_absent_is_left_out(monkeypatch):
    """An entry point declared whose module is gone (the dev distribution's metadata left behind its folder): its
    commands are left out, the product's work."""
    from importlib.metadata import EntryPoint

    from jupyterhub_gpu.tools import cli

    absent = EntryPoint("devcluster", "no_such_module_here.commands:add_commands", cli.COMMANDS_GROUP)
    monkeypatch.setattr(cli, "entry_points", lambda group: [absent])
    commands = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"validate", "render", "doctor", "report"} <= set(commands) and "dev" not in commands
    assert cli.main(["validate", str(REPO / "jupyterhub_gpu/examples/profiles.yaml")]) == 0


def test_a_broken_command_plugin_is_said_and_the_products_commands_still_work(monkeypatch, capsys):
    from importlib.metadata import EntryPoint

    from jupyterhub_gpu.tools import cli

    def broken(sub):
        raise RuntimeError("a bug in the plugin")

    monkeypatch.setattr(cli, "entry_points", lambda group: [EntryPoint("x", "json:loads", cli.COMMANDS_GROUP)])
    monkeypatch.setattr(EntryPoint, "load", lambda self: broken)
    example = str(Path(__file__).resolve().parents[2] / "jupyterhub_gpu/examples/profiles.yaml")
    assert cli.main(["validate", example]) == 0
    said = capsys.readouterr().err
    assert "warning: gpuhub commands from json:loads left out: RuntimeError: a bug in the plugin" in said
