"""Start, inspect and stop the dev cluster: etcd, kube-apiserver, controller-manager, scheduler, KWOK, Kueue.

Everything lives in one state folder (GPUHUB_CLUSTER_DIR, default ~/.cache/jupyterhub-gpu/cluster):
pid records, logs/<component>.log, the kubeconfig, the PKI and etcd's data. Each `up` starts from
empty etcd data. Ports are free loopback ports picked at start, or pinned with
GPUHUB_CLUSTER_PORT_<NAME> (e.g. GPUHUB_CLUSTER_PORT_KUBE_APISERVER=6443). Any failure during `up`
stops whatever was already started, so nothing is left running, and the error names the component
and its log.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from . import binaries, components, dra_driver, jobset_setup, kueue_setup, leftovers, nodes, procs, realnodes, storage
from .components import ORDER, Component, Layout, SetupError
from .kube import Kube, KubeError, condition_true, wait_for
from .pki import PKI, ensure_pki
from .procs import probe  # noqa: F401 (cluster.probe, as before)

START_TIMEOUT = 90.0
LOG_TAIL_LINES = 25


class ClusterError(RuntimeError):
    """The dev cluster could not be started or stopped; the message says which part and where to look."""


def state_dir() -> Path:
    return Path(os.environ.get("GPUHUB_CLUSTER_DIR") or binaries.cache_root() / "cluster")


def log_tail(path: Path | str, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Cluster:
    """A running dev cluster, as `up` leaves it and `status` finds it."""

    root: Path

    @property
    def layout(self) -> Layout:
        return Layout(self.root)

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    @property
    def logs(self) -> Path:
        return self.layout.logs

    @property
    def info(self) -> dict[str, Any]:
        return json.loads((self.layout.run / "cluster.json").read_text())

    @property
    def server(self) -> str:
        return self.info["server"]

    def kube(self) -> Kube:
        return Kube(self.kubeconfig)

    def records(self) -> dict[str, procs.Record]:
        return procs.Record.load_all(self.layout.run)


# ---------------------------------------------------------------------------------------------- helpers
@contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One `up`/`down` at a time per state folder."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / "lock").open("w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ClusterError(f"another `gpuhub cluster up` or `down` is working on {root}; wait for it") from None
        yield


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_ports() -> dict[str, int]:
    """Free loopback ports for everything, except those pinned by GPUHUB_CLUSTER_PORT_* (checked free)."""
    fixed = components.fixed_ports()
    for name, port in fixed.items():
        if not _port_free(port):
            owner = name.split("-")[0] if name.startswith(("etcd", "kueue", "jobset")) else name
            env = "GPUHUB_CLUSTER_PORT_" + name.upper().replace("-", "_")
            raise ClusterError(f"{owner}: port {port} on 127.0.0.1 ({env}) is already in use by another "
                               f"program; free it or choose another port")
    ports = dict(fixed)
    taken = set(fixed.values())
    for name in components.PORT_NAMES:
        while name not in ports:
            p = _free_port()
            if p not in taken:
                ports[name] = p
                taken.add(p)
    return ports


def _ssl_context(pki: PKI) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    ctx.load_cert_chain(str(pki.client_cert("admin")), str(pki.client_key("admin")))
    return ctx


def _failure(comp: Component, why: str) -> ClusterError:
    tail = log_tail(comp.log)
    hint = ""
    if "address already in use" in tail:
        hint = f" (a port it needs is in use: {', '.join(map(str, comp.ports.values()))})"
    return ClusterError(f"{comp.name} {why}{hint}; its log: {comp.log}\n--- last lines of {comp.log.name} ---\n{tail}")


# ---------------------------------------------------------------------------------------------- up
class _Starter:
    """Starts components in order and remembers them, so a failure can stop exactly those."""

    def __init__(self, layout: Layout, pki: PKI, comps: dict[str, Component], timeout: float, say):
        self.layout, self.comps, self.timeout, self.say = layout, comps, timeout, say
        self.ctx = _ssl_context(pki)
        self.started: list[tuple[procs.Record, Any]] = []

    def start(self, *names: str) -> None:
        for name in names:
            c = self.comps[name]
            rec, proc = procs.spawn(name, c.argv, c.log, self.layout.root, c.health_url, self.layout.run)
            self.started.append((rec, proc))

    def wait_healthy(self, *names: str) -> None:
        for name in names:
            c = self.comps[name]
            proc = next(p for r, p in self.started if r.name == name)
            t0 = time.monotonic()
            deadline = t0 + self.timeout
            while not probe(c.health_url, self.ctx):
                code = proc.poll()
                if code is not None:
                    raise _failure(c, f"exited during start (exit code {code})")
                if time.monotonic() > deadline:
                    raise _failure(c, f"did not become healthy at {c.health_url} within {self.timeout:.0f} s")
                time.sleep(0.05)
            self.say(f"{name} healthy (pid {proc.pid}, {time.monotonic() - t0:.1f} s)")

    def stop_all(self) -> None:
        stop_in_order({r.name: r for r, _ in self.started}, self.layout.run, self.say)
        for _, proc in self.started:
            try:
                proc.wait(timeout=1)
            except Exception:  # noqa: BLE001 - best effort reaping
                pass


def _running(layout: Layout) -> list[procs.Record]:
    return [r for r in procs.Record.load_all(layout.run).values() if procs.alive(r)]


def _prepare(layout: Layout) -> None:
    """A fresh etcd and fresh logs for every `up`; stale pid records from a crash are dropped."""
    for rec in procs.Record.load_all(layout.run).values():
        rec.forget(layout.run)
    (layout.run / "cluster.json").unlink(missing_ok=True)
    shutil.rmtree(layout.etcd_data, ignore_errors=True)
    shutil.rmtree(layout.logs, ignore_errors=True)
    for d in (layout.logs, layout.run, layout.config):
        d.mkdir(parents=True, exist_ok=True)


def up(profiles: str | Path | None = None, nodes_per_pool: int | dict[str, int] = 2, root: Path | None = None,
       say: Callable[[str], None] = lambda msg: None, timeout: float = START_TIMEOUT,
       extra_args: dict[str, list[str]] | None = None, real_gpu_pool: str | None = None,
       images: Callable[[list], dict[str, dict[Path, list[str]]]] | None = None) -> Cluster:
    """Start everything, create the node pools and Kueue objects of `profiles`, return when ready.

    `extra_args` appends flags to a component's command line (tests use it to make one fail).
    `real_gpu_pool`: also real nodes (realnodes.py), one for the system pool and one for this GPU pool, which
    then have no KWOK nodes; `images(nodes)` says which image archives each real node gets (node → archive →
    names).
    """
    from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

    cfg = load_profiles(profiles or EXAMPLE_PROFILES)
    layout = Layout(Path(root or state_dir()))
    with _locked(layout.root):
        running = _running(layout)
        if running:
            raise ClusterError(
                f"a dev cluster is already running in {layout.root} ("
                + ", ".join(f"{r.name} pid {r.pid}" for r in running)
                + "); stop it with `gpuhub cluster down`, or set GPUHUB_CLUSTER_DIR to run another one")
        stray = leftovers.unrecorded(layout)
        if stray:
            raise ClusterError(f"processes an earlier run started for {layout.root} still run ("
                               + ", ".join(procs.describe(p) for p in stray)
                               + "); stop them with `gpuhub cluster down`")
        t0 = time.monotonic()
        bins = binaries.build(verbose=True, only=binaries.ALL_BINARIES if real_gpu_pool else None)
        real = _real_nodes(cfg, real_gpu_pool, layout) if real_gpu_pool else []
        if real:
            realnodes.check_machine()
            realnodes.claim_network(layout)
            nodes_per_pool = {name: 0 if name in {n.pool_name for n in real} else
                              (nodes_per_pool if isinstance(nodes_per_pool, int) else nodes_per_pool.get(name, 0))
                              for name in nodes.with_system_pool(cfg)}
        ports = pick_ports()
        _prepare(layout)
        pki = ensure_pki(layout.pki_dir)
        server = f"https://127.0.0.1:{ports['kube-apiserver']}"
        components.write_kubeconfigs(layout, server, pki)
        components.write_kwok_config(layout)
        components.write_kueue_config(layout, pki, {"health": ports["kueue-health"],
                                                    "webhook": ports["kueue-webhook"],
                                                    "metrics": ports["kueue-metrics"]}, cfg)
        jobset_setup.write_config(layout, pki, ports)
        comps = components.build(layout, pki, ports, bins, host_ip=realnodes.HOST_IP if real else None)
        comps["jobset"] = jobset_setup.component(layout, ports, bins)
        for name, args in (extra_args or {}).items():
            comps[name].argv += args
        starter = _Starter(layout, pki, comps, timeout, say)
        try:
            _start_all(starter, layout, pki, ports, server)
            (layout.run / "cluster.json").write_text(json.dumps({
                "server": server, "kubeconfig": str(layout.kubeconfig), "ports": ports, "bin_dir": str(bins),
                "started_at": time.time(), "components": {n: c.to_json() for n, c in comps.items()},
            }, indent=1))
            cluster = Cluster(layout.root)
            say(f"control plane ready in {time.monotonic() - t0:.1f} s")
            populate(cluster, cfg, nodes_per_pool, timeout=timeout)
            say(f"node pools and Kueue objects ready in {time.monotonic() - t0:.1f} s")
            if real:
                realnodes.up(layout, bins, pki, layout.kubeconfig, ports["kube-apiserver"], real,
                             images(real) if images else {}, say)
                say(f"real nodes ready in {time.monotonic() - t0:.1f} s")
        except BaseException as e:
            starter.stop_all()
            realnodes.stop_nodes(layout, say)
            stop_in_order(procs.Record.load_all(layout.run), layout.run, say)
            realnodes.teardown(layout, say)
            (layout.run / "cluster.json").unlink(missing_ok=True)
            if isinstance(e, (TimeoutError, KubeError, OSError, KeyError)):
                raise ClusterError(f"the dev cluster did not come up: {e}\ncomponent logs: {layout.logs}") from e
            raise
    return cluster


def _real_nodes(cfg, gpu_pool: str, layout: Layout) -> list:
    from .realnode_config import real_nodes

    try:
        return real_nodes(nodes.with_system_pool(cfg), gpu_pool, layout.root / "nodes")
    except ValueError as e:
        raise ClusterError(str(e)) from None


def _start_all(starter: _Starter, layout: Layout, pki: PKI, ports: dict[str, int], server: str) -> None:
    """Dependency order: etcd → apiserver → Kueue's CRDs → controller-manager, scheduler, kwok (started
    together, each waited for) → Kueue and the JobSet controller → their webhook configurations. The CRDs
    (Kueue's and JobSet's, which Kueue's JobSet integration needs at its start) come before the
    controller-manager so its garbage collector knows Workloads from the start (else it would find
    them only at its next discovery resync, and a deleted Job's Workload would linger ~30 s)."""
    starter.start("etcd")
    starter.wait_healthy("etcd")
    starter.start("kube-apiserver")
    starter.wait_healthy("kube-apiserver")
    kube = Kube(layout.kubeconfig)
    _install_kueue_crds(kube)
    starter.start("kube-controller-manager", "kube-scheduler", "kwok")
    starter.wait_healthy("kube-controller-manager", "kube-scheduler", "kwok")
    starter.start("kueue", "jobset")
    starter.wait_healthy("kueue", "jobset")
    for obj in [*kueue_setup.webhook_configurations(ports["kueue-webhook"], pki.ca_cert),
                *jobset_setup.webhook_configurations(ports["jobset-webhook"], pki.ca_cert)]:
        kube.apply(obj)
    # where Kueue's chart keeps the Configuration (its manager reads it mounted; doctor reads it here)
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kueue-manager-config",
                "namespace": "kueue-system"}, "data": {
                    "controller_manager_config.yaml": (layout.config / "kueue.yaml").read_text()}})
    kube.close()


