"""Under CI=true a skipped cluster test fails (tests/conftest.py): the cluster tier must really run."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SUITE_CONFTEST = Path(__file__).parents[1] / "conftest.py"

SAMPLE = '''
import pytest

@pytest.mark.cluster
def test_needs_cluster():
    pytest.skip("no cluster here")

def test_plain_skip():
    pytest.skip("not a cluster test")
'''


def run_sample(tmp_path: Path, ci: str | None) -> str:
    shutil.copy(SUITE_CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    cluster: needs the dev cluster\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    return r.stdout


@pytest.mark.parametrize("ci, expected", [("true", "1 failed, 1 skipped"), (None, "2 skipped")])
def test_skipped_cluster_test_fails_only_under_ci(tmp_path, ci, expected):
    out = run_sample(tmp_path, ci)
    assert expected in out, out
    if ci:
        assert "the cluster tier must really run" in out
