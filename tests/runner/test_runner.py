"""The runner on a real kernel (ipykernel through papermill): progress, parameters, failures, SIGTERM and resume."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import nbformat
import pytest

from jupyterhub_gpu.runner.main import EXIT_NOTEBOOK_FAILED, EXIT_OK, EXIT_TERMINATED
from jupyterhub_gpu_dev.agent import IMAGE_IPYTHON_CONFIG

pytestmark = pytest.mark.kernel  # real kernels: ipykernel through papermill

TRAIN = '''
import json, os, pathlib, time
ckpt = pathlib.Path(os.environ["CHECKPOINT_DIR"]) / "state.json"
state = json.loads(ckpt.read_text()) if ckpt.exists() else {"step": 0, "total": 0}
print("resuming from step", state["step"], flush=True)
while state["step"] < steps:
    time.sleep(delay)
    state["step"] += 1
    state["total"] += state["step"]
    ckpt.write_text(json.dumps(state))
    print("step", state["step"], flush=True)
result = state["total"]
'''


def snapshot(tmp_path: Path, *cells: str, params: str = "steps = 3\ndelay = 0.0") -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    p = nbformat.v4.new_code_cell(params)
    p.metadata["tags"] = ["parameters"]
    nb.cells = [p] + [nbformat.v4.new_code_cell(c) for c in cells]
    path = tmp_path / "snapshot.gz"
    path.write_bytes(gzip.compress(nbformat.writes(nb).encode()))
    return path


def runner(tmp_path, snap, params, ckpt, **extra_env) -> subprocess.Popen:
    env = dict(os.environ, CHECKPOINT_DIR=str(ckpt), OUTPUT_DIR=str(tmp_path / "out"), **extra_env)
    return subprocess.Popen(["gpuhub-runner", "--snapshot", str(snap), "--name", "train", "--parameters",
                             json.dumps(params)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def outputs_text(nb_path: Path) -> str:
    nb = json.loads(nb_path.read_text())
    return "".join(o.get("text", "") if isinstance(o.get("text"), str) else "".join(o.get("text", []))
                   for c in nb["cells"] for o in c.get("outputs", []))


def test_rich_outputs_leave_no_stand_in_text_in_the_log(tmp_path):
    snap = snapshot(tmp_path, "from IPython.display import HTML, display\ndisplay(HTML('<b>hi</b>'))\nprint('plain')")
    proc = runner(tmp_path, snap, {}, tmp_path)
    log, _ = proc.communicate(timeout=180)
    assert proc.returncode == EXIT_OK, log
    assert "plain" in log and "IPython.core.display.HTML object" not in log
    assert "cell 2/2 running" in log  # no parameters: nothing injected, nothing left out


def test_parameters_progress_and_output(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    snap = snapshot(tmp_path, TRAIN, "print('final', result)")
    proc = runner(tmp_path, snap, {"steps": 4}, ckpt)
    log, _ = proc.communicate(timeout=180)
    assert proc.returncode == EXIT_OK, log
    # three cells as the user counts them: the injected parameters cell is not one of them
    assert "[gpuhub-runner]" in log and "cell 3/3 running" in log and "/4 running" not in log
    assert "Input Notebook:" not in log and "Executing notebook with kernel" not in log  # papermill boilerplate
    assert "over TCP" not in log  # the kernel talks over Unix sockets, not TCP ports
    out = tmp_path / "out" / "train.ipynb"
    text = outputs_text(out)
    assert "final 10" in text  # 1+2+3+4: the parameter 'steps = 4' was injected
    assert json.loads(out.read_text())["cells"][1]["metadata"]["tags"] == ["injected-parameters"]


def test_a_notebook_that_submits_itself_runs_as_a_job_without_resubmitting(tmp_path):
    """The snapshot still holds its `%gpu_submit` cell. The runner image's kernels load the extension
    (images/singleuser/ipython_config.py in /etc/ipython), and in a Job ($GPUHUB_JOB) the magic is a no-op."""
    ipython_dir = tmp_path / "ipython"
    (ipython_dir / "profile_default").mkdir(parents=True)
    shutil.copyfile(IMAGE_IPYTHON_CONFIG, ipython_dir / "profile_default" / "ipython_config.py")
    snap = snapshot(tmp_path, "%gpu_submit --profile a100-mig-1g10gb --param steps=9", "print('after', steps)")
    proc = runner(tmp_path, snap, {"steps": 2}, tmp_path, IPYTHONDIR=str(ipython_dir), GPUHUB_JOB="gpu-alice-nb-1")
    log, _ = proc.communicate(timeout=180)
    assert proc.returncode == EXIT_OK, log
    nb = json.loads((tmp_path / "out" / "train.ipynb").read_text())
    shown = json.dumps(nb["cells"][2]["outputs"])
    assert "%gpu_submit skipped: this notebook is running as GPU job gpu-alice-nb-1" in shown
    assert "after 2" in outputs_text(tmp_path / "out" / "train.ipynb")


def test_failing_cell_still_writes_output_with_error(tmp_path):
    snap = snapshot(tmp_path, "x = 1", "raise ValueError('boom at step 7')", "print('never')")
    proc = runner(tmp_path, snap, {}, tmp_path)
    log, _ = proc.communicate(timeout=180)
    assert proc.returncode == EXIT_NOTEBOOK_FAILED, log
    assert "ValueError: boom at step 7" in log
    nb = json.loads((tmp_path / "out" / "train.ipynb").read_text())
    errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert errors and errors[0]["evalue"] == "boom at step 7"


def test_sigterm_saves_partial_output_and_rerun_resumes_from_checkpoint(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    snap = snapshot(tmp_path, TRAIN, "print('final', result)")
    params = {"steps": 10, "delay": 0.4}
    proc = runner(tmp_path, snap, params, ckpt)
    state = ckpt / "state.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (state.exists() and json.loads(state.read_text())["step"] >= 3):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    log, _ = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_TERMINATED, log
    stopped_at = json.loads(state.read_text())["step"]
    assert 3 <= stopped_at < 10
    partial = json.loads((tmp_path / "out" / "train.ipynb").read_text())
    assert partial["metadata"]["gpuhub"]["stopped"].startswith("the pod was asked to stop")
    assert "final" not in outputs_text(tmp_path / "out" / "train.ipynb")

    again = runner(tmp_path, snap, params, ckpt)  # a new pod of the same Job
    log, _ = again.communicate(timeout=180)
    assert again.returncode == EXIT_OK, log
    text = outputs_text(tmp_path / "out" / "train.ipynb")
    assert f"resuming from step {stopped_at}" in text
    assert "final 55" in text  # 1+...+10 whatever the interruption
    # nothing lost: the interrupted run's partial output is kept beside the final one
    kept = tmp_path / "out" / "train.attempt-1.ipynb"
    assert json.loads(kept.read_text())["metadata"]["gpuhub"]["stopped"].startswith("the pod was asked to stop")
    assert "earlier attempt's output is kept as" in log


@pytest.mark.parametrize("bad", ["[1, 2]", "{not json"])
def test_bad_parameters_are_an_infrastructure_error(tmp_path, bad):
    r = subprocess.run(["gpuhub-runner", "--snapshot", str(tmp_path / "none.gz"), "--parameters", bad],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 4 and "--parameters must be a JSON object" in r.stdout


def test_the_checkpoint_folder_is_made_and_relative_paths_are_the_working_directorys(tmp_path):
    """In a Job, CHECKPOINT_DIR is a folder in the user's home that does not exist yet, and the pod's
    working directory is the notebook's folder (relative paths work as in JupyterLab)."""
    work = tmp_path / "home" / "work"
    work.mkdir(parents=True)
    (work / "input.txt").write_text("from home")
    ckpt = tmp_path / "home" / "gpu-jobs" / "j1" / "checkpoints"
    snap = snapshot(tmp_path, "print('read', open('input.txt').read())\nopen('written.txt', 'w').write('x')", TRAIN)
    env = dict(os.environ, CHECKPOINT_DIR=str(ckpt), OUTPUT_DIR=str(tmp_path / "home" / "gpu-jobs" / "j1"))
    proc = subprocess.run(["gpuhub-runner", "--snapshot", str(snap), "--name", "train", "--parameters", "{}"],
                          env=env, cwd=work, capture_output=True, text=True, timeout=180)
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert (ckpt / "state.json").exists() and (work / "written.txt").exists()
    assert "read from home" in outputs_text(tmp_path / "home" / "gpu-jobs" / "j1" / "train.ipynb")