def _install_kueue_crds(kube: Kube) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}})
    crds = kueue_setup.crds() + jobset_setup.crds()
    for crd in crds:
        kube.apply(crd)

    def established() -> bool:
        items = kube.list("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                          label_selector="app.kubernetes.io/managed-by=gpuhub-devcluster")
        ok = {i["metadata"]["name"] for i in items if condition_true(i, "Established")}
        return ok >= {c["metadata"]["name"] for c in crds}

    wait_for(established, 60, "Kueue's and JobSet's CRDs to be established")


# ---------------------------------------------------------------------------------------------- contents
def add_nodes(kube: Kube, manifests: list[dict[str, Any]], parallel: int = 8) -> None:
    """Create Node objects (an existing one is left as it is)."""

    def create(obj: dict[str, Any]) -> None:
        try:
            kube.create(obj)
        except KubeError as e:
            if e.status != 409:
                raise

    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(create, manifests))


def ready_nodes(kube: Kube, selector: str = f"{nodes.SIMULATED_LABEL}=true") -> set[str]:
    items = kube.list("v1", "Node", label_selector=selector)
    return {n["metadata"]["name"] for n in items if condition_true(n, "Ready")}


def apply_kueue_objects(kube: Kube, cfg, timeout: float = 60) -> None:
    """`gpuhub render kueue` output, applied; returns once its ClusterQueues are Active and its team
    namespaces have their default service account (so Jobs and pods can be created right away)."""
    from jupyterhub_gpu.builders.kueue import render_kueue

    # the hub's namespace first: its servers' LocalQueues live there (the admin's release namespace)
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": storage.HUB_NAMESPACE}})
    objs = render_kueue(cfg, storage.HUB_NAMESPACE)
    for obj in objs:
        kube.apply(obj)
    queues = {o["metadata"]["name"] for o in objs if o["kind"] == "ClusterQueue"}
    namespaces = [o["metadata"]["name"] for o in objs if o["kind"] == "Namespace"]

    def active() -> bool:
        items = kube.list("kueue.x-k8s.io/v1beta2", "ClusterQueue")
        ok = {i["metadata"]["name"] for i in items if condition_true(i, "Active")}
        return ok >= queues

    wait_for(active, timeout, f"ClusterQueues {', '.join(sorted(queues))} to be Active")
    for ns in namespaces:
        wait_for_service_account(kube, ns, timeout)


