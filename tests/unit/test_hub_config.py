"""jupyterhub_config.py: the real `jupyterhub` refuses to start on a bad profiles file, listing every problem."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from traitlets.config import PyFileConfigLoader

REPO = Path(__file__).resolve().parents[2]


def test_bad_profiles_file_stops_the_hub(tmp_path):
    bad = tmp_path / "profiles.yaml"
    bad.write_text("pools: {}\nprofiles:\n  - {slug: a, display_name: A, idle_timout: 3}\n"
                   "  - {slug: b, display_name: B, gpu: {kind: full}}\n")
    env = dict(os.environ, GPUHUB_PROFILES=str(bad))
    r = subprocess.run(["jupyterhub", "-f", str(REPO / "jupyterhub_config.py"), "--ip", "127.0.0.1",
                        "--port", "18999"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 2
    assert "refusing to start" in r.stderr and "2 problem(s)" in r.stderr
    assert "profiles[0].idle_timout: unknown key 'idle_timout'; did you mean 'idle_timeout'?" in r.stderr
    assert "profiles[1].pool: a GPU profile must name its pool" in r.stderr
    assert not list(tmp_path.glob("jupyterhub.sqlite")), "the hub must not have started"


def test_config_wires_gpuspawner_to_the_named_file(tmp_path, monkeypatch):
    example = REPO / "jupyterhub_gpu" / "examples" / "profiles.yaml"
    copy = tmp_path / "p.yaml"
    copy.write_text(example.read_text())
    monkeypatch.setenv("GPUHUB_PROFILES", str(copy))
    cfg = PyFileConfigLoader("jupyterhub_config.py", path=str(REPO)).load_config()
    assert cfg.JupyterHub.spawner_class == "jupyterhub_gpu.hub.spawner.GPUSpawner"
    assert cfg.GPUSpawner.profiles_file == str(copy)
