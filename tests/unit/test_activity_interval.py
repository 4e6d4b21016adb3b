"""An idle_timeout shorter than JupyterHub's activity report interval is refused with a clear reason."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from traitlets.config import Config

from jupyterhub_gpu.config import configure
from jupyterhub_gpu.model.activity import hub_activity_interval, idle_timeout_problems
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles


def short_file(tmp_path, idle="2m"):
    data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    data["profiles"][1]["idle_timeout"] = idle
    path = tmp_path / "profiles.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_idle_timeout_below_the_interval_is_a_problem(tmp_path):
    cfg = load_profiles(short_file(tmp_path))
    (problem,) = idle_timeout_problems(cfg, 300)
    assert problem.path == "profiles[1].idle_timeout"
    assert problem.message.startswith("2 min is shorter than JupyterHub's activity report interval (5 min)")
    assert "valid: at least 5 min" in problem.message
    assert idle_timeout_problems(cfg, 60) == []  # a hub that learns of activity every minute may cull at 2 min
    assert idle_timeout_problems(load_profiles(EXAMPLE_PROFILES)) == []


def test_the_slower_of_the_hubs_poll_and_the_servers_report_counts():
    assert hub_activity_interval(None, {}) == 300
    assert hub_activity_interval(60, {"JUPYTERHUB_ACTIVITY_INTERVAL": "30"}) == 60
    assert hub_activity_interval(60, {"JUPYTERHUB_ACTIVITY_INTERVAL": "600"}) == 600
    assert hub_activity_interval(60, {"JUPYTERHUB_ACTIVITY_INTERVAL": "{junk}"}) == 300


def test_hub_config_refuses_to_start_and_validate_says_why(tmp_path, capsys):
    path = short_file(tmp_path)
    with pytest.raises(SystemExit):
        configure(Config(), str(path))
    assert "profiles[1].idle_timeout: 2 min is shorter than JupyterHub's activity" in capsys.readouterr().err
    fast = Config()
    fast.JupyterHub.last_activity_interval = 60
    fast.Spawner.environment = {"JUPYTERHUB_ACTIVITY_INTERVAL": "60"}
    assert configure(fast, str(path))[0] == str(path)  # this hub sees activity every minute: accepted
    r = subprocess.run([sys.executable, "-m", "jupyterhub_gpu.tools.cli", "validate", str(path)], capture_output=True,
                       text=True)
    assert r.returncode != 0 and "shorter than JupyterHub's activity report interval" in r.stderr
    ok = subprocess.run([sys.executable, "-m", "jupyterhub_gpu.tools.cli", "validate", str(path),
                         "--activity-interval", "60"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


def test_gpuhub_dev_activity_interval_sets_both_intervals_so_the_hub_accepts_a_short_idle_timeout(tmp_path):
    """`gpuhub dev --activity-interval 30s`: the dev hub's config lines (devcluster/jupyterhub_gpu_dev/devhub.py) set
    the hub's poll and the servers' report together, and the product's own check accepts a 1-minute idle_timeout under
    them."""
    from jupyterhub_gpu_dev.devhub import activity_lines

    path = short_file(tmp_path, idle="1m")
    c = Config()
    exec(activity_lines(30), {"c": c})
    assert c.JupyterHub.last_activity_interval == 30
    assert c.Spawner.environment == {"JUPYTERHUB_ACTIVITY_INTERVAL": "30"}
    assert configure(c, str(path))[0] == str(path)
    assert c.GPUSpawner.environment["JUPYTERHUB_ACTIVITY_INTERVAL"] == "30"  # what the servers get
    slow = Config()
    exec(activity_lines(90), {"c": slow})
    with pytest.raises(SystemExit):
        configure(slow, str(path))


def test_gpuhub_dev_refuses_a_short_idle_timeout_before_starting_anything_and_names_the_option(tmp_path):
    path = short_file(tmp_path, idle="1m")
    env_dir = tmp_path / "cluster"  # nothing may be started, so nothing may be written here
    r = subprocess.run([sys.executable, "-m", "jupyterhub_gpu.tools.cli", "dev", "--profiles", str(path)],
                       capture_output=True, text=True, timeout=60,
                       env={**__import__("os").environ, "GPUHUB_CLUSTER_DIR": str(env_dir)})
    assert r.returncode == 2 and r.stdout == ""
    assert "profiles[1].idle_timeout: 60 s is shorter than JupyterHub's activity report interval (5 min)" in r.stderr
    assert "gpuhub dev --activity-interval 30s" in r.stderr
    assert not env_dir.exists()


@pytest.mark.parametrize("value", ["0", "-5s", "10m", "1.5s", "abc", "1" * 70, "30s30s"])
def test_gpuhub_dev_activity_interval_outside_one_to_300_whole_seconds_is_a_usage_error(value):
    r = subprocess.run([sys.executable, "-m", "jupyterhub_gpu.tools.cli", "dev", "--activity-interval", value],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert "argument --activity-interval" in r.stderr
