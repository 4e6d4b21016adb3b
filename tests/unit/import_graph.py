"""The product's import graph, read from the code (module- and function-level imports), and what the layering rules
say of it: cycles, imports that run upward, one service package importing another, private names taken across
packages. Used by test_import_graph.py; `python tests/unit/import_graph.py` prints the findings."""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "jupyterhub_gpu"

#: Layer of each top-level part, lowest first; an import may only go to the same layer or below.
#: `kubeio` (informers, API clients, kube config) has its own layer between builders and services, not
#: cluster's: it does I/O, and the pure layers below it (model, cluster facts, builders) must not reach it;
#: services, hub and tools all use it, so it sits below them. `wire` (gpu-jobs' answers as pydantic models, the
#: source of the JupyterLab extension's types) is part of the contract: it imports nothing above it. `singleuser` (the
#: kernel and single-user server side) and `runner` (a Job's pod) are processes of their own, above everything the hub
#: runs: they may use the contract and the pure layers, and nothing imports them.
LAYERS = {"contract": 0, "wire": 0, "parameters": 0, "reports": 0, "model": 1, "cluster": 2, "builders": 3, "kubeio": 4,
          "services": 5, "hub": 6, "config": 7, "tools": 7, "__init__": 7, "singleuser": 8, "runner": 8}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    names: tuple[str, ...] = field(default=())


def _resolve(source: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = source.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """Every import of the product's own modules in `path`, wherever it stands (functions included)."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    out.append(Import(name, _closest(alias.name, known)))
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(name, path.name == "__init__.py", node)
            if target.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:  # `from pkg import module` imports that module
                sub = f"{target}.{alias.name}"
                if sub in known:
                    out.append(Import(name, sub))
                else:
                    out.append(Import(name, _closest(target, known), (alias.name,)))
    return [i for i in out if i.target and i.target != name]


def _closest(name: str, known: set[str]) -> str:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def graph() -> list[Import]:
    mods = modules()
    known = set(mods)
    return [i for name, path in mods.items() for i in imports_of(name, path, known)]


def part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def cycles(edges: list[Import]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    adj: dict[str, set[str]] = {}
    for e in edges:
        adj.setdefault(e.source, set()).add(e.target)
        adj.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(adj):
        if v not in index:
            visit(v)
    return sorted(out)


def upward(edges: list[Import]) -> list[Import]:
    return [e for e in edges if LAYERS.get(part(e.target), 0) > LAYERS.get(part(e.source), 0)]


def service_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "services" else None


def service_to_service(edges: list[Import]) -> list[Import]:
    return [e for e in edges if service_of(e.source) and service_of(e.target)
            and service_of(e.source) != service_of(e.target)]


def private_across_packages(edges: list[Import]) -> list[Import]:
    def pkg(m: str) -> str:
        return m.rpartition(".")[0]
    return [e for e in edges if any(n.startswith("_") and not n.startswith("__") for n in e.names)
            and pkg(e.source) != pkg(e.target)]


def report() -> dict[str, list]:
    edges = graph()
    return {"cycles": cycles(edges), "upward": upward(edges), "service_to_service": service_to_service(edges),
            "private_across_packages": private_across_packages(edges)}


if __name__ == "__main__":
    for kind, items in report().items():
        print(f"{kind}: {len(items)}")
        for item in items:
            print("  ", item if not isinstance(item, Import) else f"{item.source} -> {item.target} {item.names or ''}")
