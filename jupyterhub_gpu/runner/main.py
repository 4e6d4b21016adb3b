"""`gpuhub-runner`: execute a notebook snapshot with papermill, safely under SIGTERM.

Exit codes tell the Job's pod failure policy what happened:
  0  the notebook ran to the end
  3  a cell raised: the notebook's own failure, retrying will not help (FailJob)
  4  infrastructure: the kernel died, the input could not be read, the output could not be written
 143 stopped by SIGTERM (preemption, eviction, cancel): partial output saved; a new pod resumes
"""
from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from jupyterhub_gpu.contract import (
    ENV_CHECKPOINT_DIR,
    ENV_KERNEL,
    ENV_NOTEBOOK_NAME,
    ENV_OUTPUT_DIR,
    ENV_PARAMETERS,
    ENV_PROGRESS_FILE,
    ENV_RANK,
    ENV_SNAPSHOT,
    RunnerExit,
    cell_progress,
    progress_line,
)
from jupyterhub_gpu.reports import REPORT_MAX_BYTES, parse, report_message

EXIT_OK = RunnerExit.OK
EXIT_NOTEBOOK_FAILED = RunnerExit.NOTEBOOK_FAILED
EXIT_INFRASTRUCTURE = RunnerExit.INFRASTRUCTURE
EXIT_TERMINATED = RunnerExit.TERMINATED


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM; a BaseException so notebook-execution code does not swallow it."""


def _out(text: str) -> None:
    """One write per line: the report relay's thread prints beside the main one, never inside its line."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def say(message: str) -> None:
    _out(progress_line(message, time.strftime('%H:%M:%S')))


def read_snapshot(path: Path) -> dict:
    """The notebook as the Job's ConfigMap holds it: gzip-compressed JSON (plain JSON also accepted)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


#: Papermill's own log lines that say nothing about the notebook (its paths, its kernel, the missing-tag
#: warning), and the text/plain stand-ins of rich outputs (`<IPython.core.display.HTML object>`,
#: `<Figure size 640x480 with 1 Axes>`): the output notebook shows those outputs, the log would not.
_BOILERPLATE = re.compile(r"^(Input Notebook:|Output Notebook:|Executing notebook with kernel|Executing Cell|"
                          r"Ending Cell|Input notebook does not contain a cell with tag|Black is not installed)")
_REPR = re.compile(r"^<[\w.]+(?: [^<>]*)? object>$|^<Figure size [^<>]*>$")


def log_line(message: str) -> str | None:
    """What of one papermill log record goes into the job's log (None: nothing)."""
    if _BOILERPLATE.match(message.lstrip()):
        return None
    kept = [ln for ln in message.rstrip().splitlines() if not _REPR.match(ln.strip())]
    text = "\n".join(kept).rstrip()
    return text if text.strip() else None


def injected_at(cells: list[dict], parameters: dict) -> int | None:
    """1-based index of the cell papermill inserts for the parameters (after the `parameters` cell, else
    first), None when it inserts none (no parameters)."""
    if not parameters:
        return None
    tagged = [i for i, c in enumerate(cells) if "parameters" in ((c.get("metadata") or {}).get("tags") or [])]
    return tagged[-1] + 2 if tagged else 1


def user_cell(n: int, injected: int | None) -> int | None:
    """Papermill's cell `n` as the user counts the cells of their notebook (None: the injected cell)."""
    if injected is None or n < injected:
        return n
    return None if n == injected else n - 1


class CellProgress(logging.Handler):
    """Turns papermill's 'Executing Cell N' log lines into our progress lines (the widget reads them),
    counted as the user's notebook counts them (the injected parameters cell is not one of them)."""

    def __init__(self, total: int, injected: int | None = None):
        super().__init__(logging.INFO)
        self.total, self.injected = total, injected

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith("Executing Cell"):
            digits = "".join(ch for ch in msg if ch.isdigit())
            n = user_cell(int(digits), self.injected) if digits else None
            if n is not None:
                say(cell_progress(n, self.total))
        elif (line := log_line(msg)) is not None:
            _out(line)


