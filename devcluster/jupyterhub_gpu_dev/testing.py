"""pytest plugin for tests against the dev cluster (loaded by tests/conftest.py).

`cluster` (session): a real control plane (etcd, kube-apiserver, controller-manager, scheduler,
KWOK, Kueue) with the example profiles' node pools, 2 nodes per pool. It builds the binaries when
missing (skipped when Go is missing: a failure under CI=true, see tests/conftest.py), stops every
process it started on teardown, also after a failure or Ctrl-C (and at interpreter exit as a last
resort). `namespace`: a fresh namespace, emptied after the test. `scratch_root`: a state folder
for a test's own second cluster. Any failing test that used them gets the log folder and each
component's log tail in its report.
"""
from __future__ import annotations

import atexit
import re
import secrets
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pytest
import requests
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from jupyterhub_gpu.contract import JOBS_ACCESS_SCOPE
from jupyterhub_gpu_dev import binaries
from jupyterhub_gpu_dev import cluster as dc
from jupyterhub_gpu_dev.kube import Kube

if TYPE_CHECKING:
    from jupyterhub_gpu_dev.dev import AgentProcess
    from jupyterhub_gpu_dev.devhub import DevHub

NODES_PER_POOL = 2
LOG_TAIL = 20

#: State folders of clusters this session started, for the failure report.
_active: list[Path] = []


def wait_until(check: Callable[[], Any], timeout: float = 30, what: str = "a condition", interval=0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@dataclass
class DevCluster:
    """A running dev cluster and helpers for tests (sync `kubernetes` client)."""

    root: Path
    profiles: Path
    wait_until = staticmethod(wait_until)

    @property
    def kubeconfig(self) -> Path:
        return dc.Cluster(self.root).kubeconfig

    @property
    def logs(self) -> Path:
        return dc.Cluster(self.root).logs

    def api_client(self) -> client.ApiClient:
        """A new sync ApiClient for this cluster (close it when done, or use `with`)."""
        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def kube(self) -> Kube:
        return dc.Cluster(self.root).kube()

    def wait_for_service_account(self, namespace: str) -> None:
        """Pods are refused until the controller-manager made the namespace's default service account."""
        kube = self.kube()
        try:
            dc.wait_for_service_account(kube, namespace)
        finally:
            kube.close()

    # ------------------------------------------------------------------ faults
    def stop_component(self, name: str) -> None:
        """Stop one control-plane component (kube-apiserver, kueue, ...): a fault for tests; the cluster's
        `down` no longer knows it until `start_component` brings it back."""
        from jupyterhub_gpu_dev import procs
        from jupyterhub_gpu_dev.components import Layout

        run = Layout(self.root).run
        records = procs.Record.load_all(run)
        assert name in records, f"{name} is not running in this dev cluster"
        procs.stop([records[name]], run)

    def start_component(self, name: str, timeout: float = 90) -> None:
        """Start a stopped component again, exactly as `up` did (same flags, ports and log), until healthy."""
        from jupyterhub_gpu_dev import procs
        from jupyterhub_gpu_dev.components import Layout
        from jupyterhub_gpu_dev.pki import PKI

        layout = Layout(self.root)
        comp = dc.Cluster(self.root).info["components"][name]
        procs.spawn(name, comp["argv"], Path(comp["log"]), layout.root, comp["health_url"], layout.run)
        ctx = dc._ssl_context(PKI(layout.pki_dir))
        wait_until(lambda: dc.probe(comp["health_url"], ctx), timeout, f"{name} to be healthy again")

    @cached_property
    def _kube(self) -> Kube:
        return self.kube()

    def create(self, obj: dict) -> dict:
        """POST a manifest exactly as given (the sync client's models would reject KubeSpawner's numeric
        quantities, which the API server and kubernetes_asyncio accept)."""
        return self._kube.create(obj)

    @cached_property
    def _client(self) -> client.ApiClient:
        return self.api_client()

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self._client)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self._client)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self._client)

    # ------------------------------------------------------------------ pods and nodes
    def node_labels(self, name: str) -> dict[str, str]:
        return self.core.read_node(name).metadata.labels

    def wait_bound(self, namespace: str, pod: str, timeout: float = 30) -> str:
        """The node the scheduler bound the pod to."""
        return wait_until(lambda: self.core.read_namespaced_pod(pod, namespace).spec.node_name, timeout,
                          f"pod {namespace}/{pod} to be bound to a node")

    def scheduling_failures(self, namespace: str, pod: str) -> list[str]:
        events = self.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
        return [e.message for e in events if e.reason == "FailedScheduling"]

    def workloads(self, namespace: str) -> list[dict]:
        return self.custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace,
                                                         "workloads")["items"]

    def workload_of(self, namespace: str, job: str) -> dict | None:
        return next((w for w in self.workloads(namespace)
                     if any(o["name"] == job for o in w["metadata"].get("ownerReferences", []))), None)

    def clean(self, namespace: str, timeout: float = 60) -> None:
        """Delete the namespace's Jobs and pods and wait until they (and Kueue's Workloads) are gone,
        so the next test finds the pools and quotas empty."""
        for job in self.batch.list_namespaced_job(namespace).items:
            self.batch.delete_namespaced_job(job.metadata.name, namespace, propagation_policy="Background")
        for pod in self.core.list_namespaced_pod(namespace).items:
            try:
                self.core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
            except ApiException as e:
                if e.status != 404:
                    raise
        wait_until(lambda: not self.core.list_namespaced_pod(namespace).items
                   and not self.batch.list_namespaced_job(namespace).items
                   and not self.workloads(namespace), timeout, f"pods, Jobs and Workloads in {namespace} to go")


