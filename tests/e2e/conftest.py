"""A real JupyterHub (configurable-http-proxy from npm, GPUSpawner, DevAuthenticator) on the dev
cluster, with the dev node agent running the singleuser servers of simulated nodes as processes."""
from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import yaml

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu_dev.dev import AgentProcess
from jupyterhub_gpu_dev.devhub import DevHub, login, xsrf_token
from jupyterhub_gpu_dev.testing import hub_with_agent

GROUPS = {"alice": ["data-science"], "rita": ["ml-research"], "admin": ["data-science", "ml-research"]}
#: The example file plus a pool that has no nodes and cannot grow, for the fail-fast test.
GHOST_POOL = {"node_selector": {"kubernetes.azure.com/agentpool": "gpughost"},
              "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
              "gpu": {"model": "H200-141GB", "count_per_node": 8}, "max_nodes": 0,
              "instance_type": "Standard_ND96isr_H100_v5"}
GHOST_PROFILE = {"slug": "h200-ghost", "display_name": "H200 (retired pool)", "pool": "gpughost",
                 "gpu": {"kind": "full", "count": 1}, "cpu": 8, "memory": "64Gi", "groups": ["ml-research"]}


@dataclass
class Hub:
    url: str
    token: str
    process: DevHub
    agent: AgentProcess

    def api(self, method: str, path: str, **kw) -> requests.Response:
        headers = {"Authorization": f"token {self.token}", **kw.pop("headers", {})}
        kw.setdefault("timeout", 30)
        return requests.request(method, f"{self.url}/hub/api{path}", headers=headers, **kw)

    def login(self, name: str) -> requests.Session:
        return login(self.url, name)

    def xsrf(self, session: requests.Session, page: str) -> str:
        return xsrf_token(session, page)

    def server(self, user: str) -> dict | None:
        return self.api("GET", f"/users/{user}").json()["servers"].get("")

    def wait_stopped(self, user: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.server(user) is not None:
            assert time.monotonic() < deadline, f"{user}'s server did not stop"
            time.sleep(0.5)

    def stop(self, user: str) -> None:
        self.api("DELETE", f"/users/{user}/server")
        self.wait_stopped(user)

    def progress(self, user: str, until, timeout: float = 120) -> list[dict]:
        """Events of the spawn progress API (server-sent events) until `until(event)` or the stream ends."""
        events = []
        with self.api("GET", f"/users/{user}/server/progress", stream=True, timeout=timeout) as r:
            deadline = time.monotonic() + timeout
            for line in r.iter_lines(decode_unicode=True):
                if line and line.startswith("data:"):
                    events.append(json.loads(line[5:]))
                    if until(events[-1]):
                        break
                assert time.monotonic() < deadline, f"no matching progress event; got {events}"
        return events


@pytest.fixture(scope="package")
def hub_profiles(tmp_path_factory) -> Path:
    data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    data["pools"]["gpughost"] = GHOST_POOL
    data["profiles"].append(GHOST_PROFILE)
    path = tmp_path_factory.mktemp("hubprofiles") / "profiles.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="package")
def hub(cluster, hub_profiles, tmp_path_factory) -> Hub:
    token = secrets.token_hex(16)
    with hub_with_agent(cluster, tmp_path_factory.mktemp("devhub"), hub_profiles, GROUPS,
                        {"e2e-tests": token}) as (dev, agent):
        yield Hub(dev.settings.url, token, dev, agent)

