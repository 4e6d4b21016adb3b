"""The cold Go build says what it builds and roughly how long is left
(devcluster/jupyterhub_gpu_dev/build_progress.py)."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyterhub_gpu_dev import binaries
from jupyterhub_gpu_dev import build_progress as bp

ORDER = list(binaries.CLUSTER_BINARIES)


def _times(folder: Path, *lines: str, mtime: float | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / "build-times.json"
    f.write_text("".join(line + "\n" for line in lines))
    if mtime is not None:
        os.utime(f, (mtime, mtime))


def test_every_binary_has_a_default_and_a_purpose():
    for b in ORDER:
        assert bp.family(b) in bp.DEFAULT_SECONDS, b
        assert bp.family(b) in bp.PURPOSE, b
    assert bp.family(binaries.JOBSET_BINARY) == "jobset" and bp.family(binaries.HELM_BINARY) == "helm"


def test_recorded_times_are_read_from_every_stamp_folder_newest_last_and_garbage_is_skipped(tmp_path):
    now = time.time()
    _times(tmp_path / "bin-old", json.dumps({"etcd": 99.0, "kwok": 200, "jobset-v0.9.0": 70}), mtime=now - 1000)
    _times(tmp_path / "bin-new", "not json", "[1, 2]", json.dumps({"etcd": 40.5}),
           json.dumps({"kueue": "fast", "kube-apiserver": -3, "kube-scheduler": True, "helm-v3.22.0": 1e9,
                       "kube-controller-manager": 61}), "{", mtime=now)
    (tmp_path / "bin-dir-not-file").mkdir()
    (tmp_path / "bin-dir-not-file" / "build-times.json").mkdir()
    assert bp.recorded(tmp_path) == {"etcd": 40.5, "kwok": 200.0, "jobset": 70.0, "kube-controller-manager": 61.0}
    assert bp.recorded(tmp_path / "nowhere") == {}


def test_estimates_use_this_machines_record_else_the_two_core_default():
    est = bp.estimates(ORDER, {"etcd": 30.0, "jobset": 50.0})
    assert est["etcd"] == 30.0 and est[binaries.JOBSET_BINARY] == 50.0
    defaults = bp.DEFAULT_SECONDS
    assert (est["kube-apiserver"], est["kueue"], est[binaries.HELM_BINARY]) == (
        defaults["kube-apiserver"], defaults["kueue"], defaults["helm"])


def test_the_plan_names_each_binary_why_and_the_total_once():
    est = bp.estimates(ORDER, {})
    text = bp.plan(ORDER, est, {}, Path("/cache/bin-abc"))
    total = bp.minutes(sum(est.values()))  # 21 min with the measured defaults
    assert text.startswith(f"building 8 dev-cluster binaries from Go modules into /cache/bin-abc: about {total}")
    assert total == "21 min"
    assert "measured on 2 cores" in text and "later runs reuse it" in text
    for b in ORDER:
        assert f"  {b}: {bp.PURPOSE[bp.family(b)]}, ~" in text
    known = {bp.family(b): 60.0 for b in ORDER}
    one = bp.plan(["etcd"], bp.estimates(["etcd"], known), known, Path("/c"))
    assert one.startswith("building 1 dev-cluster binary ") and "about 60 s in all (from this machine's" in one


def test_time_left_counts_the_rest_of_this_binary_and_all_after_it_never_below_five_seconds():
    est = {"a": 100.0, "b": 50.0, "c": 10.0}
    order = list(est)
    assert bp.left(order, est, 0, 0) == 160
    assert bp.left(order, est, 0, 40) == 120
    assert bp.left(order, est, 1, 500) == 15  # overran: 5 s for it, 10 s for c
    assert bp.minutes(3) == "5 s" and bp.minutes(44.3) == "45 s" and bp.minutes(459) == "8 min"
    assert bp.minutes(3900) == "1 h 5 min" and bp.clock(459.5) == "7:39"


def test_the_bar_fills_with_elapsed_time_and_stays_full_past_its_estimate():
    est = {"etcd": 40.0, "kueue": 300.0}
    assert bp.bar_line(list(est), est, 0, 10, width=8) == "[1/2] etcd [##------] 0:10 / ~0:40, about 6 min left"
    assert bp.bar_line(list(est), est, 1, 900, width=4) == "[2/2] kueue [####] 15:00 / ~5:00, about 5 s left"


def test_a_log_gets_one_line_as_each_binary_starts_and_ends_and_no_redraws():
    out = io.StringIO()
    est = {"etcd": 45.0, "kwok": 120.0}
    p = bp.Progress(list(est), est, out=out, tty=False, every=0.01)
    p.step(0)
    time.sleep(0.05)
    p.done(0, 44.0)
    p.step(1)
    p.done(1, 130.0)
    p.close()
    assert out.getvalue().splitlines() == [
        "[devcluster] [1/2] building etcd (the cluster's database): ~45 s, about 3 min left in all",
        "[devcluster] [1/2] built etcd in 0:44 (estimated ~0:45)",
        "[devcluster] [2/2] building kwok (simulated GPU nodes): ~2 min, about 2 min left in all",
        "[devcluster] [2/2] built kwok in 2:10 (estimated ~2:00)",
    ]
    assert "\r" not in out.getvalue()


def test_a_terminal_gets_a_bar_redrawn_in_place_while_a_binary_builds():
    out = io.StringIO()
    now = [0.0]
    est = {"etcd": 40.0, "kueue": 300.0}
    p = bp.Progress(list(est), est, out=out, tty=True, clock_fn=lambda: now[0], every=0.01)
    p.step(0)
    now[0] = 20.0
    deadline = time.monotonic() + 5
    while "0:20 / ~0:40" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    p.done(0, 21.0)
    after_done = out.getvalue()
    time.sleep(0.05)  # the ticker must not redraw etcd's bar over its finished line
    assert out.getvalue() == after_done
    p.step(1)
    now[0] = 30.0
    p.close()  # the build failed half-way: the bar gets its newline before the error
    text = out.getvalue()
    assert "\r\033[K[1/2] etcd [############------------] 0:20 / ~0:40, about 5 min left" in text
    assert after_done.endswith("\r\033[K[devcluster] [1/2] built etcd in 0:21 (estimated ~0:40)\n")
    assert text.endswith("\n") and "[2/2] kueue [" in text


def test_only_limits_what_is_missing(tmp_path):
    (tmp_path / "etcd").write_text("")
    assert binaries.missing(tmp_path, ("etcd", "kwok")) == ["kwok"]
    assert binaries.missing(tmp_path) == [b for b in ORDER if b != "etcd"]


def _plan(cache: Path) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([sys.executable, str(binaries.HERE / "binaries.py"), "plan"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "GPUHUB_CACHE": str(cache)})


def test_plan_says_what_a_fresh_machine_builds_and_nothing_once_it_is_built(tmp_path, monkeypatch):
    """`make dev`'s first words (binaries.py plan, standard library only, before the installs)."""
    if shutil.which("go") is None:
        pytest.skip("the plan names the binaries' folder, whose stamp includes `go version`")
    r = _plan(tmp_path)
    assert r.returncode == 0 and r.stdout == ""
    assert r.stderr.startswith("[devcluster] building 8 dev-cluster binaries from Go modules into "
                               f"{tmp_path}/bin-")
    for b in ORDER:
        assert f"\n  {b}: " in r.stderr
    monkeypatch.setenv("GPUHUB_CACHE", str(tmp_path))
    dest = binaries.bin_dir()
    dest.mkdir()
    for b in ORDER[:-1]:
        (dest / b).write_text("")
    _times(dest, json.dumps({binaries.HELM_BINARY: 120.0}))
    r = _plan(tmp_path)
    assert r.stderr.startswith("[devcluster] building 1 dev-cluster binary ") \
        and f"  {binaries.HELM_BINARY}: " in r.stderr
    assert "about 2 min in all (from this machine's earlier builds)" in r.stderr
    (dest / binaries.HELM_BINARY).write_text("")
    assert _plan(tmp_path).stderr == ""


def test_the_go_wrapper_modules_pin_the_versions_binaries_py_names():
    """kwok and kueue are built from devcluster/jupyterhub_gpu_dev/go/controllers, the JobSet controller from
    devcluster/jupyterhub_gpu_dev/go/jobset: their go.mod files and binaries.py's constants (CRDs, stage files and the
    stamp are read from those) agree."""
    def pinned(module_dir: str, path: str) -> str:
        text = (binaries.GO_DIR / module_dir / "go.mod").read_text()
        (version,) = re.findall(rf"^\s*{re.escape(path)} (v\S+)", text, re.M)
        return version

    assert pinned("controllers", "sigs.k8s.io/kwok") == binaries.KWOK_VERSION
    assert pinned("controllers", "sigs.k8s.io/kueue") == binaries.KUEUE_VERSION
    assert pinned("jobset", "sigs.k8s.io/jobset") == binaries.JOBSET_VERSION
    assert binaries.CONTROLLER_PACKAGES.keys() == {"kwok", "kueue"}