def wait_for_service_account(kube: Kube, namespace: str, timeout: float = 60) -> None:
    wait_for(lambda: kube.read("v1", "ServiceAccount", "default", namespace), timeout,
             f"the default service account in {namespace}")


def populate(cluster: Cluster, cfg, nodes_per_pool: int | dict[str, int] = 2, timeout: float = 60) -> None:
    """KWOK nodes for every pool of `cfg` (plus a system pool), its Kueue objects, the users' home share, its
    datasets."""
    kube = cluster.kube()
    try:
        manifests = nodes.build_nodes(cfg, nodes_per_pool)
        add_nodes(kube, manifests)
        names = {m["metadata"]["name"] for m in manifests}
        wait_for(lambda: ready_nodes(kube) >= names, timeout, f"{len(names)} KWOK nodes to be Ready")
        dra_driver.publish(kube, cfg, manifests)  # dra pools: the simulated NVIDIA DRA driver's slices
        wait_for_service_account(kube, "default", timeout)
        apply_kueue_objects(kube, cfg, timeout)
    finally:
        kube.close()
    storage.ensure_home_share(cluster.kubeconfig, storage.home_namespaces(cfg), timeout=timeout)
    storage.ensure_datasets(cluster.kubeconfig, cfg, timeout=timeout)


