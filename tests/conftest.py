"""Suite-wide: the dev cluster fixtures (`cluster`, `namespace`, `scratch_root`, see
devcluster/jupyterhub_gpu_dev/testing.py), headless Chromium (`browser`) for what a person sees, and the policy that
under CI=true the cluster tier must really run, so a skipped cluster test fails."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Two noisy cores: hypothesis' default 200 ms deadline per example fails tests on load, not on a defect. Time
# is measured in bench/ (and parsers' costs by CPU time in tests/security); a test that needs a deadline sets it.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

# Tests run the project's console scripts (gpuhub, gpuhub-singleuser, gpuhub-runner, jupyterhub) the way
# a person does; find them next to this interpreter even when the virtualenv is not activated.
_bin = str(Path(sys.executable).parent)
if _bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _bin + os.pathsep + os.environ.get("PATH", "")

pytest_plugins = ["jupyterhub_gpu_dev.testing"]


def ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


#: Tiers are markers, decided by what a test uses, wherever the test lives. A test with none of them is
#: pure (the `unit` tier: `make unit`, i.e. `pytest -m "not (cluster or services or kernel or browser or ship)"`).
TIER_FIXTURES = {
    # the dev cluster (devcluster/jupyterhub_gpu_dev/testing.py): real control plane
    "cluster": {"cluster"},
    "services": {"prometheus", "exporter", "hub", "fresh"},  # a real hub (+ Prometheus), e.g. tests/culler
    "browser": {"browser", "hub_page"},      # headless Chromium
    # the way it ships: the z2jh chart rendered by the real helm (a Go build), the images `make images` built,
    # run as containers (podman; real kubelets)
    "ship": {"chart", "built_images", "z2jh_install"},
}


def pytest_collection_modifyitems(config, items):
    """Mark each test with the tiers its fixtures imply, so no test can land in the wrong tier; then the ship
    tier first, its real nodes first of all (the longest single file: on `make test`'s two workers it starts
    at once instead of last, while the other worker takes the rest; the pure tier's many short files, at the
    end as collected, even out the finish)."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in TIER_FIXTURES.items():
            if used & fixtures and not item.get_closest_marker(marker):
                item.add_marker(getattr(pytest.mark, marker))
    rank: dict = {}  # by file, so a file stays whole: 0 the real nodes, 1 the rest of the ship tier, 2 the others
    for item in items:
        here = 0 if "z2jh_install" in getattr(item, "fixturenames", ()) else 1 if item.get_closest_marker("ship") else 2
        rank[item.path] = min(rank.get(item.path, 2), here)
    items.sort(key=lambda item: rank[item.path])  # stable


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and ci() and item.get_closest_marker("cluster") and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = (f"a cluster test was skipped under CI=true, which counts as a failure: the cluster "
                        f"tier must really run.\nskip reason: {reason}")


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                 "--disable-background-networking", "--disable-component-update"]


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium driven by Playwright (make test installs chromium)."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def hub_page(browser):
    """`hub_page(hub_url, user)`: a new page logged in to a dev hub through its login form (the
    DevAuthenticator takes a name only); closed after the test."""
    pages = []

    def open_page(url: str, user: str, width: int = 1200, height: int = 1100):
        page = browser.new_page(viewport={"width": width, "height": height})
        pages.append(page)
        page.goto(f"{url}/hub/login")
        page.fill("input[name=username]", user)
        page.click("#login_submit")
        return page

    yield open_page
    for page in pages:
        page.close()


@pytest.fixture
def artifacts() -> Path:
    """Where browser tests keep their screenshots (artifacts/, ignored by git)."""
    path = Path(__file__).resolve().parents[1] / "artifacts"
    path.mkdir(exist_ok=True)
    return path


#: axe-core from npm (package.json, pinned by package-lock.json; `make install` runs `npm ci`).
AXE_JS = Path(__file__).resolve().parents[1] / "node_modules" / "axe-core" / "axe.min.js"


@pytest.fixture
def axe():
    """`axe(page, include=None)`: axe-core's WCAG 2.1 A/AA checks run in the page (or in the `include`
    selectors), returning the serious and critical violations as readable lines (none: [])."""
    if not AXE_JS.is_file():
        pytest.skip("axe-core is not installed (make install runs npm ci)")

    def run(page, include: list[str] | None = None) -> list[str]:
        if not page.evaluate("() => typeof window.axe !== 'undefined'"):
            page.add_script_tag(path=str(AXE_JS))
        context = {"include": [[s] for s in include]} if include else None
        found = page.evaluate("""async ([context]) => (await axe.run(context || document, {
            runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']},
            resultTypes: ['violations']})).violations""", [context])
        return [f"{v['id']} ({v['impact']}): {v['help']} — {n['target']}: {n.get('failureSummary', '')}"
                for v in found if v.get("impact") in ("serious", "critical") for n in v["nodes"]]

    return run
