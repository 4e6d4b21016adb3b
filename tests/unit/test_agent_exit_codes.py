"""The dev agent (SIMULATOR) reports a container killed by a signal as a runtime does: 128 + N (137 for SIGKILL,
143 for SIGTERM), not Python's -N; gpu-jobs reads 137 and 143 as stopped (services/jobs/status.py)."""
from __future__ import annotations

import signal
import subprocess
import sys

from jupyterhub_gpu_dev.agent_init import container_exit_code


def test_a_killed_process_exits_128_plus_its_signal_as_in_a_container():
    for sig in (signal.SIGKILL, signal.SIGTERM):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        proc.send_signal(sig)
        assert container_exit_code(proc.wait(10)) == 128 + sig
    assert container_exit_code(0) == 0 and container_exit_code(3) == 3