# ---------------------------------------------------------------------------------------------- status / down
def status(root: Path | None = None) -> dict[str, Any]:
    """Each recorded component with its pid, whether it runs and whether its health endpoint answers;
    and what is left over from a run that ended without stopping it."""
    layout = Layout(Path(root or state_dir()))
    records = procs.Record.load_all(layout.run)
    ctx = None
    pki = PKI(layout.pki_dir)
    if pki.ca_cert.is_file():
        ctx = _ssl_context(pki)
    out: dict[str, Any] = {"state_dir": str(layout.root), "kubeconfig": str(layout.kubeconfig),
                           "logs": str(layout.logs), "running": False, "healthy": False, "components": {},
                           "busy": leftovers.busy(layout), "leftovers": []}
    for name in ORDER:
        rec = records.get(name)
        if rec is None:
            out["components"][name] = {"state": "not started"}
            continue
        running = procs.alive(rec)
        healthy = running and probe(rec.health_url, ctx)
        out["components"][name] = {"pid": rec.pid, "state": "healthy" if healthy else
                                   "running, not healthy" if running else "exited", "log": rec.log}
        out["running"] = out["running"] or running
    out["healthy"] = all(c["state"] == "healthy" for c in out["components"].values())
    if not out["busy"]:
        out["leftovers"] = [procs.describe(p) for p in leftovers.find(layout)]
    return out


