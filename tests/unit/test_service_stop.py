"""A hub-managed service stopped by the hub's SIGINT (JupyterHub stops them one after another) exits 0, with no
traceback and without Python's module teardown (services/stopped.py): real service processes."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES

#: Loaded into the service's interpreter: an atexit handler that writes a file, which only a full
#: interpreter teardown runs.
SITECUSTOMIZE = """import atexit, os
atexit.register(lambda: open(os.environ["PROBE_TEARDOWN_FILE"], "w").close())
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _service_env(tmp_path: Path, port: int) -> dict:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
                PROBE_TEARDOWN_FILE=str(tmp_path / "torn-down"), JUPYTERHUB_API_TOKEN="t" * 32, PYTHONFAULTHANDLER="1",
                JUPYTERHUB_API_URL="http://127.0.0.1:9/hub/api",  # nothing listens: the service keeps running
                JUPYTERHUB_SERVICE_NAME="probe", JUPYTERHUB_SERVICE_URL=f"http://127.0.0.1:{port}",
                JUPYTERHUB_SERVICE_PREFIX="/services/probe/", JUPYTERHUB_CLIENT_ID="service-probe",
                JUPYTERHUB_OAUTH_CALLBACK_URL="/services/probe/oauth_callback", JUPYTERHUB_BASE_URL="/",
                GPUHUB_CULLER_PORT=str(port))


SERVICES = {
    "gpu-usage": lambda tmp: ["-m", "jupyterhub_gpu.services.usage.web", f"--store={tmp / 'store'}"],
    "gpu-culler": lambda tmp: ["-m", "jupyterhub_gpu.services.culler", f"--profiles-file={EXAMPLE_PROFILES}",
                               f"--warnings-file={tmp / 'warnings.json'}"],
}


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_the_hubs_sigint_ends_the_service_at_once_quietly_and_with_exit_0(name, tmp_path):
    port = _port()
    log = (tmp_path / "service.log").open("w+")
    proc = subprocess.Popen([sys.executable, *SERVICES[name](tmp_path)], env=_service_env(tmp_path, port),
                            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while True:  # answering: its own code is running (any HTTP answer will do)
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/services/probe/", timeout=2)
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "service.log").read_text()
                time.sleep(0.2)
        log.flush()
        before = (tmp_path / "service.log").stat().st_size
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)  # what JupyterHub's LocalProcessSpawner sends first
        try:
            code = proc.wait(60)  # at once when idle (about 0.1 s); a loaded machine may take seconds
        except subprocess.TimeoutExpired:  # where it hangs: faulthandler writes every thread's stack on SIGABRT
            proc.send_signal(signal.SIGABRT)
            proc.wait(10)
            pytest.fail("no exit 60 s after the SIGINT; its threads then:\n"
                        + (tmp_path / "service.log").read_text()[before:][-6000:])
        assert code == 0, (tmp_path / "service.log").read_text()[before:]
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()  # reaped, so no zombie is left as a child of this test process
    out = (tmp_path / "service.log").read_text()[before:]  # what the stop wrote (a failed cycle may log before)
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert not (tmp_path / "torn-down").exists(), "the interpreter's teardown ran after the hub's SIGINT"
    print(f"{name} stopped {took:.2f} s after the SIGINT")  # what "at once" means is the teardown marker above


def _is_spawn_worker(process) -> bool:
    """A multiprocessing spawn worker; an exited child another test left unreaped (a zombie) is none."""
    import psutil

    try:
        return "spawn_main" in " ".join(process.cmdline())
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return False


def test_gpu_jobs_planner_stop_now_leaves_no_worker_process():
    """gpu-jobs skips the interpreter's teardown on the hub's SIGINT, which would have joined its planner's
    worker: `stop_now` ends it first (a real spawned worker process)."""
    import asyncio

    import psutil

    from jupyterhub_gpu.model.profiles_file import cached_profiles
    from jupyterhub_gpu.services.jobs.planner import Planner
    from jupyterhub_gpu.services.jobs.submission import ServiceSettings

    planner = Planner(cached_profiles(str(EXAMPLE_PROFILES)), ServiceSettings())
    asyncio.run(planner.warm())
    workers = [p for p in psutil.Process().children() if _is_spawn_worker(p)]
    assert workers, "the planner started no worker process: this test would prove nothing"
    planner.stop_now()
    gone, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive and planner._pool is None