def log_report(roots: list[Path]) -> str:
    out = []
    for root in roots:
        logs = root / "logs"
        out.append(f"dev cluster log folder: {logs}")
        for log in sorted(logs.glob("*.log")):
            out.append(f"--- {log.name} (last {LOG_TAIL} lines) ---\n{dc.log_tail(log, LOG_TAIL)}")
    return "\n".join(out)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and _active and {"cluster", "scratch_root"} & set(getattr(item, "fixturenames", ())):
        rep.sections.append(("dev cluster logs", log_report(_active)))
    if rep.failed:  # a hub fixture from hub_with_agent (its .process and .agent): their logs too
        for value in (getattr(item, "funcargs", None) or {}).values():
            if hasattr(value, "process") and hasattr(value, "agent") and hasattr(value.process, "log_tail"):
                rep.sections.extend(hub_log_sections(value.process, value.agent))


def _interrupt_on_sigterm() -> None:
    """A CI job timeout sends SIGTERM: make it a Ctrl-C, so pytest still runs the cluster's teardown."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def interrupt(signum, frame):
            raise KeyboardInterrupt(f"signal {signum}")

        signal.signal(signal.SIGTERM, interrupt)


def _build_or_skip() -> None:
    try:
        binaries.build(verbose=True)
    except binaries.BuildError as e:
        pytest.skip(f"the dev cluster's binaries are not available: {e}")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> DevCluster:
    from jupyterhub_gpu.model.profiles_file import (
        EXAMPLE_PROFILES,  # not at import: it loads kubernetes_asyncio's config
    )

    _build_or_skip()
    root = tmp_path_factory.mktemp("devcluster")
    _active.append(root)
    atexit.register(dc.down, root)  # last resort, should the teardown below never run
    _interrupt_on_sigterm()
    try:
        dc.up(EXAMPLE_PROFILES, NODES_PER_POOL, root=root, say=lambda m: print(f"[devcluster] {m}", file=sys.stderr))
        yield DevCluster(root, EXAMPLE_PROFILES)
    finally:
        dc.down(root)


@pytest.fixture
def scratch_root(tmp_path) -> Path:
    """A state folder for a test's own (second) cluster; its logs join the failure report; stopped after."""
    _build_or_skip()
    root = tmp_path / "state"
    _active.append(root)
    yield root
    dc.down(root)
    _active.remove(root)


