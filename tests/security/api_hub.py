"""Shared by the tests/security/test_api_*.py modules: a real dev hub with its gpu-jobs service on the dev
cluster, users with adversarial names logged in through the real DevAuthenticator, and what the team
namespaces hold (to prove that a refused request created nothing)."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import requests

from jupyterhub_gpu_dev.devhub import xsrf_token
from jupyterhub_gpu_dev.testing import JobsHub, jobs_hub, write_profiles  # noqa: F401 (write_profiles: for the tests)

TEAM_NS = ("team-ds", "team-mlr")
JOB_LABEL = "gpuhub.io/job"
NB = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
      "cells": [{"cell_type": "code", "id": "a", "metadata": {"tags": ["parameters"]}, "source": "epochs = 1",
                 "outputs": [], "execution_count": None}]}


def api_hub(cluster, state: Path, profiles: Path, groups: dict, service_args: tuple[str, ...] = ()):
    """A dev hub whose test service may make tokens for users (as AdversarialHub); `service_args` go to gpu-jobs."""
    return jobs_hub(cluster, state, profiles, groups, service_args, AdversarialHub)


class AdversarialHub(JobsHub):
    """Any name: logged in through the login form, tokens made at the QUOTED user URL (the harness must not
    have the bug it tests for), keyed by the name as typed."""

    def login_status(self, name: str) -> tuple[int, str | None]:
        """(status, the hub's user name for the session or None): does the real login accept `name`?"""
        s = requests.Session()
        page = s.get(f"{self.url}/hub/login", timeout=30)
        r = s.post(f"{self.url}/hub/login?next=", data={"username": name, "password": "",
                                                        "_xsrf": xsrf_token(s, page.text)}, timeout=30)
        who = s.get(f"{self.url}/hub/api/user", headers={"X-XSRFToken": s.cookies.get("_xsrf", "")}, timeout=30)
        return r.status_code, (who.json().get("name") if who.status_code == 200 else None)

    def hub_name(self, name: str) -> str:
        status, hub_name = self.login_status(name)
        assert hub_name, f"the hub refused to log in {name!r} ({status})"
        return hub_name

    def token(self, user: str) -> str:
        if user not in self.tokens:
            name = self.hub_name(user)
            r = requests.post(f"{self.url}/hub/api/users/{quote(name, safe='')}/tokens",
                              headers=self.auth(self.admin_token),
                              json={"scopes": ["access:services!service=gpu-jobs"], "note": "api tests"}, timeout=30)
            assert r.status_code == 201, r.text
            self.tokens[user] = r.json()["token"]
        return self.tokens[user]

    def submit(self, user: str, **kw) -> requests.Response:
        body = {"profile": "t4-shared", "notebook_path": "work/train.ipynb", "notebook": NB, **kw}
        return self.call(user, "POST", "/jobs", json=body)


def team_objects(cluster) -> dict[str, set]:
    """Every Job, ConfigMap and claim in the team namespaces (not just the service's labelled ones)."""
    out: dict[str, set] = {"jobs": set(), "configmaps": set(), "claims": set()}
    for ns in TEAM_NS:
        out["jobs"] |= {(ns, j.metadata.name) for j in cluster.batch.list_namespaced_job(ns).items}
        out["configmaps"] |= {(ns, c.metadata.name) for c in cluster.core.list_namespaced_config_map(ns).items}
        out["claims"] |= {(ns, c.metadata.name) for c in
                          cluster.core.list_namespaced_persistent_volume_claim(ns).items}
    return out


def clean_teams(cluster) -> None:
    for ns in TEAM_NS:
        for cm in cluster.core.list_namespaced_config_map(ns, label_selector=JOB_LABEL).items:
            cluster.core.delete_namespaced_config_map(cm.metadata.name, ns)
        cluster.clean(ns, timeout=90)
