"""SIMULATOR — the dev node agent: plays kubelet for pods bound to simulated (KWOK) nodes.

KWOK marks pods Running but runs nothing. For `gpuhub dev` and the end-to-end tests this agent runs
the container's command as a local process, on the pod IP KWOK assigned (a loopback address, see
components.POD_CIDR), with the pod's env; it gives GPU nodes a simulated device folder and
`nvidia-smi`, and reports the process's exit in the pod status like a kubelet would. It is a
development tool only: never point it at a real cluster.
"""
from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from kubernetes_asyncio import client, config, watch

from jupyterhub_gpu.contract import ENV_TERMINATION_LOG, HOME_DIR, JOB_LABEL, PREEMPTIBLE_LABEL
from jupyterhub_gpu.contract import SIMULATED_NODE_LABEL as SIMULATED_LABEL
from jupyterhub_gpu_dev.agent_dra import gpu_env
from jupyterhub_gpu_dev.agent_env import (  # noqa: F401 (tests)
    IMAGE_IPYTHON_CONFIG,
    allow_root_config,
    container_env,
    container_port,
    image_ipython_dir,
    mount_parents,
    read_only_command,
    read_only_mounts_work,
    rewrite_paths,
    simulated_gpu,
)
from jupyterhub_gpu_dev.agent_init import (
    InitPending,
    container_exit_code,
    kept_times,
    run_init_containers,
    termination_message,
)
from jupyterhub_gpu_dev.pod_dns import PodHosts, pod_fqdn
from jupyterhub_gpu_dev.simulator_keys import DEV_AGENT_ENV, DEV_AGENT_LABEL, SIM_PATH_ENV, SIMULATE_GPU_ANNOTATION  # noqa: F401
from jupyterhub_gpu_dev.volumes import MountError, attach_conflict, claim_folder, home_of, read_only_folders

log = logging.getLogger("gpuhub.dev-agent")

#: Pod IPs the agent hands out: loopback, so a local process can bind them (KWOK uses 127.10/16). Beside real
#: nodes (`gpuhub dev --z2jh`) the agent runs in a network namespace of its own and hands out a routed /24
#: instead (`--pod-network`, realnodes.start_agent_host), so pods on the real nodes reach its servers.
DEFAULT_POD_NETWORK = "127.11.0.0/16"
BANNER = "[dev-agent SIMULATOR]"