@pytest.fixture
def namespace(cluster: DevCluster, request) -> str:
    """A fresh namespace (with its default service account); emptied and deleted after the test."""
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{base}-{secrets.token_hex(2)}"
    cluster.core.create_namespace({"metadata": {"name": name}})
    cluster.wait_for_service_account(name)
    yield name
    cluster.clean(name)
    cluster.core.delete_namespace(name)


#: State folders of the hubs whose dev agent runs now (at most one: see hub_with_agent).
_agents: list[Path] = []


@contextmanager
def hub_with_agent(cluster: DevCluster, state: Path, profiles: Path, groups: dict, api_tokens: dict,
                   extra: str = "") -> Iterator[tuple[Any, Any]]:
    """A real dev hub (DevAuthenticator, CHP, GPUSpawner, gpu-jobs service) on `cluster`, with the dev node
    agent (SIMULATOR) running its pods as processes: yields (DevHub, AgentProcess); both stopped after."""
    from .devhub import DevHub, HubSettings, free_port

    with dev_agent(cluster, state) as agent:
        dev = DevHub(HubSettings(state_dir=state, profiles=profiles, kubeconfig=cluster.kubeconfig,
                                 port=free_port(), groups=groups, api_tokens=api_tokens, extra=extra))
        try:
            dev.start()
            yield dev, agent
        finally:
            dev.stop()


@contextmanager
def dev_agent(cluster: DevCluster, state: Path) -> Iterator[Any]:
    """The dev node agent (SIMULATOR) on `cluster`, its state in `state`: yields its AgentProcess; stopped
    after. At most one at a time (two agents would both run the same pods)."""
    from .dev import AgentProcess

    if _agents:
        raise RuntimeError(f"a dev node agent still runs on this cluster (state {_agents[0]}): two agents "
                           "would both run the same pods; scope hub fixtures so that one ends before the next starts")
    agent = AgentProcess(state, cluster.kubeconfig).start()
    _agents.append(state)
    try:
        yield agent
    finally:
        agent.stop()
        _agents.remove(state)


async def pod_outside_jhub(cluster: DevCluster, namespace: str, slug: str, user: str, groups: list[str],
                           name: str) -> dict:
    """GPUSpawner's pod of `slug` (KubeSpawner's real code path) for a namespace of a test's own: without what
    only the hub's namespace has, the team's Kueue queue (no LocalQueue there: Kueue would hold the pod
    forever; admission is tests/queue's), the workload identity's ServiceAccount and the datasets' claims."""
    from jupyterhub_gpu.builders.datasets import volume_name
    from jupyterhub_gpu.contract import ENV_DATASETS, PRIORITY_LABEL, QUEUE_LABEL
    from jupyterhub_gpu.hub.render_pod import pod_manifest
    from jupyterhub_gpu.model.profiles_file import load_profiles

    pod = await pod_manifest(cluster.profiles, slug, user, groups)
    pod["metadata"].update(namespace=namespace, name=name)
    for label in (QUEUE_LABEL, PRIORITY_LABEL):
        pod["metadata"]["labels"].pop(label, None)
    pod["spec"].pop("serviceAccountName", None)
    datasets = {volume_name(n) for n in load_profiles(cluster.profiles).datasets}
    pod["spec"]["volumes"] = [v for v in pod["spec"].get("volumes", []) if v["name"] not in datasets]
    for c in pod["spec"]["containers"]:
        c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if m["name"] not in datasets]
        c["env"] = [e for e in c.get("env", []) if e["name"] != ENV_DATASETS]
    return pod


def write_profiles(cluster: DevCluster, path: Path, edit: Callable[[dict], Any] | None = None) -> Path:
    """The dev cluster's example profiles, changed by `edit(data)`, written to `path`, with their Kueue
    objects applied (new teams' namespaces and queues)."""
    import yaml

    from jupyterhub_gpu.model.profiles_file import load_profiles

    data = yaml.safe_load(cluster.profiles.read_text())
    if edit:
        edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    kube = cluster.kube()
    try:
        dc.apply_kueue_objects(kube, load_profiles(path))
    finally:
        kube.close()
    return path


