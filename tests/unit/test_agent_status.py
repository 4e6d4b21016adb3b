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
from jupyterhub_gpu_dev.agent_init import BANNER, container_exit_code, pending_status, termination_message


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


def test_the_termination_message_follows_the_containers_policy(tmp_path):
    """`File` (the API's default): the file or nothing; `FallbackToLogsOnError`: a failed container's last 80 log
    lines when the file is empty (2 KiB at most), never the agent's own lines, never for exit 0."""
    log, file = tmp_path / "c.log", tmp_path / "c.termination-log"
    log.write_text(f"{BANNER} starting ['mkdir'] on node\n" + "".join(f"line {i}\n" for i in range(100))
                   + "mkdir: cannot create directory 'dave': Permission denied\n")
    as_file, fallback = {"terminationMessagePolicy": "File"}, {"terminationMessagePolicy": "FallbackToLogsOnError"}
    assert termination_message(as_file, file, log, 1) == ""
    said = termination_message(fallback, file, log, 1)
    assert said.endswith("Permission denied") and BANNER not in said and said.splitlines()[0] == "line 21"
    assert termination_message(fallback, file, log, 0) == ""
    file.write_text("the container's own words")
    assert termination_message(as_file, file, log, 1) == termination_message(fallback, file, log, 1) == \
        "the container's own words"