def test_the_notebooks_reports_reach_the_log_as_report_lines_and_not_its_output(tmp_path):
    """`gpuhub.report()` in the kernel → the runner's relay → `[gpuhub-runner] ... report {...}` lines, from which
    gpu-jobs computes the job's throughput; the output notebook stays the user's own."""
    from jupyterhub_gpu.model.throughput import throughput
    from jupyterhub_gpu.reports import reports_in

    snap = snapshot(tmp_path, "import time, gpuhub\nfor step in range(1, steps + 1):\n    time.sleep(delay)\n"
                              "    gpuhub.report(step=step, samples=32 * step, loss=1 / step, total_steps=steps)\n"
                              "print('trained')", params="steps = 14\ndelay = 0.5")
    proc = runner(tmp_path, snap, {}, tmp_path / "ckpt")
    log, _ = proc.communicate(timeout=180)
    assert proc.returncode == EXIT_OK, log
    reports = reports_in(log)
    assert len(reports) >= 2 and reports[-1]["step"] == 14 and reports[-1]["samples"] == 448, log
    speed = throughput(reports)
    assert 30 < speed["samples_per_s"] < 70 and 0.4 < speed["step_s"] < 1.0 and speed["eta_s"] == 0, speed
    assert "report" not in outputs_text(tmp_path / "out" / "train.ipynb")
