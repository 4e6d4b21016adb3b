"""The ship tier's installed product: the command `gpuhub dev --z2jh` as a fixture (real kubelet nodes with containerd,
the images of `make images`, the z2jh chart with deploy/values.yaml), shared by the tests of a module."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu_dev import binaries, cluster, devsetup, realnodes, z2jh
from jupyterhub_gpu_dev.kube import Kube

#: Where the ship tier's cluster lives: its nodes' containerd roots persist there, so an unchanged image is
#: imported once, not on every run.
SHIP_CLUSTER = "ship-cluster"


@dataclass
class Installed:
    cluster: cluster.Cluster
    url: str
    password: str
    users: dict[str, list[str]]
    profiles: Path
    proc: subprocess.Popen
    log: Path

    def kube(self) -> Kube:
        return self.cluster.kube()

    @property
    def nodes(self) -> dict[str, dict]:
        """'system', 'gpu' and 'agent' (the dev agent's host) → its record (name, ip, ...)."""
        return {n["kind"]: n for n in realnodes.recorded(self.cluster.layout)}

    @property
    def homes(self) -> Path:
        return self.cluster.root / "homes"

    def login(self, user: str) -> tuple[requests.Session, str]:
        """Log in through proxy-public as the browser does; returns the session and an API token of the user's."""
        s = requests.Session()
        page = s.get(f"{self.url}/hub/login", timeout=30)
        assert page.status_code == 200 and s.cookies.get("_xsrf"), (page.status_code, page.text[:500])
        r = s.post(f"{self.url}/hub/login?next=", data={"username": user, "password": self.password,
                                                       "_xsrf": s.cookies.get("_xsrf")}, timeout=60,
                   allow_redirects=False)
        assert r.status_code == 302, (r.status_code, r.text[:500])
        r = s.post(f"{self.url}/hub/api/users/{user}/tokens", headers={"X-XSRFToken": s.cookies.get("_xsrf")},
                   json={"note": "ship tier", "expires_in": 3600}, timeout=60)
        assert r.status_code == 201, r.text
        return s, r.json()["token"]

    def start_server(self, user: str, token: str, profile: str, timeout: float = 240) -> dict:
        h = {"Authorization": f"token {token}"}
        r = requests.post(f"{self.url}/hub/api/users/{user}/server", headers=h, json={"profile": profile}, timeout=60)
        assert r.status_code in (201, 202), r.text
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            server = requests.get(f"{self.url}/hub/api/users/{user}", headers=h, timeout=30).json()["servers"].get("")
            if server and server.get("ready"):
                return server
            assert server and server.get("pending"), f"the server stopped while starting: {server}"
            time.sleep(1)
        raise AssertionError(f"{user}'s {profile} server was not ready within {timeout:.0f} s")


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "real nodes need root (network namespaces, cgroups, mounts)"
    try:
        z2jh.chart_dir()
    except z2jh.ChartMissing as e:
        return str(e)
    return None


def _started(log: Path, proc: subprocess.Popen, timeout: float = 900) -> tuple[str, str]:
    """proxy-public's URL and the dev password, from what `gpuhub dev --z2jh` prints once it is up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        url, password = re.search(r"is up: (http://\S+)", text), re.search(r"with the password (\S+):", text)
        if url and password:
            return url.group(1), password.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"gpuhub dev --z2jh exited ({proc.returncode}) before it was up:\n{text[-4000:]}")
        time.sleep(1)
    raise AssertionError(f"gpuhub dev --z2jh was not up within {timeout:.0f} s:\n{log.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def z2jh_install(tmp_path_factory) -> Installed:
    """`gpuhub dev --z2jh` (the command itself, in its own state folder) with the example profiles and its demo
    users; whatever a test leaves running is stopped with `gpuhub cluster down` at the end."""
    if reason := _why_not():
        pytest.skip(reason)
    profiles = Path(EXAMPLE_PROFILES)
    users = devsetup.demo_users(load_profiles(profiles))
    root = binaries.cache_root() / SHIP_CLUSTER
    cluster.down(root)  # a crashed run's leftovers
    for stale in ("homes", "z2jh"):  # every run starts with empty homes and a fresh hub database
        shutil.rmtree(root / stale, ignore_errors=True)
    log = tmp_path_factory.mktemp("gpuhub-dev-z2jh") / "gpuhub-dev.log"
    env = dict(os.environ, GPUHUB_CLUSTER_DIR=str(root))
    with log.open("wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "gpuhub"), "dev", "--z2jh"], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        url, password = _started(log, proc)
        yield Installed(cluster.Cluster(root), url, password, users, profiles, proc, log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
        cluster.down(root, say=print)
