"""Suite-wide: the dev cluster fixtures (`cluster`, `namespace`, `scratch_root`, see devcluster/testing.py),
and the policy that under CI=true the cluster tier must really run, so a skipped cluster test fails."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Tests run the project's console scripts (gpuhub, gpuhub-singleuser, gpuhub-runner, jupyterhub) the way
# a person does; find them next to this interpreter even when the virtualenv is not activated.
_bin = str(Path(sys.executable).parent)
if _bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _bin + os.pathsep + os.environ.get("PATH", "")

pytest_plugins = ["devcluster.testing"]


def ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and ci() and item.get_closest_marker("cluster") and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = (f"a cluster test was skipped under CI=true, which counts as a failure: the cluster "
                        f"tier must really run.\nskip reason: {reason}")
