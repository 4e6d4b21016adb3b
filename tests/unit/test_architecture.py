"""The layering rules, checked on the source tree: the product never imports the simulator, and nothing
in the repository points at files outside it."""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("gpu_spawner", "extension", "runner")


#: `gpuhub dev` / `gpuhub cluster` start the simulator, so the CLI may import it inside those commands.
DISPATCHES_TO_THE_SIMULATOR = {"gpu_spawner/tools/cli.py"}


def imported_modules(path: Path, module_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if module_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
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
        modules = imported_modules(p, module_level_only=name in DISPATCHES_TO_THE_SIMULATOR)
        bad = sorted(m for m in modules if m == "devcluster" or m.startswith("devcluster."))
        if bad:
            offenders[name] = bad
    assert not offenders


def test_the_product_names_no_simulator_module_in_strings_either():
    """Config strings such as a class path count too (the dev configuration sets those, not the product)."""
    offenders = [str(p.relative_to(REPO)) for p in product_files() if '"devcluster.' in p.read_text()]
    assert not offenders


def test_nothing_points_outside_the_repository():
    here = Path(__file__).resolve()
    texts = tracked(".py", ".md", ".ts", ".yaml", ".yml", ".cfg", ".toml", ".sh", "Dockerfile", "Makefile")
    offenders = [str(p.relative_to(REPO)) for p in texts if p != here  # this file names what it looks for
                 and any(ref in p.read_text(errors="replace") for ref in ("DESIGN.md", "../shared/"))]
    assert not offenders
