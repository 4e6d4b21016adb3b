"""Build (once) and locate the dev cluster's Go binaries.

The binaries live in a cache folder outside the repo, keyed by a stamp of every pinned
version, so a clone reuses them and a changed pin rebuilds them. Standard library only:
`.ci/run` calls this before the Python package is installed.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

try:
    from . import build_progress
except ImportError:  # run as a script (`python devcluster/jupyterhub_gpu_dev/binaries.py build`)
    import build_progress  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
GO_DIR = HERE / "go"

KUBERNETES_VERSION = "v1.36.3"
#: KWOK and the Kueue controller: pinned by devcluster/jupyterhub_gpu_dev/go/controllers/go.mod too (a test checks they
#: agree), one module for both, so the Kubernetes libraries and controller-runtime they share compile once.
KWOK_VERSION = "v0.8.0"
KUEUE_VERSION = "v0.19.2"
#: The JobSet controller (`%gpu_submit --nodes N`); pinned by devcluster/jupyterhub_gpu_dev/go/jobset/go.mod too. Its
#: binary is named after the version (`jobset-v0.10.1`), so a new pin builds a new binary without changing the stamp
#: (and so without rebuilding the others).
JOBSET_VERSION = "v0.10.1"
JOBSET_BINARY = f"jobset-{JOBSET_VERSION}"

#: Helm, for the zero-to-jupyterhub chart (`helm template` / `install` / `upgrade`:
#: devcluster/jupyterhub_gpu_dev/z2jh.py); named after its version like the JobSet controller.
HELM_VERSION = "v3.22.0"
HELM_BINARY = f"helm-{HELM_VERSION}"

#: containerd 2 from its Go module (Debian's 1.6 is older than the 2.x a 1.36 kubelet expects), with its runc
#: shim and `ctr` (images are imported with it: no registry can be reached here).
CONTAINERD_VERSION = "v2.4.2"
CONTAINERD_COMMANDS = ("containerd", "containerd-shim-runc-v2", "ctr")

CONTROLLER_PACKAGES = {"kwok": "sigs.k8s.io/kwok/cmd/kwok", "kueue": "sigs.k8s.io/kueue/cmd/kueue"}

KUBE_COMMANDS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
#: What the control plane and the KWOK pools need (`gpuhub cluster up`, `gpuhub dev`).
CLUSTER_BINARIES = ("etcd", *KUBE_COMMANDS, "kwok", "kueue", JOBSET_BINARY, HELM_BINARY)
#: What real nodes add (`gpuhub dev --z2jh`, the ship tier): the kubelet and kube-proxy of the same Kubernetes,
#: containerd, CoreDNS (devcluster/jupyterhub_gpu_dev/go/coredns), the pod sandbox and the simulated GPU device plugin
#: (devcluster/jupyterhub_gpu_dev/go/node).
NODE_KUBE_COMMANDS = ("kubelet", "kube-proxy")
NODE_BINARIES = (*NODE_KUBE_COMMANDS, *CONTAINERD_COMMANDS, "coredns", "gpuhub-pause", "gpuhub-device-plugin")
ALL_BINARIES = (*CLUSTER_BINARIES, *NODE_BINARIES)


#: Set by the Makefile when `binaries.py plan` already said, before the installs, what the build does.
PLAN_SAID_ENV = "GPUHUB_BUILD_PLAN_SAID"


class BuildError(RuntimeError):
    """A binary could not be built; the message names it and its log."""


def cache_root() -> Path:
    return Path(os.environ.get("GPUHUB_CACHE", Path.home() / ".cache" / "jupyterhub-gpu"))


def _go_version() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "the Go toolchain is missing: the dev cluster builds kube-apiserver, etcd, kwok, kueue and the "
            "JobSet controller from Go modules. Install Go >= 1.26 and put `go` on PATH."
        )
    return subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout.strip()


def stamp() -> str:
    """A short hash of every input that changes the binaries."""
    h = hashlib.sha256()
    for name in ("kube", "controllers", "etcd", "coredns", "node"):
        for f in ("go.mod", "go.sum"):
            h.update((GO_DIR / name / f).read_bytes())
    for main in ("etcd/main.go", "coredns/main.go", "node/pause/main.go", "node/deviceplugin/main.go"):
        h.update((GO_DIR / main).read_bytes())
    h.update(f"{KUBERNETES_VERSION} {KWOK_VERSION} {KUEUE_VERSION} {CONTAINERD_VERSION} {_go_version()}".encode())
    return h.hexdigest()[:16]


def bin_dir() -> Path:
    return cache_root() / f"bin-{stamp()}"


def missing(dest: Path | None = None, only: tuple[str, ...] | None = None) -> list[str]:
    """The binaries (of `only`, default the cluster's) not yet built into `dest`."""
    dest = dest or bin_dir()
    return [b for b in (only or CLUSTER_BINARIES) if not (dest / b).is_file()]


def _run(cmd: list[str], cwd: Path, log: Path, env: dict[str, str], what: str) -> None:
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        rc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise BuildError(f"building {what} failed (exit {rc}); full log: {log}\n" + "\n".join(tail))


def _kube_ldflags() -> str:
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return " ".join(
        ["-s", "-w", f"-X {pkg}.gitVersion={KUBERNETES_VERSION}", f"-X {pkg}.gitMajor={major}",
         f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean"]
    )


def build(verbose: bool = True, only: tuple[str, ...] | None = None) -> Path:
    """Build whatever is missing (of `only`, default all) into the stamped cache folder and return it.

    One build at a time per cache: a second caller (another test run, `gpuhub dev`) waits on the lock and
    then finds the binaries built instead of compiling the same packages alongside."""
    dest = bin_dir()
    if not missing(dest, only):
        return dest
    cache_root().mkdir(parents=True, exist_ok=True)
    with (cache_root() / ".build.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if verbose:
                print(f"[devcluster] another build holds {lock.name}; waiting for it ...", file=sys.stderr,
                      flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_missing(dest, verbose, only)


def _build_missing(dest: Path, verbose: bool, only: tuple[str, ...] | None = None) -> Path:
    todo = missing(dest, only)
    if not todo:
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    log = dest / "build.log"
    known = build_progress.recorded(cache_root())
    est = build_progress.estimates(todo, known)
    if verbose:
        said = os.environ.get(PLAN_SAID_ENV) == "1"
        head = (f"building the {len(todo)} binaries above, about {build_progress.minutes(sum(est.values()))}"
                if said else build_progress.plan(todo, est, known, dest))
        print(f"[devcluster] {head}\n[devcluster] build log: {log}", file=sys.stderr, flush=True)
    progress = build_progress.Progress(todo, est) if verbose else None
    timings: dict[str, float] = {}
    try:
        for i, name in enumerate(todo):
            start = time.monotonic()
            if progress:
                progress.step(i)
            _build_one(name, dest, log)
            timings[name] = round(time.monotonic() - start, 1)
            if progress:
                progress.done(i, timings[name])
    finally:
        if progress:
            progress.close()
        if timings:  # recorded even when a later binary fails: the next estimate knows this machine
            with (dest / "build-times.json").open("a") as f:
                f.write(json.dumps(timings) + "\n")
    return dest


def _build_one(name: str, dest: Path, log: Path) -> None:
    """One binary into `dest` (its go output appended to `log`)."""
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod -buildvcs=false", GOBIN=str(dest))
    if name == "etcd":
        _run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(dest / "etcd"), "."],
             GO_DIR / "etcd", log, env, "etcd")
    elif name in (*KUBE_COMMANDS, *NODE_KUBE_COMMANDS):
        _run(["go", "build", "-trimpath", f"-ldflags={_kube_ldflags()}", "-o", str(dest / name),
              f"k8s.io/kubernetes/cmd/{name}"], GO_DIR / "kube", log, env, name)
    elif name in ("kwok", "kueue"):
        _run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(dest / name), CONTROLLER_PACKAGES[name]],
             GO_DIR / "controllers", log, env, name)
    elif name == JOBSET_BINARY:  # the controller only (the module's main package), from its wrapper module
        _run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(dest / name), "sigs.k8s.io/jobset"],
             GO_DIR / "jobset", log, env, "the JobSet controller")
    elif name == HELM_BINARY:
        _run(["go", "install", "-trimpath",
              f"-ldflags=-s -w -X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",
              f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"], cache_root(), log, env, "helm")
        (dest / "helm").rename(dest / name)
    elif name in CONTAINERD_COMMANDS:  # static, without the snapshotters that need cgo or kernel modules
        _run(["go", "install", "-trimpath", "-ldflags=-s -w", "-tags=no_btrfs no_devmapper no_zfs",
              f"github.com/containerd/containerd/v2/cmd/{name}@{CONTAINERD_VERSION}"], cache_root(), log, env, name)
    elif name == "coredns":
        _run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(dest / name), "."],
             GO_DIR / "coredns", log, env, "CoreDNS")
    elif name in ("gpuhub-pause", "gpuhub-device-plugin"):
        pkg = "./pause" if name == "gpuhub-pause" else "./deviceplugin"
        _run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(dest / name), pkg], GO_DIR / "node", log,
             env, name)


