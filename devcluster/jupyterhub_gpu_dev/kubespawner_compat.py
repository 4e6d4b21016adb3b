"""Run KubeSpawner's own test suite twice, as KubeSpawner and with GPUSpawner in its place (no profiles
file), and compare the outcome of every test. Not part of `make test`; fetches nothing.

    git clone --branch 7.1.0 https://github.com/jupyterhub/kubespawner /tmp/kubespawner   # the pinned version
    .venv/bin/python -m jupyterhub_gpu_dev.kubespawner_compat /tmp/kubespawner

Exit 0 when every test that passes for KubeSpawner also passes for GPUSpawner. Tests that need a
Kubernetes cluster skip themselves (KubeSpawner's `kube_client` fixture) unless $KUBECONFIG reaches one.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

#: The dev distribution's folder (devcluster/), on the test runs' path so they find the plugin installed or not.
PROJECT = Path(__file__).resolve().parents[1]
PLUGIN = "jupyterhub_gpu_dev.gpuspawner_as_kubespawner"
#: KubeSpawner's pure test modules and its spawner tests (those needing a cluster skip themselves).
MODULES = ["tests/test_profile.py", "tests/test_objects.py", "tests/test_slugs.py", "tests/test_utils.py",
           "tests/test_spawner.py"]
OFFLINE_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: offline, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: offline, user: {token: offline}}]
contexts: [{name: offline, context: {cluster: offline, user: offline}}]
current-context: offline
"""


def outcomes(junit: Path) -> dict[str, str]:
    result = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        result[name] = kinds[0] if kinds else "passed"
    return result


def run(source: Path, junit: Path, as_gpuspawner: bool, env: dict[str, str], extra: list[str]) -> dict[str, str]:
    cmd = [sys.executable, "-m", "pytest", *MODULES, "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           "--timeout", "120", f"--junitxml={junit}", *extra]
    if as_gpuspawner:
        cmd[3:3] = ["-p", PLUGIN]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=source, env=env, check=False)
    return outcomes(junit)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="a KubeSpawner source tree (with tests/) at the installed version")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (e.g. -k profile)")
    args = ap.parse_args(argv)
    from importlib.metadata import version

    installed = version("jupyterhub-kubespawner")
    pinned = (args.source / "kubespawner" / "_version.py").read_text()
    if f'"{installed}"' not in pinned and f"'{installed}'" not in pinned:
        print(f"error: {args.source} is not KubeSpawner {installed} (the installed version)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(PROJECT), os.environ.get("PYTHONPATH")])))
        env.pop("GPUHUB_PROFILES", None)
        if not env.get("KUBECONFIG"):
            kc = Path(tmp) / "kubeconfig"
            kc.write_text(OFFLINE_KUBECONFIG)
            env["KUBECONFIG"] = str(kc)
        plain = run(args.source, Path(tmp) / "kubespawner.xml", False, env, args.pytest_args)
        ours = run(args.source, Path(tmp) / "gpuspawner.xml", True, env, args.pytest_args)
    print(f"\nKubeSpawner {installed}'s tests ({len(plain)} cases):")
    for label, result in (("KubeSpawner", plain), ("GPUSpawner ", ours)):
        counts = Counter(result.values())
        print(f"  {label}: " + ", ".join(f"{counts[k]} {k}" for k in ("passed", "failure", "error", "skipped")))
    worse = sorted(t for t, r in plain.items() if r == "passed" and ours.get(t) != "passed")
    for t in worse:
        print(f"  passes for KubeSpawner, not for GPUSpawner: {t} ({ours.get(t, 'missing')})")
    print("  every test that passes for KubeSpawner passes for GPUSpawner" if not worse else
          f"  {len(worse)} regression(s)")
    return 1 if worse else 0


if __name__ == "__main__":
    raise SystemExit(main())
