"""jupyterhub_gpu.config.configure: the one wiring of spawner, gpu-jobs and culler that jupyterhub_config.py,
z2jh's extraConfig and the dev hub all call."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from traitlets.config import Config, PyFileConfigLoader

from jupyterhub_gpu.config import SERVER_TOKEN_SCOPES, SPAWNER_CLASS, configure
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.services import culler
from jupyterhub_gpu.services.jobs import hub as jobs

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(EXAMPLE_PROFILES)
HUB_ENV = ("GPUHUB_JOBS_SERVICE_URL", "GPUHUB_CULLER_URL", "GPUHUB_JOBS_PORT", "GPUHUB_CULLER_PORT",
           "GPUHUB_JOBS_PUBLIC_URL", "GPUHUB_CULLER_POLICY")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for var in HUB_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)  # the culler's warnings file defaults to the hub's working directory
    monkeypatch.setenv("GPUHUB_USAGE", "off")  # the usage services have their own tests (test_usage_hub.py)
    monkeypatch.setenv("GPUHUB_ADMIN_CONSOLE", "off")  # and so has the admins' console (its configure test)


def by_name(entries):
    return {e["name"]: e for e in entries}


def test_wires_the_spawner_both_services_and_least_privilege_roles():
    c = Config()
    path, cfg = configure(c, EXAMPLE)
    assert path == EXAMPLE and cfg.by_slug  # the validated profiles
    assert c.JupyterHub.spawner_class == SPAWNER_CLASS == "jupyterhub_gpu.hub.spawner.GPUSpawner"
    assert c.GPUSpawner.profiles_file == EXAMPLE
    assert (c.GPUSpawner.start_timeout, c.GPUSpawner.http_timeout) == (600, 120)
    services = by_name(c.JupyterHub.services)
    assert list(services) == ["gpu-jobs", "gpu-culler"]
    assert services["gpu-jobs"]["url"] == "http://127.0.0.1:10101"
    assert services["gpu-jobs"]["command"] == [sys.executable, "-m", "jupyterhub_gpu.services.jobs", "--profiles",
                                               EXAMPLE]
    assert services["gpu-culler"]["url"] == "http://127.0.0.1:10102"
    assert f"--profiles-file={EXAMPLE}" in services["gpu-culler"]["command"]
    assert "--warnings-file=" + str(Path.cwd() / "gpuhub-culler-warnings.json") in services["gpu-culler"]["command"]
    # new cull warnings go to gpu-jobs' notifications endpoint, straight to the service (not through the proxy)
    assert "--notify-url=http://127.0.0.1:10101/services/gpu-jobs/notifications/cull-warnings" in \
        services["gpu-culler"]["command"]
    roles = by_name(c.JupyterHub.load_roles)
    assert roles == {
        "gpu-jobs-service": {"name": "gpu-jobs-service", "description": roles["gpu-jobs-service"]["description"],
                             "scopes": jobs.SCOPES, "services": ["gpu-jobs"]},
        "gpu-culler-role": {"name": "gpu-culler-role", "description": "GPU-aware idle culler (least privilege)",
                            "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers",
                                       "access:services!service=gpu-jobs"],  # to forward its warnings
                            "services": ["gpu-culler"]},
        "user": {"name": "user", "scopes": ["self", "access:services!service=gpu-jobs"]},
    }
    assert c.Spawner.server_token_scopes == [*SERVER_TOKEN_SCOPES, "access:services!service=gpu-jobs"]
    assert c.GPUSpawner.environment == {"GPUHUB_JOBS_URL": "http://proxy-public/services/gpu-jobs/"}
    assert "announcement" in c.JupyterHub.template_vars


def test_calling_it_twice_changes_nothing():
    once, twice = Config(), Config()
    configure(once, EXAMPLE)
    configure(twice, EXAMPLE)
    configure(twice, EXAMPLE)
    for section, key in [("JupyterHub", "services"), ("JupyterHub", "load_roles"), ("Spawner", "server_token_scopes"),
                         ("GPUSpawner", "environment"), ("JupyterHub", "spawner_class")]:
        assert twice[section][key] == once[section][key], (section, key)
    # a later call with other settings replaces its own entries
    configure(twice, EXAMPLE, ports={"gpu-jobs": 10124})
    assert [s["url"] for s in twice.JupyterHub.services if s["name"] == "gpu-jobs"] == ["http://127.0.0.1:10124"]


def test_merges_with_what_the_admin_set_before():
    c = Config()
    c.JupyterHub.services = [{"name": "other", "api_token": "x"}, {"name": "gpu-jobs", "url": "stale"}]
    c.JupyterHub.load_roles = [{"name": "user", "scopes": ["self", "read:groups"]},
                               {"name": "other-role", "scopes": ["read:users"], "services": ["other"]}]
    c.JupyterHub.template_vars = {"org": "ACME"}
    c.Spawner.server_token_scopes = ["access:servers!server"]
    c.GPUSpawner.environment = {"A": "1"}
    c.GPUSpawner.start_timeout = 900  # the admin's own timeout wins
    configure(c, EXAMPLE)
    services = by_name(c.JupyterHub.services)
    assert list(services) == ["other", "gpu-jobs", "gpu-culler"] and services["gpu-jobs"]["url"] != "stale"
    roles = by_name(c.JupyterHub.load_roles)
    assert roles["user"]["scopes"] == ["self", "read:groups", "access:services!service=gpu-jobs"]
    assert roles["other-role"] == {"name": "other-role", "scopes": ["read:users"], "services": ["other"]}
    assert c.Spawner.server_token_scopes == ["access:servers!server", "access:services!service=gpu-jobs"]
    assert c.GPUSpawner.environment["A"] == "1" and c.GPUSpawner.environment["GPUHUB_JOBS_URL"].endswith("/gpu-jobs/")
    assert c.GPUSpawner.start_timeout == 900 and c.GPUSpawner.http_timeout == 120
    assert c.JupyterHub.template_vars["org"] == "ACME" and "announcement" in c.JupyterHub.template_vars


def test_lazily_appended_services_and_parent_environments_survive():
    """z2jh appends to c.JupyterHub.services and sets c.KubeSpawner.environment (singleuser.extraEnv); a
    GPUSpawner section would replace, not merge, that dict, so configure merges it in."""
    c = Config()
    c.JupyterHub.services.append({"name": "appended", "api_token": "t"})
    c.KubeSpawner.environment = {"EXTRA": "from-z2jh", "GPUHUB_JOBS_URL": "overridden"}
    c.Spawner.environment = {"BASE": "1"}
    configure(c, EXAMPLE, jobs_url_for_servers="http://proxy/services/gpu-jobs/")
    assert [s["name"] for s in c.JupyterHub.services] == ["appended", "gpu-jobs", "gpu-culler"]
    assert c.GPUSpawner.environment == {"BASE": "1", "EXTRA": "from-z2jh",
                                        "GPUHUB_JOBS_URL": "http://proxy/services/gpu-jobs/"}


def test_the_servers_jobs_url_the_admin_set_is_kept(monkeypatch):
    c = Config()
    c.KubeSpawner.environment = {"GPUHUB_JOBS_URL": "https://hub.example/services/gpu-jobs/"}  # singleuser.extraEnv
    configure(c, EXAMPLE)
    configure(c, EXAMPLE)
    assert c.GPUSpawner.environment["GPUHUB_JOBS_URL"] == "https://hub.example/services/gpu-jobs/"
    monkeypatch.setenv("GPUHUB_JOBS_PUBLIC_URL", "https://other.example/services/gpu-jobs/")  # the hub's env wins
    configure(c, EXAMPLE)
    assert c.GPUSpawner.environment["GPUHUB_JOBS_URL"] == "https://other.example/services/gpu-jobs/"


def test_a_callable_server_token_scopes_gets_the_access_once():
    c = Config()
    c.Spawner.server_token_scopes = lambda spawner: ["access:servers!server", f"read:users!user={spawner}"]
    configure(c, EXAMPLE)
    configure(c, EXAMPLE)
    assert c.Spawner.server_token_scopes("ana") == ["access:servers!server", "read:users!user=ana",
                                                    "access:services!service=gpu-jobs"]


def test_per_service_ports_options_environment_and_host():
    c = Config()
    configure(c, EXAMPLE, services_host="hub", ports={"gpu-jobs": 2001, "gpu-culler": 2002},
              options={"gpu-jobs": {"max-timeout": "3d"}, "gpu-culler": {"gpu-idle-policy": "gpu"}},
              environment={"gpu-jobs": {"KUBECONFIG": "/k"}, "gpu-culler": {"X": "1"}},
              env={"HOME": "/home/hub", "GPUHUB_CULLER_THRESHOLD": "0.1", "SECRET": "not passed on"})
    services = by_name(c.JupyterHub.services)
    assert services["gpu-jobs"]["url"] == "http://hub:2001" and services["gpu-culler"]["url"] == "http://hub:2002"
    assert services["gpu-jobs"]["command"][-1] == "--max-timeout=3d"
    assert services["gpu-jobs"]["environment"] == {"HOME": "/home/hub", "KUBECONFIG": "/k"}
    assert {"--gpu-idle-policy=gpu", "--gpu-idle-threshold=0.1"} <= set(services["gpu-culler"]["command"])
    assert services["gpu-culler"]["environment"] == {"X": "1"}
    with pytest.raises(ValueError, match="unknown service.*gpu-job;.*gpu-jobs, gpu-culler"):
        configure(Config(), EXAMPLE, options={"gpu-job": {}})


def test_hub_environment_names_ports_and_urls(monkeypatch):
    monkeypatch.setenv("GPUHUB_JOBS_PORT", "3001")
    monkeypatch.setenv("GPUHUB_CULLER_URL", "http://hub:3002")
    monkeypatch.setenv("GPUHUB_JOBS_PUBLIC_URL", "https://hub.example/services/gpu-jobs/")
    c = Config()
    configure(c, EXAMPLE)
    services = by_name(c.JupyterHub.services)
    assert services["gpu-jobs"]["url"] == "http://127.0.0.1:3001" and services["gpu-culler"]["url"] == "http://hub:3002"
    assert c.GPUSpawner.environment["GPUHUB_JOBS_URL"] == "https://hub.example/services/gpu-jobs/"


def test_no_or_bad_profiles_file_stops_the_hub(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("GPUHUB_PROFILES", raising=False)
    with pytest.raises(SystemExit) as e:
        configure(Config())
    assert e.value.code == 2 and "no profiles file; set $GPUHUB_PROFILES" in capsys.readouterr().err
    bad = tmp_path / "p.yaml"
    bad.write_text("profiles: []\n")
    c = Config()
    with pytest.raises(SystemExit):
        configure(c, str(bad))
    assert "refusing to start" in capsys.readouterr().err and "services" not in c.JupyterHub


def test_the_gpu_entry_point_and_the_dotted_path_name_the_same_spawner():
    from importlib.metadata import entry_points

    from jupyterhub.app import JupyterHub

    from jupyterhub_gpu.hub.spawner import GPUSpawner

    (ep,) = entry_points(group="jupyterhub.spawners", name="gpu")
    assert ep.load() is GPUSpawner
    assert JupyterHub(spawner_class="gpu").spawner_class is GPUSpawner
    assert JupyterHub(spawner_class=SPAWNER_CLASS).spawner_class is GPUSpawner


def test_the_repo_config_and_the_dev_hub_config_load_the_same_roles(monkeypatch, tmp_path):
    """Both call configure: the same services and the same scopes (none spelled out in either file)."""
    import jupyterhub_gpu_dev.devhub as devhub

    monkeypatch.setenv("GPUHUB_PROFILES", EXAMPLE)
    repo = PyFileConfigLoader("jupyterhub_config.py", path=str(REPO)).load_config()
    monkeypatch.setattr(devhub, "proxy_command", lambda: "configurable-http-proxy")
    dev_path = devhub.write_config(devhub.HubSettings(state_dir=tmp_path / "dev", profiles=EXAMPLE_PROFILES,
                                                      kubeconfig=tmp_path / "kubeconfig"))
    dev = PyFileConfigLoader(dev_path.name, path=str(dev_path.parent)).load_config()
    for cfg in (repo, dev):
        roles = by_name(cfg.JupyterHub.load_roles)
        assert roles[jobs.ROLE]["scopes"] == jobs.SCOPES and roles[culler.ROLE]["scopes"] == culler.SCOPES
        assert jobs.ACCESS in roles["user"]["scopes"] and jobs.ACCESS in cfg.Spawner.server_token_scopes
        assert {"gpu-jobs", "gpu-culler"} <= set(by_name(cfg.JupyterHub.services))
        assert cfg.JupyterHub.spawner_class == SPAWNER_CLASS
    for text in ((REPO / "jupyterhub_config.py").read_text(), dev_path.read_text()):
        assert "read:users" not in text and "delete:servers" not in text and "access:services" not in text
