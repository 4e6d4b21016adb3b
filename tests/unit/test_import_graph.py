"""The layers hold in the imports (module- and function-level, read with `ast`: tests/unit/import_graph.py).

What is still wrong is listed here by name, each a debt to pay: a new cycle, upward import, service-to-service
import or private name taken across packages fails; so does a listed one that is gone (strike it from the list,
so the list only ever shrinks)."""
from __future__ import annotations

import import_graph as ig  # beside this file (pytest puts the folder on sys.path)
import pytest

#: Cycles still there (their modules), upward imports, service→service imports and private names across packages.
KNOWN_CYCLES: list[list[str]] = []
KNOWN_UPWARD: set[tuple[str, str]] = set()
#: gpu-jobs hosts the notification service: its composition root (services/jobs/app.py) may wire it in.
COMPOSITION_ROOTS = {("jupyterhub_gpu.services.jobs.app", "notify")}
#: What several services share (services/web.py: the handler base; services/auth.py: TokenAuth) is no service.
KNOWN_SERVICE_TO_SERVICE: set[tuple[str, str]] = set()
KNOWN_PRIVATE: set[tuple[str, str, str]] = set()


@pytest.fixture(scope="module")
def edges() -> list[ig.Import]:
    return ig.graph()


def test_the_reader_sees_the_imports_it_should():
    """The reader itself: module- and function-level imports, relative ones, `from pkg import module`."""
    edges = ig.graph()
    pairs = {(e.source, e.target) for e in edges}
    # `from jupyterhub_gpu.builders import pods`
    assert ("jupyterhub_gpu.hub.spawner", "jupyterhub_gpu.builders.pods") in pairs
    # imports in functions
    assert any(s == "jupyterhub_gpu.tools.cli" and t.startswith("jupyterhub_gpu.builders.") for s, t in pairs)
    assert ig.cycles([ig.Import("a", "b"), ig.Import("b", "c"), ig.Import("c", "a"), ig.Import("c", "d")]) == \
        [["a", "b", "c"]]


def test_no_new_import_cycle_and_the_known_ones_still_listed(edges):
    found = ig.cycles(edges)
    new = [c for c in found if c not in KNOWN_CYCLES]
    gone = [c for c in KNOWN_CYCLES if c not in found]
    assert not new, f"new import cycles: {new}"
    assert not gone, f"cycles no longer there (strike them from KNOWN_CYCLES): {gone}"


def test_no_new_upward_import(edges):
    found = {(e.source, e.target) for e in ig.upward(edges)}
    assert found <= KNOWN_UPWARD, f"imports that run up the layers: {sorted(found - KNOWN_UPWARD)}"
    assert not KNOWN_UPWARD - found, f"no longer there (strike them): {sorted(KNOWN_UPWARD - found)}"


def test_services_import_no_other_service_outside_a_composition_root(edges):
    found = {(e.source, e.target) for e in ig.service_to_service(edges)
             if (e.source, ig.service_of(e.target)) not in COMPOSITION_ROOTS}
    assert found <= KNOWN_SERVICE_TO_SERVICE, f"service imports another: {sorted(found - KNOWN_SERVICE_TO_SERVICE)}"
    assert not KNOWN_SERVICE_TO_SERVICE - found, \
        f"no longer there (strike them): {sorted(KNOWN_SERVICE_TO_SERVICE - found)}"


def test_no_private_name_taken_across_packages(edges):
    found = {(e.source, e.target, n) for e in ig.private_across_packages(edges) for n in e.names if n.startswith("_")}
    assert found <= KNOWN_PRIVATE, f"private names taken across packages: {sorted(found - KNOWN_PRIVATE)}"
    assert not KNOWN_PRIVATE - found, f"no longer there (strike them): {sorted(KNOWN_PRIVATE - found)}"