def module_dir(module: str, version: str) -> Path:
    """Where the Go module cache holds a module's source (CRDs, stage YAMLs are read from there)."""
    out = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"], capture_output=True,
                         text=True, cwd=cache_root())
    if out.returncode != 0:
        raise BuildError(f"cannot fetch {module}@{version} into the Go module cache: {out.stdout}{out.stderr}")
    return Path(json.loads(out.stdout)["Dir"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jupyterhub_gpu_dev.binaries", description=__doc__)
    p.add_argument("action", choices=["build", "path", "check", "plan"], help="build missing binaries; print the "
                   "folder; exit 1 if any is missing; say what a build would do and about how long (nothing if "
                   "built: `make dev` says it first, before its installs)")
    p.add_argument("--only", nargs="+", choices=ALL_BINARIES, metavar="BINARY",
                   help=f"build only these (default: the cluster's, {', '.join(CLUSTER_BINARIES)})")
    p.add_argument("--with-nodes", action="store_true",
                   help=f"also what real nodes need ({', '.join(NODE_BINARIES)}): `gpuhub dev --z2jh`, the ship tier")
    a = p.parse_args(argv)
    try:
        only = tuple(a.only) if a.only else ALL_BINARIES if a.with_nodes else None
        if a.action == "build":
            print(build(only=only))
        elif a.action == "path":
            print(bin_dir())
        elif a.action == "plan":
            if todo := missing(only=only):
                known = build_progress.recorded(cache_root())
                print("[devcluster] "
                      f"{build_progress.plan(todo, build_progress.estimates(todo, known), known, bin_dir())}",
                      file=sys.stderr)
        else:
            gone = missing(only=only)
            if gone:
                print("missing: " + ", ".join(gone), file=sys.stderr)
                return 1
            print(bin_dir())
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    cache_root().mkdir(parents=True, exist_ok=True)
    sys.exit(main())
