"""`gpuhub cluster status`/`down` after a crash, on a state folder written as a crashed run leaves it (no
cluster needed): they find and stop what is provably ours (its pid record, the owner mark, a command
line recorded for a recorded port) and leave strangers alone, even ones that name the folder or
listen on a recorded port."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from jupyterhub_gpu_dev import cluster, leftovers, procs
from jupyterhub_gpu_dev.components import Layout

LISTEN = ("import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); "
          "time.sleep(600)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def started():
    procs_: list[subprocess.Popen] = []

    def start(argv: list[str], env: dict | None = None) -> subprocess.Popen:
        procs_.append(subprocess.Popen(argv, env={**os.environ, **(env or {})}, start_new_session=True))
        return procs_[-1]

    yield start
    for p in procs_:
        if p.poll() is None:
            p.kill()
        p.wait()


def _listening(port: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        assert time.monotonic() < deadline, f"nothing listens on {port}"
        time.sleep(0.05)


def test_down_stops_ours_and_leaves_strangers_alone(tmp_path, started):
    root = tmp_path / "cluster"
    layout = Layout(root)
    layout.run.mkdir(parents=True)
    ours_port, stranger_port = _free_port(), _free_port()
    # ours: a marked process (a hub left by a killed `gpuhub dev`), and a recorded component
    marked = started([sys.executable, "-c", "import time; time.sleep(600)"], procs.owner_mark(root))
    comp_argv = [sys.executable, "-c", LISTEN, str(ours_port)]
    comp, proc = procs.spawn("kwok", comp_argv, layout.log("kwok"), root, "http://127.0.0.1:1/", layout.run)
    # strangers: one names the folder on its command line (a `tail -f` of a log), one listens on a recorded port
    tail = started([sys.executable, "-c", "import time,sys; time.sleep(600)", str(layout.logs / "kwok.log")])
    stranger = started([sys.executable, "-c", LISTEN, str(stranger_port)])
    _listening(ours_port)
    _listening(stranger_port)
    (layout.run / "cluster.json").write_text(json.dumps({"ports": {"kwok": ours_port, "kueue-metrics": stranger_port}}))
    leftovers.write_dev_info(root, started_cluster=True, state_dir=tmp_path / "dev")
    info = json.loads((layout.run / leftovers.DEV_INFO).read_text())
    info["pid"] = marked.pid + 10**6  # the `gpuhub dev` that wrote it is gone
    (layout.run / leftovers.DEV_INFO).write_text(json.dumps(info))

    st = cluster.status(root)
    listed = " ".join(st["leftovers"])
    assert f"pid {marked.pid} " in listed and f"pid {comp.pid} " in listed
    assert f"pid {tail.pid} " not in listed and f"pid {stranger.pid} " not in listed

    said: list[str] = []
    cluster.down(root, say=said.append)
    proc.wait(5)
    assert marked.wait(5) is not None and not procs.alive(comp)
    assert tail.poll() is None and stranger.poll() is None
    assert any(f"port {stranger_port} (kueue-metrics) is in use by pid {stranger.pid}" in s and "left alone" in s
               for s in said), said
    assert not cluster.status(root)["leftovers"]
    assert not (layout.run / leftovers.DEV_INFO).exists()


def test_a_running_gpuhub_dev_owns_its_processes(tmp_path, started):
    """While the `gpuhub dev` that recorded itself runs, its children are not leftovers."""
    root = tmp_path / "cluster"
    Layout(root).run.mkdir(parents=True)
    leftovers.write_dev_info(root, started_cluster=True, state_dir=tmp_path / "dev")  # this test is that dev
    child = started([sys.executable, "-c", "import time; time.sleep(600)"], procs.owner_mark(root))
    assert cluster.status(root)["leftovers"] == []
    assert [p.pid for p in leftovers.unrecorded(Layout(root))] == [child.pid]


def test_up_refuses_while_an_earlier_runs_processes_live(tmp_path, started):
    root = tmp_path / "cluster"
    Layout(root).run.mkdir(parents=True)
    stray = started([sys.executable, "-c", "import time; time.sleep(600)"], procs.owner_mark(root))
    with pytest.raises(cluster.ClusterError, match=f"pid {stray.pid}.*gpuhub cluster down"):
        cluster.up(root=Path(root))


def test_a_live_real_nodes_containerd_shims_are_not_leftovers_until_the_run_is_gone(tmp_path, started):
    """`gpuhub dev --z2jh` running: its nodes' shims carry the owner mark (containerd passed it on) and re-parent
    to init, yet they are a live node's containers, not leftovers; once the run is gone they are."""
    from jupyterhub_gpu_dev import realnodes

    root = tmp_path / "cluster"
    layout = Layout(root)
    layout.run.mkdir(parents=True)
    node_root = root / "nodes" / "system"
    node_root.mkdir(parents=True)
    (layout.run / realnodes.NODES_FILE).write_text(json.dumps([{"name": "aks-system-0", "kind": "system",
                                                                  "netns": "gpuhub-n1", "root": str(node_root)}]))
    containerd, _ = procs.spawn("gpuhub-n1-containerd", [sys.executable, "-c", "import time; time.sleep(600)"],
                                layout.log("gpuhub-n1-containerd"), root, "", layout.run)
    shim_bin = tmp_path / "containerd-shim-runc-v2"
    shim_bin.symlink_to(sys.executable)
    sock = node_root / "containerd.sock"
    forked = subprocess.run(["sh", "-c", '"$0" -c "import time; time.sleep(600)" -address "$1" >/dev/null 2>&1 & '
                             'echo $!', str(shim_bin), str(sock)], env={**os.environ, **procs.owner_mark(root)},
                            capture_output=True, text=True, check=True)  # like a shim: its parent is gone
    shim = psutil.Process(int(forked.stdout))
    (layout.run / "cluster.json").write_text(json.dumps({"ports": {}}))
    leftovers.write_dev_info(root, started_cluster=True, state_dir=root / "z2jh")  # this process: alive
    deadline = time.monotonic() + 10
    while not realnodes.shim_processes([node_root]):
        assert time.monotonic() < deadline, "the stand-in shim did not start"
        time.sleep(0.05)

    assert cluster.status(root)["leftovers"] == []

    info = json.loads((layout.run / leftovers.DEV_INFO).read_text())
    info["pid"] = os.getpid() + 10**6  # the run ended without stopping its cluster
    (layout.run / leftovers.DEV_INFO).write_text(json.dumps(info))
    listed = " ".join(cluster.status(root)["leftovers"])
    assert f"pid {shim.pid} " in listed and f"pid {containerd.pid} " in listed
    procs.stop([containerd], layout.run)
    shim.kill()