@dataclass
class Running:
    proc: asyncio.subprocess.Process
    log_path: Path
    termination_log: Path
    deleting: bool = False


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class DevNodeAgent:
    def __init__(self, state_dir: Path, api: client.CoreV1Api, pod_network: str = DEFAULT_POD_NETWORK):
        self.state_dir = state_dir
        self.api = api
        self.pod_ips = [str(ip) for ip in ipaddress.ip_network(pod_network).hosts()][1:]  # .1: the gateway
        self.running: dict[str, Running] = {}
        # where this agent starts handing out pod IPs: random, so agents of parallel test sessions (each with
        # its own cluster) rarely meet; allocate_ip still skips an address whose port is taken
        self._next_ip = secrets.randbelow(250 * 200)
        self.ipython_env = image_ipython_dir(state_dir)  # written once; every local kernel reads it
        self.root_env = allow_root_config(state_dir)  # a kubelet runs the pod as its uid; this agent as its own
        self._read_only: bool | None = None  # whether read-only mounts work here: probed at the first that needs it
        #: (namespace, claim) → {pod key: node} of the running pods that mount it (access modes)
        self.claim_users: dict[tuple[str, str], dict[str, str]] = {}
        self.starting: set[str] = set()
        self.retrying: set[str] = set()
        self.hosts = PodHosts(state_dir / "dns" / "hosts.json")  # pod hostnames (a JobSet's ranks), see pod_dns

    def allocate_ip(self, port: int = 8888) -> str:
        """A loopback pod IP on which `port` is free (another agent's pod may hold it)."""
        for _ in range(min(1000, len(self.pod_ips))):
            ip = self.pod_ips[self._next_ip % len(self.pod_ips)]
            self._next_ip += 1
            with socket.socket() as probe:
                try:
                    probe.bind((ip, port))
                    return ip
                except OSError:
                    continue
        raise RuntimeError(f"no free pod IP in {self.pod_ips[0]}… for port {port}")

    async def patch_status(self, key: str, status: dict) -> None:
        ns, name = key.split("/", 1)
        try:
            await self.api.patch_namespaced_pod_status(name, ns, {"status": status})
        except client.ApiException as e:
            log.warning("%s could not update the status of %s: %s", BANNER, key, e.reason)

    @staticmethod
    def running_status(pod: dict, ip: str, ready: bool) -> dict:
        now = _now()
        containers = [{"name": c["name"], "ready": ready, "restartCount": 0, "image": c.get("image", ""),
                       "imageID": "", "started": True, "state": {"running": {"startedAt": now}}}
                      for c in pod["spec"]["containers"]]
        flag = "True" if ready else "False"
        start, conditions = kept_times(pod, (("PodScheduled", "True"), ("Initialized", "True"),
                                             ("ContainersReady", flag), ("Ready", flag)))
        return {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "127.0.0.1", "startTime": start,
                "conditions": conditions, "containerStatuses": containers}

    async def wait_ready(self, key: str, pod: dict, ip: str) -> None:
        """Play the readiness probe (httpGet) against the process; no probe means ready when started."""
        import aiohttp

        probe = pod["spec"]["containers"][0].get("readinessProbe") or {}
        get = probe.get("httpGet")
        if get:
            url = f"http://{ip}:{get.get('port', 8888)}{get.get('path', '/')}"
            async with aiohttp.ClientSession() as session:
                while key in self.running and self.running[key].proc.returncode is None:
                    try:
                        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                            if r.status < 400:
                                break
                    except (aiohttp.ClientError, asyncio.TimeoutError):
                        pass
                    await asyncio.sleep(0.5)
                else:
                    return
        await self.patch_status(key, self.running_status(pod, ip, ready=True))

    async def node(self, name: str) -> dict | None:
        """Read at each pod start (not cached): tests flip a node's simulated GPU on and off."""
        try:
            return self.api.api_client.sanitize_for_serialization(await self.api.read_node(name))
        except client.ApiException:
            return None

    async def start(self, key: str, pod: dict, node: dict) -> None:
        container = pod["spec"]["containers"][0]
        cmd = (container.get("command") or []) + (container.get("args") or [])
        if not cmd or shutil.which(cmd[0]) is None:
            log.warning("%s %s: command %r is not installed here; the pod stays simulated only", BANNER, key, cmd)
            self.running[key] = None  # type: ignore[assignment]
            return
        inits = bool(pod["spec"].get("initContainers"))
        try:  # claims checked now, as a kubelet mounts a pod's volumes first; subPaths made when the container starts
            mounts = await self.map_mounts(key, pod, container, node["metadata"]["name"], make_subpaths=not inits)
        except MountError as e:  # like a kubelet: the pod stays Pending, a Warning event says why, retried
            await self.event(pod, e.reason, str(e))
            log.warning("%s %s cannot start yet: %s", BANNER, key, e)
            if key not in self.retrying:
                self.retrying.add(key)
                asyncio.get_running_loop().call_later(3, lambda: asyncio.ensure_future(self.retry(key)))
            return
        ip = self.allocate_ip(container_port(container))
        pod["status"]["podIP"] = ip
        ns = pod["metadata"]["namespace"]
        if (fqdn := pod_fqdn(pod)) and await self._read(self.api.read_namespaced_service, pod["spec"]["subdomain"], ns):
            self.hosts.add(key, fqdn, ip)  # as a cluster's DNS does for a pod under a headless Service
        if inits:  # each to completion first, in order, as a kubelet runs them
            self.running[key] = InitPending()
            asyncio.create_task(self._init_then_start(key, pod, node, ip, mounts))
            return
        await self._start_main(key, pod, node, ip, mounts)

    async def _init_then_start(self, key: str, pod: dict, node: dict, ip: str, mounts: dict[str, Path]) -> None:
        if await run_init_containers(self, key, pod, node, ip) and isinstance(self.running.get(key), InitPending):
            try:  # the container's own subPath folders, now that the init containers ran (as a kubelet)
                mounts = await self.map_mounts(key, pod, pod["spec"]["containers"][0], node["metadata"]["name"])
            except MountError as e:
                await self.event(pod, e.reason, str(e))
                log.warning("%s %s cannot start its container: %s", BANNER, key, e)
                return
            await self._start_main(key, pod, node, ip, mounts)

    async def _start_main(self, key: str, pod: dict, node: dict, ip: str, mounts: dict[str, Path]) -> None:
        container = pod["spec"]["containers"][0]
        await self.patch_status(key, self.running_status(pod, ip, ready=False))
        self.running[key] = await self.launch(key, pod, container, node, ip, mounts)
        asyncio.create_task(self._report_exit(key, pod))
        asyncio.create_task(self.wait_ready(key, pod, ip))

    async def launch(self, key: str, pod: dict, container: dict, node: dict, ip: str, mounts: dict[str, Path],
                     suffix: str = "") -> Running:
        """One container's command as a local process with its env, home and mounts (`suffix`: an init
        container's own log and termination-log files)."""
        cmd = (container.get("command") or []) + (container.get("args") or [])
        ns = pod["metadata"]["namespace"]
        gpus = await gpu_env(self.api.api_client, self.state_dir, key, pod, container, node)  # DRA: its claims'
        env = {**os.environ, **self.ipython_env, **container_env(pod, container), **gpus, **self.hosts.env(ns)}
        if sim_path := env.pop(SIM_PATH_ENV, None):
            env["PATH"] = f"{sim_path}{os.pathsep}{env['PATH']}"
        if "JUPYTERHUB_SERVICE_URL" in env:
            port = re.search(r":(\d+)", env["JUPYTERHUB_SERVICE_URL"].split("//", 1)[-1])
            env["JUPYTERHUB_SERVICE_URL"] = f"http://{ip}:{port.group(1) if port else 8888}/"
        base = self.state_dir / "pods" / key.replace("/", "_")
        home = home_of(mounts, HOME_DIR, base / f"home{suffix}")  # no volume there: the container's own
        home.mkdir(parents=True, exist_ok=True)
        env.update({"HOME": str(home), DEV_AGENT_ENV: "1", **self.root_env})
        env.update(rewrite_paths(container_env(pod, container), mounts))
        env.update(mount_parents(container_env(pod, container), mounts, base / f"rootfs{suffix}"))
        if read_only := read_only_folders(pod, container, mounts):
            if self._read_only is None:
                self._read_only = read_only_mounts_work(base)
                if not self._read_only:
                    log.warning("%s no mount namespace here: read-only mounts are NOT read-only", BANNER)
            cmd = read_only_command(cmd, read_only, os.geteuid() == 0) if self._read_only else cmd
        cwd = Path(rewrite_paths({"cwd": container["workingDir"]}, mounts).get("cwd") or home) \
            if container.get("workingDir") else home
        cwd.mkdir(parents=True, exist_ok=True)  # a runtime creates a missing workingDir
        logs = self.state_dir / "pods"
        logs.mkdir(parents=True, exist_ok=True)
        safe = key.replace("/", "_") + suffix
        log_path, term = logs / f"{safe}.log", logs / f"{safe}.termination-log"
        term.unlink(missing_ok=True)
        env[ENV_TERMINATION_LOG] = str(term)
        out = log_path.open("ab")
        out.write(f"{BANNER} {_now()} starting {cmd} on {node['metadata']['name']} at {ip}\n".encode())
        out.flush()
        proc = await asyncio.create_subprocess_exec(*cmd, cwd=cwd, env=env, stdout=out, stderr=out,
                                                    start_new_session=True)
        out.close()
        log.info("%s started %s%s (pid %s): %s", BANNER, key, suffix, proc.pid, " ".join(cmd))
        return Running(proc, log_path, term)

    async def retry(self, key: str) -> None:
        self.retrying.discard(key)
        ns, name = key.split("/", 1)
        try:
            pod = self.api.api_client.sanitize_for_serialization(await self.api.read_namespaced_pod(name, ns))
        except client.ApiException:
            return  # gone
        await self.handle("MODIFIED", pod)

    async def event(self, pod: dict, reason: str, message: str) -> None:
        meta = pod["metadata"]
        now = _now()
        body = {"metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": meta["namespace"],
                                   "name": meta["name"], "uid": meta.get("uid")},
                "reason": reason, "message": message, "type": "Warning", "count": 1,
                "firstTimestamp": now, "lastTimestamp": now, "source": {"component": "dev-agent"}}
        try:
            await self.api.create_namespaced_event(meta["namespace"], body)
        except client.ApiException as e:
            log.warning("%s could not record an event for %s: %s", BANNER, meta["name"], e.reason)

    async def _read(self, call, *args) -> dict | None:
        try:
            return self.api.api_client.sanitize_for_serialization(await call(*args))
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise

    async def map_mounts(self, key: str, pod: dict, container: dict, node: str,
                         make_subpaths: bool = True) -> dict[str, Path]:
        """The container's mounts as local folders, as a kubelet would make them: a claim through its bound
        PersistentVolume (volumes.py), a ConfigMap's items written to files, an emptyDir a scratch folder.
        Claims are checked (and their use recorded) before anything is written. A missing subPath folder is made
        only when the container starts (`make_subpaths`): a kubelet prepares a container's subPaths as it creates
        that container, after the pod's init containers ran (the product's home-folder step relies on it)."""
        ns = pod["metadata"]["namespace"]
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        base = self.state_dir / "pods" / key.replace("/", "_")
        out: dict[str, Path] = {}
        claims: dict[tuple[str, str], dict] = {}
        for m in container.get("volumeMounts") or []:
            vol = volumes.get(m["name"]) or {}
            if "persistentVolumeClaim" not in vol:
                continue
            name = vol["persistentVolumeClaim"]["claimName"]
            claim = claims.get((ns, name)) or await self._read(self.api.read_namespaced_persistent_volume_claim,
                                                                name, ns)
            pv_name = ((claim or {}).get("spec") or {}).get("volumeName")
            pv = await self._read(self.api.read_persistent_volume, pv_name) if pv_name else None
            out[m["mountPath"]] = claim_folder(ns, name, claim, pv, m.get("subPath", ""))
            if why := attach_conflict(claim, key, node, self.claim_users.get((ns, name), {})):
                raise MountError("FailedAttachVolume", why)
            claims[(ns, name)] = claim
        for m in container.get("volumeMounts") or []:
            vol = volumes.get(m["name"]) or {}
            if "configMap" in vol:
                path = base / "volumes" / m["name"]
                await self.write_config_map(ns, vol["configMap"], path)
            elif "emptyDir" in vol:
                path = base / "volumes" / m["name"]
            elif "persistentVolumeClaim" in vol:
                path = out[m["mountPath"]]  # a kubelet creates a missing subPath folder
                if m.get("subPath") and not make_subpaths:
                    continue
            else:
                continue
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as e:  # a kubelet: "failed to prepare subPath", the container is not created
                raise MountError("Failed", f"failed to prepare subPath for volumeMount {m['name']!r}: {e}") from None
            out[m["mountPath"]] = path
        for claim_key in claims:
            self.claim_users.setdefault(claim_key, {})[key] = node
        return out

    def release_claims(self, key: str) -> None:
        for users in self.claim_users.values():
            users.pop(key, None)

    async def write_config_map(self, namespace: str, source: dict, folder: Path, tries: int = 20) -> None:
        import base64

        for _ in range(tries):
            try:
                cm = await self.api.read_namespaced_config_map(source["name"], namespace)
                break
            except client.ApiException as e:
                if e.status != 404:
                    raise
                await asyncio.sleep(0.5)
        else:
            log.warning("%s ConfigMap %s/%s not found", BANNER, namespace, source["name"])
            return
        data = {k: v.encode() for k, v in (cm.data or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()})
        items = source.get("items") or [{"key": k, "path": k} for k in data]
        folder.mkdir(parents=True, exist_ok=True)
        for item in items:
            if item["key"] in data:
                (folder / item["path"]).parent.mkdir(parents=True, exist_ok=True)
                (folder / item["path"]).write_bytes(data[item["key"]])

    async def _report_exit(self, key: str, pod: dict) -> None:
        run = self.running.get(key)
        if not isinstance(run, Running):
            return  # stopped (the pod was deleted) before this task first ran
        code = container_exit_code(await run.proc.wait())
        self.release_claims(key)  # an ended container holds no volume
        if self.running.get(key) is not run:
            return  # stopped because the pod was deleted
        message = termination_message(pod["spec"]["containers"][0], run.termination_log, run.log_path, code)
        restart = pod["spec"].get("restartPolicy", "Always")
        phase = "Succeeded" if code == 0 and restart != "Always" else "Failed"
        name = pod["spec"]["containers"][0]["name"]
        status = {"status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": _now()},
                           {"type": "ContainersReady", "status": "False", "lastTransitionTime": _now()}],
            "containerStatuses": [{"name": name, "ready": False, "restartCount": 0, "image": "simulated",
                                   "imageID": "", "started": False,
                                   "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0
                                                            else "Error", "message": message.strip()[-4096:],
                                                            "finishedAt": _now()}}}],
        }}
        await self.patch_status(key, status["status"])
        log.info("%s %s exited %s → %s", BANNER, key, code, phase)
        if run.deleting:  # like a kubelet: final status first, then the pod object goes
            ns, pod_name = key.split("/", 1)
            try:
                await self.api.delete_namespaced_pod(pod_name, ns, grace_period_seconds=0)
            except client.ApiException as e:
                if e.status != 404:
                    log.warning("%s could not delete %s: %s", BANNER, key, e.reason)
            self.running.pop(key, None)

    def terminate(self, key: str, grace: int) -> None:
        """A Job pod, or a preemptible server's, being deleted (eviction, preemption, cancel): SIGTERM, SIGKILL after
        the grace period; `_report_exit` then reports how it ended and removes the pod, as a kubelet would."""
        run = self.running[key]
        if run.deleting or run.proc.returncode is not None:
            return
        run.deleting = True
        try:
            os.killpg(run.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return

        def kill():
            if run.proc.returncode is None:
                try:
                    os.killpg(run.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

        asyncio.get_running_loop().call_later(max(1, int(grace)), kill)
        log.info("%s terminating %s (grace %s s)", BANNER, key, grace)

    def stop(self, key: str, signal_again: bool = True) -> None:
        """The pod is gone (or going): forget it, and SIGTERM its process unless `signal_again` is False (a
        preemptible server `terminate` already signalled: a kubelet sends one SIGTERM, and SIGKILL at the end of the
        grace period, whose timer stays armed)."""
        run = self.running.pop(key, None)
        self.release_claims(key)
        self.hosts.remove(key)
        if isinstance(run, InitPending):  # deleted while its init containers run: the current one ends
            run = run.current
        if run is not None and run.proc.returncode is None and signal_again:
            try:
                os.killpg(run.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            log.info("%s stopped %s", BANNER, key)

    async def handle(self, kind: str, pod: dict) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        key = f"{meta['namespace']}/{meta['name']}"
        labels = meta.get("labels") or {}
        if kind != "DELETED" and meta.get("deletionTimestamp") and (
                labels.get(JOB_LABEL) or labels.get(PREEMPTIBLE_LABEL) == "true") \
                and isinstance(self.running.get(key), Running):
            self.terminate(key, meta.get("deletionGracePeriodSeconds") or 30)
            return
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            run = self.running.get(key)  # KWOK removes a deleted pod object at once, before its grace period ends
            self.stop(key, signal_again=not (labels.get(PREEMPTIBLE_LABEL) == "true" and isinstance(run, Running)
                                             and run.deleting))
            return
        node_name = spec.get("nodeName")
        if key in self.running or not node_name or (meta.get("labels") or {}).get(DEV_AGENT_LABEL) != "run" \
                or status.get("phase") not in (None, "Pending"):
            return
        if key in self.starting:
            return
        self.starting.add(key)
        try:
            node = await self.node(node_name)
            if node is None or (node["metadata"].get("labels") or {}).get(SIMULATED_LABEL) != "true":
                return
            await self.start(key, pod, node)
        finally:
            self.starting.discard(key)

    async def run(self) -> None:
        log.warning("%s running pods of simulated nodes as local processes (dev only)", BANNER)
        rv = None
        while True:
            try:
                w = watch.Watch(return_type="object")
                kwargs = {"resource_version": rv} if rv else {}
                async with w.stream(self.api.list_pod_for_all_namespaces, timeout_seconds=300, **kwargs) as s:
                    async for event in s:
                        await self.handle(event["type"], event["raw_object"])
                        rv = w.resource_version
            except asyncio.CancelledError:
                raise
            except client.ApiException as e:
                rv = None if e.status == 410 else rv
                await asyncio.sleep(1)
            except Exception as e:  # keep simulating through apiserver hiccups
                log.warning("%s watch failed: %s", BANNER, e)
                await asyncio.sleep(1)

    def stop_all(self) -> None:
        for key in list(self.running):
            self.stop(key)


async def main_async(state_dir: Path, kubeconfig: str, pod_network: str = DEFAULT_POD_NETWORK) -> None:
    await config.load_kube_config(config_file=kubeconfig)
    async with client.ApiClient() as api_client:
        agent = DevNodeAgent(state_dir, client.CoreV1Api(api_client), pod_network)
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(agent.run())
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            agent.stop_all()


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m jupyterhub_gpu_dev.agent", description=__doc__.split("\n")[0])
    p.add_argument("--state-dir", required=True, type=Path)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--pod-network", default=DEFAULT_POD_NETWORK,
                   help=f"where pod IPs come from (default {DEFAULT_POD_NETWORK}: loopback)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(main_async(a.state_dir, a.kubeconfig, a.pod_network))
    return 0


if __name__ == "__main__":
    sys.exit(main())
