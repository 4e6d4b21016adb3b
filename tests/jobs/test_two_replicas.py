"""Two gpu-jobs replicas against one dev cluster and one hub (cluster tier): the hub's own managed gpu-jobs
(reached through the proxy) and a second process started the way the hub starts it, on another port, with
the same hub API. The per-user submit lock is a Lease at the API server (kubeio/lease.py), so parallel
submissions of one user split over both never pass the cap; a replica killed (SIGKILL) mid-way loses no
answered job and leaves no lock past its lease duration."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests
from kubernetes.client.rest import ApiException

from jupyterhub_gpu.kubeio.lease import lease_body, lease_name
from jupyterhub_gpu_dev.devhub import free_port
from jupyterhub_gpu_dev.simulator_keys import DEV_AGENT_LABEL
from jupyterhub_gpu_dev.testing import PARAMETERS_NB, jobs_hub, write_profiles

pytestmark = pytest.mark.cluster

CAP = 3
LEASE_NS = "default"  # both replicas run outside the cluster here: pinned, so they surely share it
DURATION = 15  # Leases' default
ARGS = (f"--max-jobs-per-user={CAP}", "--submissions-in-flight=8", f"--lease-namespace={LEASE_NS}")
GROUPS = {"pia": ["data-science"], "kim": ["data-science"], "lou": ["data-science"]}
BODY = {"profile": "t4-shared", "notebook_path": "work/train.ipynb", "notebook": PARAMETERS_NB}


class Replica:
    """One more gpu-jobs process: the managed service's command line, env and hub API, its own port."""

    def __init__(self, hub, profiles: Path, cluster, state: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/services/gpu-jobs"
        self.log = state / f"gpu-jobs-{self.port}.log"
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "GPUHUB_PROFILES": str(profiles),
               "JUPYTERHUB_API_URL": f"{hub.url}/hub/api", "JUPYTERHUB_API_TOKEN": "unused-user-tokens-decide",
               "JUPYTERHUB_SERVICE_NAME": "gpu-jobs", "JUPYTERHUB_SERVICE_PREFIX": "/services/gpu-jobs/",
               "HOSTNAME": f"replica-{self.port}"}
        env.pop("POD_NAMESPACE", None)
        self.cmd = [sys.executable, "-m", "jupyterhub_gpu.services.jobs", "--profiles", str(profiles),
                    f"--url=http://127.0.0.1:{self.port}", *ARGS, f"--GPUJobs.pod_labels={DEV_AGENT_LABEL}=run"]
        self.env, self.cwd = env, state

    def start(self) -> "Replica":
        self.out = self.log.open("ab")
        self.proc = subprocess.Popen(self.cmd, env=self.env, cwd=self.cwd, stdout=self.out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while True:
            assert self.proc.poll() is None, "the second gpu-jobs exited:\n" + self.tail()
            try:
                if requests.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "the second gpu-jobs did not come up:\n" + self.tail()
            time.sleep(0.3)

    def holder(self) -> str:
        m = re.search(r"locks in \S+ as (\S+?)\)", self.log.read_text(errors="replace"))
        assert m, self.tail()
        return m.group(1)

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:]

    def submit(self, token: str, **kw) -> requests.Response:
        return requests.post(f"{self.url}/jobs", json={**BODY, **kw}, headers={"Authorization": f"token {token}"},
                             timeout=60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.out.close()


@pytest.fixture(scope="module")
def replicas(cluster, tmp_path_factory):
    state = tmp_path_factory.mktemp("tworeplicas")
    profiles = write_profiles(cluster, state / "profiles.yaml")
    (state / "hub").mkdir()
    with jobs_hub(cluster, state / "hub", profiles, GROUPS, ARGS) as hub:
        second = Replica(hub, profiles, cluster, state).start()
        try:
            yield hub, second, (profiles, state)
        finally:
            second.stop()


@pytest.fixture
def clean(cluster):
    yield
    for cm in cluster.core.list_namespaced_config_map("team-ds", label_selector="gpuhub.io/job").items:
        cluster.core.delete_namespaced_config_map(cm.metadata.name, "team-ds")
    cluster.clean("team-ds", timeout=90)


def jobs_of(cluster, user: str) -> set[str]:
    return {j.metadata.name for j in cluster.batch.list_namespaced_job("team-ds", label_selector="gpuhub.io/job").items
            if (j.metadata.annotations or {}).get("gpuhub.io/username") == user}


@pytest.fixture(scope="module")
def coord(cluster):
    from kubernetes import client

    with cluster.api_client() as api:
        yield client.CoordinationV1Api(api)


def lease(coord, user: str):
    try:
        return coord.read_namespaced_lease(lease_name(user), LEASE_NS)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def refusal_is_clear(r: requests.Response) -> bool:
    if r.status_code == 400:
        return f"the limit is {CAP} per user over all profiles" in r.json()["message"]
    if r.status_code == 503:
        return "busy, try again" in r.json()["message"] and r.headers.get("Retry-After") == "2"
    return r.status_code == 429


def test_parallel_submissions_over_both_replicas_stop_at_the_cap(cluster, coord, replicas, clean):
    hub, second, _ = replicas
    token = hub.token("pia")
    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:  # odd ones through the hub's proxy to replica 1, even ones to replica 2
        answers = list(pool.map(lambda i: hub.submit("pia", **BODY) if i % 2 else second.submit(token), range(8)))
    took = time.monotonic() - t0
    seen = [(r.status_code, r.text[:200]) for r in answers]
    assert [r.status_code for r in answers].count(201) == CAP, seen
    assert all(r.status_code == 201 or refusal_is_clear(r) for r in answers), seen
    made = {r.json()["name"] for r in answers if r.status_code == 201}
    assert jobs_of(cluster, "pia") == made, seen
    assert lease(coord, "pia") is None  # released by whoever held it last
    print(f"8 parallel over two replicas: {sorted(seen)} in {took:.1f} s")


def test_a_lock_held_elsewhere_is_busy_with_retry_after_then_free_once_expired(cluster, coord, replicas, clean):
    hub, second, _ = replicas
    now = datetime.now(timezone.utc)
    coord.create_namespaced_lease(LEASE_NS, lease_body(lease_name("lou"), "a-replica-that-hangs", DURATION, now, "lou"))
    t0 = time.monotonic()
    r = second.submit(hub.token("lou"))
    assert r.status_code == 503 and refusal_is_clear(r), (r.status_code, r.text)
    assert 4 <= time.monotonic() - t0 < 15 and jobs_of(cluster, "lou") == set()
    # the same Lease, its holder silent for longer than its duration: expired, taken over, released
    held = coord.read_namespaced_lease(lease_name("lou"), LEASE_NS)
    held.spec.renew_time = now - timedelta(seconds=DURATION + 1)
    coord.replace_namespaced_lease(lease_name("lou"), LEASE_NS, held)
    r = hub.submit("lou", **BODY)
    assert r.status_code == 201, r.text
    assert lease(coord, "lou") is None and jobs_of(cluster, "lou") == {r.json()["name"]}


def test_a_replica_killed_midway_loses_no_answered_job_and_leaves_no_stale_lock(cluster, coord, replicas, clean):
    hub, _, (profiles, state) = replicas
    victim = Replica(hub, profiles, cluster, state).start()
    token, holder = hub.token("kim"), victim.holder()

    def one(i):
        try:
            return hub.submit("kim", **BODY) if i % 2 else victim.submit(token)
        except requests.RequestException as e:  # the killed replica's: no answer
            return e

    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(one, i) for i in range(8)]
            deadline = time.monotonic() + 5  # kill it while it holds kim's lock, if it gets it in time
            while (held_at_kill := getattr(getattr(lease(coord, "kim"), "spec", None), "holder_identity", None)) \
                    != holder and time.monotonic() < deadline:
                time.sleep(0.01)
            victim.kill()
            killed = time.monotonic()
            answers = [f.result() for f in futures]
    finally:
        victim.stop()
    answered = [a for a in answers if isinstance(a, requests.Response)]
    made = {a.json()["name"] for a in answered if a.status_code == 201}
    assert all(a.status_code == 201 or refusal_is_clear(a) for a in answered), [(a.status_code, a.text[:200])
                                                                                for a in answered]
    have = jobs_of(cluster, "kim")
    assert made <= have and len(have) <= CAP, (made, have)  # every 201's job exists; the cap held
    # the killed replica's lock (if it held one) lasts at most its lease duration: then replica 1 takes it
    while (r := hub.submit("kim", **BODY)).status_code == 503:
        assert time.monotonic() - killed < DURATION + 10, r.text
        time.sleep(1)
    assert r.status_code in (201, 400), r.text
    assert time.monotonic() - killed < DURATION + 10
    assert lease(coord, "kim") is None
    print(f"killed replica held the lock: {held_at_kill == holder}; answered {[a.status_code for a in answered]}; "
          f"lock free {time.monotonic() - killed:.1f} s after the kill")
