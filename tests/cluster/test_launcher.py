"""The launcher's contract: background `up` printing KUBECONFIG last, `status`, `down`, a second `up`
refused, and bad input (port in use, a component dying, Ctrl-C, no Go) leaving nothing running."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu_dev import cluster as dc
from jupyterhub_gpu_dev import procs

cluster_mark = pytest.mark.cluster


def gpuhub(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jupyterhub_gpu.tools.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def leftovers(root: Path) -> list[int]:
    """Live processes whose command line mentions the state folder (what a cluster there would run)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(root) in cmd and state not in ("Z", "X"):
            out.append(int(proc.name))
    return out


@cluster_mark
def test_a_second_up_is_refused_while_one_runs(cluster):
    with pytest.raises(dc.ClusterError, match="already running"):
        dc.up(root=cluster.root)
    r = gpuhub("cluster", "up", env={"GPUHUB_CLUSTER_DIR": str(cluster.root)})
    assert r.returncode == 1
    assert "already running" in r.stderr and "gpuhub cluster down" in r.stderr
    assert "KUBECONFIG=" not in r.stdout
    dc.ensure_ready(dc.Cluster(cluster.root))  # and the running one is untouched


@cluster_mark
def test_status_names_each_component_with_pid_and_health(cluster):
    r = gpuhub("cluster", "status", env={"GPUHUB_CLUSTER_DIR": str(cluster.root)})
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kueue", "jobset"):
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith(name + " "))
        assert "pid" in line and line.endswith("healthy"), line
    assert r.stdout.splitlines()[-1] == f"KUBECONFIG={cluster.kubeconfig}"


@cluster_mark
def test_up_runs_in_the_background_and_down_stops_everything(scratch_root):
    env = {"GPUHUB_CLUSTER_DIR": str(scratch_root)}
    r = gpuhub("cluster", "up", "--nodes-per-pool", "1", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == f"KUBECONFIG={scratch_root / 'kubeconfig'}"
    # the command has exited; what it started still serves
    handle = dc.Cluster(scratch_root)
    dc.ensure_ready(handle)
    kube = handle.kube()
    pools = load_profiles(EXAMPLE_PROFILES).pools
    assert {n.split("-")[1] for n in dc.ready_nodes(kube)} == set(pools)  # one node per pool of the example file
    kube.close()
    pids = [rec.pid for rec in handle.records().values()]
    assert len(pids) == 7  # etcd, apiserver, controller-manager, scheduler, kwok, kueue, jobset
    r = gpuhub("cluster", "down", env=env)
    assert r.returncode == 0 and "stopped:" in r.stdout
    assert not leftovers(scratch_root)
    assert not handle.records()
    r = gpuhub("cluster", "status", env=env)
    assert r.returncode == 3 and "no dev cluster is running" in r.stdout


@cluster_mark
def test_a_port_in_use_is_named(scratch_root):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = gpuhub("cluster", "up", env={"GPUHUB_CLUSTER_DIR": str(scratch_root),
                                         "GPUHUB_CLUSTER_PORT_KUBE_APISERVER": str(port)})
    assert r.returncode == 1
    assert f"kube-apiserver: port {port}" in r.stderr and "in use" in r.stderr
    assert not leftovers(scratch_root)


@cluster_mark
def test_a_component_dying_at_start_is_named_and_nothing_is_left_running(scratch_root):
    with pytest.raises(dc.ClusterError) as err:
        dc.up(root=scratch_root, nodes_per_pool=1, extra_args={"kube-scheduler": ["--no-such-flag"]})
    msg = str(err.value)
    log = scratch_root / "logs" / "kube-scheduler.log"
    assert msg.startswith("kube-scheduler exited during start") and str(log) in msg
    assert "no-such-flag" in msg  # the log's tail says why
    assert not leftovers(scratch_root)
    assert not procs.Record.load_all(scratch_root / "run")


@cluster_mark
def test_ctrl_c_during_start_stops_what_was_started(scratch_root):
    def interrupt(msg: str) -> None:
        if msg.startswith("kube-apiserver healthy"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        dc.up(root=scratch_root, nodes_per_pool=1, say=interrupt)
    assert not leftovers(scratch_root)


def test_missing_go_toolchain_is_reported(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "GPUHUB_CACHE": str(tmp_path / "cache"),
           "GPUHUB_CLUSTER_DIR": str(tmp_path / "state")}
    r = gpuhub("cluster", "up", env=env, timeout=60)
    assert r.returncode == 1
    assert "Go toolchain is missing" in r.stderr and "KUBECONFIG=" not in r.stdout
    assert not leftovers(tmp_path)
