"""GPU servers pass Pod Security `restricted` (issue 24): GPUSpawner's default container and pod security contexts
(builders/hardening.py server_*) through KubeSpawner's real manifest path (load_user_options → get_pod_manifest),
the GPU-check init container included; an admin's own context replaces the default."""
from __future__ import annotations

import pytest

from jupyterhub_gpu.builders.hardening import server_container_security_context, server_pod_security_context
from jupyterhub_gpu.contract import GPU_CHECK_CONTAINER
from jupyterhub_gpu.hub.render_pod import pod_manifest
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES

ALL_GROUPS = ["data-science", "ml-research"]
GPU_PROFILES = ["t4-shared", "a100-mig-1g10gb", "h100-full", "a100-spot"]

#: Pod Security `restricted` (v1.25+): the volume types it allows.
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def all_containers(pod):
    spec = pod["spec"]
    return [*(spec.get("initContainers") or []), *spec["containers"], *(spec.get("ephemeralContainers") or [])]


def restricted_violations(pod) -> list[str]:
    """What Kubernetes' Pod Security admission (`baseline` + `restricted`) would refuse in this pod."""
    spec, out = pod["spec"], []
    psc = spec.get("securityContext") or {}
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(host):
            out.append(f"pod {host}")
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v['name']}: {sorted(kinds - RESTRICTED_VOLUMES)}")
    if psc.get("runAsUser") == 0:
        out.append("pod runAsUser 0")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        out.append(f"pod seccomp {pod_seccomp}")
    for c in all_containers(pod):
        sc, name = c.get("securityContext") or {}, c["name"]
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation is not false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{name}: capabilities do not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: adds capabilities {caps['add']}")
        non_root = sc["runAsNonRoot"] if "runAsNonRoot" in sc else psc.get("runAsNonRoot")
        if non_root is not True:
            out.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsUser") == 0:
            out.append(f"{name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: no RuntimeDefault/Localhost seccomp profile (pod or container)")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"{name}: hostPort")
    return out


def server(pod):
    (c,) = pod["spec"]["containers"]
    return c


def gpu_check(pod):
    (c,) = [c for c in pod["spec"].get("initContainers") or [] if c["name"] == GPU_CHECK_CONTAINER]
    return c


async def test_the_t4_servers_pod_passes_restricted():
    pod = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ALL_GROUPS)
    sc = server(pod)["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["runAsNonRoot"] is True
    assert not sc.get("privileged")
    psc = pod["spec"]["securityContext"]
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert psc["runAsNonRoot"] is True
    assert gpu_check(pod)["securityContext"] == sc
    assert restricted_violations(pod) == []


@pytest.mark.parametrize("slug", GPU_PROFILES)
async def test_every_gpu_servers_pod_passes_restricted(slug):
    pod = await pod_manifest(EXAMPLE_PROFILES, slug, "alice", ALL_GROUPS)
    assert restricted_violations(pod) == []
    assert gpu_check(pod)["securityContext"] == server(pod)["securityContext"]


async def test_a_cpu_servers_pod_passes_restricted_too():
    pod = await pod_manifest(EXAMPLE_PROFILES, "cpu", "alice", ALL_GROUPS)
    assert restricted_violations(pod) == []


async def test_the_defaults_are_the_hardening_modules():
    pod = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ALL_GROUPS)
    sc, psc = server(pod)["securityContext"], pod["spec"]["securityContext"]
    assert {k: sc[k] for k in server_container_security_context()} == server_container_security_context()
    assert {k: psc[k] for k in server_pod_security_context()} == server_pod_security_context()


async def test_the_checker_catches_a_pod_without_the_defaults():
    """What the previous commit rendered (KubeSpawner's own defaults): refused by `restricted`."""
    pod = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ALL_GROUPS,
                             container_security_context={}, pod_security_context={})
    found = restricted_violations(pod)
    assert "notebook: capabilities do not drop ALL" in found
    assert f"{GPU_CHECK_CONTAINER}: capabilities do not drop ALL" in found
    assert any("runAsNonRoot" in f for f in found) and any("seccomp" in f for f in found)


async def test_an_admins_container_security_context_replaces_the_default():
    mine = {"runAsUser": 1234, "readOnlyRootFilesystem": True}
    pod = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ALL_GROUPS, container_security_context=mine)
    sc = server(pod)["securityContext"]
    assert sc["runAsUser"] == 1234 and sc["readOnlyRootFilesystem"] is True
    assert "capabilities" not in sc and "runAsNonRoot" not in sc  # replaced, not merged with the default
    assert gpu_check(pod)["securityContext"] == sc
    # the pod level keeps its default (only the container context was set)
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


async def test_an_admins_pod_security_context_replaces_the_default():
    mine = {"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/notebook.json"}}
    pod = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ALL_GROUPS, pod_security_context=mine)
    psc = pod["spec"]["securityContext"]
    assert psc["seccompProfile"] == mine["seccompProfile"]
    assert "runAsNonRoot" not in psc
    assert server(pod)["securityContext"]["capabilities"] == {"drop": ["ALL"]}  # the container default stays