class ReportRelay:
    """Prints the notebook's latest `gpuhub.report()` into the job's log (gpu-jobs reads it there): the kernel
    writes its progress file, this reads it every `interval` seconds in a thread and prints what changed. The file
    is the notebook's, so hostile: at most REPORT_MAX_BYTES read, re-validated, a time far from the runner's own
    clock replaced by it (rates come from the times)."""

    def __init__(self, path: Path, interval: float = 5.0, clock=time.time):
        self.path, self.interval, self.clock = path, interval, clock
        self.last: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> dict | None:
        """Print the file's report when it changed since the last one printed; returns what it printed."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read(REPORT_MAX_BYTES + 1)
        except OSError:
            return None
        report = parse(raw)
        if report is None:
            return None
        now = self.clock()
        if abs(report["t"] - now) > self.interval + 60:
            report["t"] = round(now, 3)
        message = report_message(report)
        if message == self.last:
            return None
        self.last = message
        say(message)
        return report

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def __enter__(self) -> "ReportRelay":
        self._thread = threading.Thread(target=self._run, name="gpuhub-report-relay", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=self.interval + 1)
        self.poll()  # the last report of the run


def _mark_stopped(output: Path, why: str) -> None:
    """Leave a note in the partial output notebook, so the user sees where and why it stopped."""
    try:
        nb = json.loads(output.read_text())
    except (OSError, ValueError):
        return
    nb.setdefault("metadata", {}).setdefault("gpuhub", {})["stopped"] = why
    nb["cells"].insert(0, {"cell_type": "markdown", "metadata": {"tags": ["gpuhub-stopped"]}, "id": "gpuhub-stopped",
                           "source": f"**This run was stopped before the end:** {why}. Outputs below are as far as "
                                     "it got; a restarted run resumes from `CHECKPOINT_DIR`."})
    output.write_text(json.dumps(nb, indent=1))


def ipc_kernel_manager():
    """The kernel's sockets as Unix sockets in a private folder instead of TCP ports: nothing in the pod
    listens on the network (and ipykernel has no reason to warn about unencrypted TCP in the job log)."""
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class IPCKernelManager(AsyncKernelManager):
        @default("transport")
        def _default_transport(self):
            return "ipc"

        @default("ip")
        def _default_ip(self):
            # in the private runtime folder, not jupyter_client's "kernel-ipc" in the working directory: two
            # runs in one folder (a multi-node job's ranks on the shared home, or one notebook submitted
            # twice) would bind the same socket files and read each other's messages
            return os.path.join(os.environ.get("JUPYTER_RUNTIME_DIR") or tempfile.gettempdir(), "kernel-ipc")

    return IPCKernelManager


def keep_earlier_attempt(output: Path) -> Path | None:
    """A restarted pod (preemption, eviction) would overwrite the earlier run's partial output, the only
    record of it once its pod is gone: keep it next to the new one as `<name>.attempt-<N>.ipynb`."""
    if not output.exists():
        return None
    n = 1
    while (kept := output.with_name(f"{output.stem}.attempt-{n}{output.suffix}")).exists():
        n += 1
    output.rename(kept)
    return kept


def run(snapshot: Path, output: Path, parameters: dict, kernel: str | None, cwd: Path | None) -> int:
    import papermill
    from papermill.exceptions import PapermillExecutionError

    try:
        nb = read_snapshot(snapshot)
    except (OSError, ValueError) as e:
        say(f"cannot read the notebook snapshot {snapshot}: {e}")
        return EXIT_INFRASTRUCTURE
    code_cells = sum(1 for c in nb.get("cells", []) if c.get("cell_type") == "code")
    output.parent.mkdir(parents=True, exist_ok=True)
    if kept := keep_earlier_attempt(output):
        say(f"the earlier attempt's output is kept as {kept}")
    source = output.with_suffix(".input.ipynb")
    source.write_text(json.dumps(nb))
    cells = nb.get("cells", [])
    logging.getLogger("papermill").addHandler(CellProgress(len(cells), injected_at(cells, parameters)))
    logging.getLogger("papermill").setLevel(logging.INFO)

    def on_sigterm(signum, frame):
        raise Terminated()

    signal.signal(signal.SIGTERM, on_sigterm)
    ckpt = os.environ.get(ENV_CHECKPOINT_DIR)
    if ckpt:  # the job's own folder in the user's home (~/gpu-jobs/<job>/checkpoint): there before any cell runs
        try:
            Path(ckpt).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            say(f"cannot create the checkpoint folder {ckpt}: {e}")
            return EXIT_INFRASTRUCTURE
    say(f"running {code_cells} code cells; parameters {parameters}; output {output}"
        + (f"; checkpoints in {ckpt}" + (" (resuming: it has files)" if ckpt and any(Path(ckpt).glob("*")) else "")
           if ckpt else ""))
    # a short private runtime folder: the kernel's connection file and sockets (Unix socket paths are
    # limited to about 100 bytes, too few for a deep $HOME)
    runtime = tempfile.mkdtemp(prefix="gpuhub-kernel-")
    os.environ["JUPYTER_RUNTIME_DIR"] = runtime
    # the kernel inherits this: gpuhub.report() writes there, the relay prints it into the log
    os.environ[ENV_PROGRESS_FILE] = progress = os.path.join(runtime, "progress.json")
    try:
        with ReportRelay(Path(progress)):
            papermill.execute_notebook(str(source), str(output), parameters=parameters, kernel_name=kernel,
                                       log_output=True, progress_bar=False, request_save_on_cell_execute=True,
                                       cwd=str(cwd) if cwd else None, kernel_manager_class=ipc_kernel_manager())
    except Terminated:
        say("SIGTERM: the kernel was stopped; partial output saved")
        _mark_stopped(output, "the pod was asked to stop (preemption, eviction or cancel)")
        return EXIT_TERMINATED
    except PapermillExecutionError as e:
        say(f"cell {e.exec_count} failed: {e.ename}: {e.evalue}; output with the error saved to {output}")
        return EXIT_NOTEBOOK_FAILED
    except Exception as e:  # kernel death, I/O: not the notebook's fault
        say(f"infrastructure error: {type(e).__name__}: {e}")
        if output.exists():
            _mark_stopped(output, f"infrastructure error: {type(e).__name__}")
        return EXIT_INFRASTRUCTURE
    finally:
        source.unlink(missing_ok=True)
        shutil.rmtree(runtime, ignore_errors=True)
    say(f"done; output notebook: {output}")
    return EXIT_OK


def default_output(name: str) -> Path:
    """$OUTPUT_DIR/<name>.ipynb; a multi-node job's other ranks write theirs to $OUTPUT_DIR/rank-<k>/, so
    rank 0's is the job's output notebook and the others' are kept beside it."""
    rank = os.environ.get(ENV_RANK, "")
    out = Path(os.environ.get(ENV_OUTPUT_DIR, "."))
    return (out / f"rank-{int(rank)}" if rank.isdigit() and int(rank) > 0 else out) / f"{name}.ipynb"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpuhub-runner", description=__doc__.split("\n")[0])
    p.add_argument("--snapshot", type=Path, default=Path(os.environ.get(ENV_SNAPSHOT, "/snapshot/notebook.gz")))
    p.add_argument("--output", type=Path, help="output notebook (default: $OUTPUT_DIR/<name>.ipynb)")
    p.add_argument("--name", default=os.environ.get(ENV_NOTEBOOK_NAME, "notebook"))
    p.add_argument("--parameters", default=os.environ.get(ENV_PARAMETERS, "{}"), help="JSON object")
    p.add_argument("--kernel", default=os.environ.get(ENV_KERNEL) or None)
    a = p.parse_args(argv)
    output = a.output or default_output(a.name)
    try:
        params = json.loads(a.parameters)
        if not isinstance(params, dict):
            raise ValueError("not an object")
    except ValueError as e:
        say(f"--parameters must be a JSON object: {e}")
        return EXIT_INFRASTRUCTURE
    # the working directory the pod gives (the notebook's folder in home): relative paths work as in JupyterLab
    return run(a.snapshot, output, params, a.kernel, None)


if __name__ == "__main__":
    sys.exit(main())