def down(root: Path | None = None, say: Callable[[str], None] = lambda msg: None) -> list[str]:
    """Stop what `gpuhub dev` left (hub, proxy, services, agent, pods: by mark or recorded port), then
    every recorded component (newest first); returns the names stopped."""
    layout = Layout(Path(root or state_dir()))
    if not layout.run.is_dir():
        return []
    with _locked(layout.root):
        realnodes.stop_nodes(layout, say)  # first: a kubelet would restart the containers stopped below
        ports = leftovers.recorded_ports(layout)
        others = leftovers.unrecorded(layout)
        stopped = []
        if others:
            say("stopping what `gpuhub dev` started: " + ", ".join(procs.describe(p) for p in others))
            stopped += [f"pid {p.pid}" for p in procs.terminate(others, grace=10)]
        stopped += stop_in_order(procs.Record.load_all(layout.run), layout.run, say)
        realnodes.teardown(layout, say)
        (layout.run / "cluster.json").unlink(missing_ok=True)
        leftovers.forget_dev_info(layout.root)
        for line in leftovers.strangers_on_ports(layout, ports):
            say(line)
    return stopped


def stop_in_order(records: dict[str, procs.Record], run_dir: Path,
                  say: Callable[[str], None] = lambda msg: None) -> list[str]:
    """API clients first (together), then the API server, then etcd: an API server whose etcd is gone
    spends its shutdown retrying etcd instead of exiting."""
    tiers = [[r for n, r in records.items() if n not in ("kube-apiserver", "etcd")],
             [records[n] for n in ("kube-apiserver",) if n in records],
             [records[n] for n in ("etcd",) if n in records]]
    stopped = []
    for tier in tiers:
        live = [r for r in tier if procs.alive(r)]
        if live:
            say("stopping " + ", ".join(r.name for r in live))
        stopped += procs.stop(tier, run_dir)
    return stopped


def ensure_ready(cluster: Cluster) -> None:
    """Raise ClusterError naming the first component that is not healthy (used by the test fixture)."""
    st = status(cluster.root)
    bad = {n: c for n, c in st["components"].items() if c["state"] != "healthy"}
    if bad:
        name, c = next(iter(bad.items()))
        raise ClusterError(f"{name} is {c['state']}; its log: {c.get('log')}\n{log_tail(c.get('log', ''))}")


__all__ = ["Cluster", "ClusterError", "SetupError", "up", "down", "status", "populate", "state_dir",
           "add_nodes", "ready_nodes", "apply_kueue_objects", "wait_for_service_account", "log_tail"]
