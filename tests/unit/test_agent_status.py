"""The pod status the dev agent (SIMULATOR) writes, as a kubelet writes it (issue 50 item 3): a container killed by a
signal exits 128 + N (137 for SIGKILL, 143 for SIGTERM), not Python's -N, as gpu-jobs reads them
(services/jobs/status.py); `startTime` is set once and a condition's time moves only with its status, as the hub's
wait estimate (PodScheduled) and showback (`startTime`) read them."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

from jupyterhub_gpu_dev.agent import DevNodeAgent
from jupyterhub_gpu_dev.agent_init import container_exit_code, pending_status


def test_a_killed_process_exits_128_plus_its_signal_as_in_a_container():
    for sig in (signal.SIGKILL, signal.SIGTERM):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        proc.send_signal(sig)
        assert container_exit_code(proc.wait(10)) == 128 + sig
    assert container_exit_code(0) == 0 and container_exit_code(3) == 3


def test_start_time_is_set_once_and_a_conditions_time_moves_only_with_its_status():
    scheduled = "2026-12-07T10:00:00Z"
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], "initContainers": [{"name": "i"}]},
           "status": {"phase": "Pending", "conditions": [
               {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}]}}
    pending = pending_status(pod, "127.0.0.9", [])
    time.sleep(1.1)  # the times have a resolution of a second
    running = DevNodeAgent.running_status(pod, "127.0.0.9", ready=False)
    time.sleep(1.1)
    ready = DevNodeAgent.running_status(pod, "127.0.0.9", ready=True)
    assert pending["startTime"] == running["startTime"] == ready["startTime"]
    at = {name: {c["type"]: c["lastTransitionTime"] for c in s["conditions"]}
          for name, s in (("pending", pending), ("running", running), ("ready", ready))}
    assert at["pending"]["PodScheduled"] == at["running"]["PodScheduled"] == at["ready"]["PodScheduled"] == scheduled
    assert at["pending"]["Ready"] == at["running"]["Ready"] != at["ready"]["Ready"]  # False, False, then True
    assert at["pending"]["Initialized"] != at["running"]["Initialized"] == at["ready"]["Initialized"]