@contextmanager
def jobs_hub(cluster: DevCluster, state: Path, profiles: Path, groups: dict, service_args: tuple[str, ...] = (),
             hub_class: type | None = None) -> Iterator["JobsHub"]:
    """`hub_with_agent` whose test service may make tokens for users, once gpu-jobs answers; `service_args`
    go to gpu-jobs' command line."""
    token = secrets.token_hex(16)
    extra = ('c.JupyterHub.load_roles = list(c.JupyterHub.load_roles) + [{"name": "api-tests-tokens", '
             '"scopes": ["tokens", "admin:users", "read:users", "admin:servers"], '
             '"services": ["jobs-tests"]}]\n'
             'for _s in c.JupyterHub.services:\n'
             '    if _s["name"] == "gpu-jobs":\n'
             f'        _s["command"] = list(_s["command"]) + {list(service_args)!r}\n')
    with hub_with_agent(cluster, state, profiles, groups, {"jobs-tests": token}, extra) as (dev, agent):
        hub = (hub_class or JobsHub)(dev.settings.url, token, dev, agent, state, {})
        cluster.wait_until(lambda: requests.get(f"{hub.url}/services/gpu-jobs/health", timeout=10).status_code == 200,
                           90, "the gpu-jobs service")
        yield hub


def hub_log_sections(dev, agent, lines: int = 80) -> list[tuple[str, str]]:
    """The hub's and the agent's log tails, for a failed test's report."""
    return [("jupyterhub log (tail)", dev.log_tail(lines)),
            ("dev agent log", agent.log_path.read_text(errors="replace")[-4000:])]


#: A two-cell notebook with a `parameters` cell (epochs = 1): what JobsHub.submit sends by default.
PARAMETERS_NB = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
                 "cells": [{"cell_type": "code", "id": "a", "metadata": {"tags": ["parameters"]},
                            "source": "epochs = 1", "outputs": [], "execution_count": None},
                           {"cell_type": "code", "id": "b", "metadata": {}, "source": "print(epochs * 2)",
                            "outputs": [], "execution_count": None}]}


@dataclass
class JobsHub:
    """A dev hub with its gpu-jobs service, driven as users do: their own hub tokens, through the proxy."""

    url: str
    admin_token: str
    process: DevHub
    agent: AgentProcess
    state: Path
    tokens: dict

    def token(self, user: str) -> str:
        """A token of `user` with just what the kernel's server token has for this service."""
        if user not in self.tokens:
            self.login(user)  # the DevAuthenticator sets the user's groups at login
            r = requests.post(f"{self.url}/hub/api/users/{user}/tokens", headers=self.auth(self.admin_token),
                              json={"scopes": [JOBS_ACCESS_SCOPE], "note": "jobs tests"}, timeout=30)
            assert r.status_code == 201, r.text
            self.tokens[user] = r.json()["token"]
        return self.tokens[user]

    def login(self, name: str) -> requests.Session:
        from .devhub import login

        return login(self.url, name)

    @staticmethod
    def auth(token: str) -> dict:
        return {"Authorization": f"token {token}"}

    def call(self, user: str, method: str, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", 30)
        return requests.request(method, f"{self.url}/services/gpu-jobs{path}", headers=self.auth(self.token(user)),
                                **kw)

    def submit(self, user: str, **kw) -> requests.Response:
        body = {"profile": "a100-mig-1g10gb", "notebook_path": "work/train.ipynb", "notebook": PARAMETERS_NB, **kw}
        return self.call(user, "POST", "/jobs", json=body)

    def status(self, user: str, name: str) -> dict:
        r = self.call(user, "GET", f"/jobs/{name}")
        assert r.status_code == 200, r.text
        return r.json()
