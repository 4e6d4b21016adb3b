"""The usage collector and showback page wired by configure(c) (services/usage/hub.py): on by default with
one store shared by both, the page open to each user, off by argument or $GPUHUB_USAGE, and free ports."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from traitlets.config import Config

from jupyterhub_gpu.config import configure
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.services.usage.hub import usage_enabled

EXAMPLE = str(EXAMPLE_PROFILES)


@pytest.fixture(autouse=True)
def hub_env(monkeypatch, tmp_path):
    for var in ("GPUHUB_USAGE", "GPUHUB_USAGE_STORE", "GPUHUB_USAGE_PROMETHEUS_URL", "GPUHUB_CULLER_PROMETHEUS_URL",
                "GPUHUB_USAGE_URL", "POD_NAMESPACE", "KUBECONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("GPUHUB_ADMIN_CONSOLE", "off")  # the admins' console has its own configure test
    monkeypatch.chdir(tmp_path)


def services(c):
    return {s["name"]: s for s in c.JupyterHub.services}


def test_a_real_install_runs_the_collector_and_the_page():
    c = Config()
    configure(c, EXAMPLE)
    s = services(c)
    store = str(Path.cwd() / "gpuhub-usage")  # the hub's working directory: z2jh's /srv/jupyterhub volume
    assert s["gpu-usage-collector"]["command"] == [
        sys.executable, "-m", "jupyterhub_gpu.services.usage", f"--profiles-file={EXAMPLE}", f"--store={store}",
        "--hub-namespace=jhub", "--port=9402"]
    assert "url" not in s["gpu-usage-collector"]  # a process, no page: the proxy routes nothing to it
    # managed services get a clean environment: the API server's address is passed on
    assert s["gpu-usage-collector"]["environment"] == {"KUBERNETES_SERVICE_HOST": "10.0.0.1",
                                                      "KUBERNETES_SERVICE_PORT": "443"}
    assert s["gpu-usage"]["url"] == "http://127.0.0.1:10103" and s["gpu-usage"]["oauth_no_confirm"]
    assert s["gpu-usage"]["command"] == [sys.executable, "-m", "jupyterhub_gpu.services.usage.web", f"--store={store}"]
    user = next(r for r in c.JupyterHub.load_roles if r["name"] == "user")
    assert "access:services!service=gpu-usage" in user["scopes"]
    assert not any("gpu-usage" in r.get("services", []) for r in c.JupyterHub.load_roles)  # no hub API scope
    once = list(c.JupyterHub.services)
    configure(c, EXAMPLE)
    assert c.JupyterHub.services == once  # twice: the same


def test_settings_reach_both_services(monkeypatch):
    monkeypatch.setenv("GPUHUB_USAGE_STORE", "/srv/jupyterhub/usage")
    monkeypatch.setenv("GPUHUB_CULLER_PROMETHEUS_URL", "http://prometheus:9090")
    monkeypatch.setenv("POD_NAMESPACE", "hubns")
    c = Config()
    configure(c, EXAMPLE, services_host="hub", ports={"gpu-usage": 10200, "gpu-usage-collector": 9500},
              options={"gpu-usage-collector": {"every": 30, "retention": "400d"}})
    s = services(c)
    assert s["gpu-usage"]["url"] == "http://hub:10200"
    assert s["gpu-usage"]["command"][3:] == ["--store=/srv/jupyterhub/usage", f"--profiles-file={EXAMPLE}",
                                             "--prometheus-url=http://prometheus:9090"]
    assert s["gpu-usage-collector"]["command"][3:] == [
        f"--profiles-file={EXAMPLE}", "--store=/srv/jupyterhub/usage", "--hub-namespace=hubns", "--port=9500",
        "--every=30", "--retention=400d"]


@pytest.mark.parametrize("value", ["off", "false", "0", "No"])
def test_off_by_environment_or_argument(monkeypatch, value):
    c = Config()
    configure(c, EXAMPLE)
    assert "gpu-usage" in services(c)
    monkeypatch.setenv("GPUHUB_USAGE", value)
    configure(c, EXAMPLE)  # a later call with it off takes both entries out
    assert not {"gpu-usage", "gpu-usage-collector"} & set(services(c))
    assert usage_enabled(True, {"GPUHUB_USAGE": value}) and not usage_enabled(False, {})
    off = Config()
    monkeypatch.delenv("GPUHUB_USAGE")
    configure(off, EXAMPLE, usage=False)
    assert set(services(off)) == {"gpu-jobs", "gpu-culler"}
