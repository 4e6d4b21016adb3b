"""`gpuhub render deploy PROFILES --out DIR` (or `python -m jupyterhub_gpu.tools.render_deploy`): (re)write the
deploy/ files that `builders.deploy.generated_files()` renders from a profiles file."""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

from jupyterhub_gpu.builders.deploy import generated_files
from jupyterhub_gpu.builders.names import DEFAULT_HUB_NAMESPACE, LEASES_SUFFIX, leases_namespace
from jupyterhub_gpu.builders.network import MONITORING_NAMESPACE
from jupyterhub_gpu.model.profiles import ProfilesConfig

DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def write_generated(cfg: ProfilesConfig, out: Path, source: str, hub_namespace: str = DEFAULT_HUB_NAMESPACE,
                    image: str | None = None, runner_image: str | None = None,
                    jobs_options: dict[str, str] | None = None, monitoring_namespace: str = MONITORING_NAMESPACE) \
        -> list[Path]:
    """Every file rendered and encoded before any is written, and each replaced by a rename: a file that cannot
    be rendered (a UnicodeEncodeError for a lone surrogate YAML's escapes made) leaves the old ones whole."""
    files = {name: text.encode("utf-8") for name, text in
             generated_files(cfg, source, hub_namespace, image, runner_image, jobs_options,
                             monitoring_namespace).items()}
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in files.items():
        path = out / name
        fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{name}.")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o755 if name.endswith(".sh") else 0o644)
        os.replace(tmp, path)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jupyterhub_gpu.tools.render_deploy",
                                description="write deploy/ files generated from a profiles file")
    p.add_argument("file", nargs="?", default="jupyterhub_gpu/examples/profiles.yaml")
    add_arguments(p)
    return write(p.parse_args(argv))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`gpuhub render deploy` and `python -m jupyterhub_gpu.tools.render_deploy` take the same arguments."""
    p.add_argument("--out", default="deploy", help="folder to (re)write (default deploy/)")
    p.add_argument("--hub-namespace", default=DEFAULT_HUB_NAMESPACE, type=_hub_namespace,
                   help="the z2jh release namespace (default jhub); gpu-jobs' Leases go to <it>-gpuhub-leases")
    p.add_argument("--image", help="the gpu-jobs image: your hub image (default "
                                   "myregistry.azurecr.io/jupyterhub-gpu/hub:0.1.0)")
    p.add_argument("--runner-image", help="the image of Jobs whose profile names none (default "
                                          "myregistry.azurecr.io/jupyterhub-gpu/runner:0.1.0-cuda)")
    p.add_argument("--monitoring-namespace", default=MONITORING_NAMESPACE, type=_namespace,
                   help="where Prometheus runs: its pods may scrape gpu-jobs' metrics port, which answers only the "
                        "bearer token of the Secret gpu-jobs-metrics-token (default monitoring)")
    p.add_argument("--jobs-option", action="append", default=[], metavar="NAME=VALUE",
                   help="a gpu-jobs setting by its command-line name, e.g. max-timeout=3d (repeatable)")


def _namespace(value: str) -> str:
    if not DNS_LABEL_RE.fullmatch(value or ""):
        raise argparse.ArgumentTypeError(f"{value!r} is not a namespace name (a DNS label: a-z, 0-9, '-', at most 63)")
    return value


def _hub_namespace(value: str) -> str:
    """A namespace whose `<it>-gpuhub-leases` is a namespace name too."""
    _namespace(value)
    if len(leases_namespace(value)) > 63:
        raise argparse.ArgumentTypeError(f"{value!r}: at most {63 - len(LEASES_SUFFIX)} characters, so that gpu-jobs' "
                                         f"Lease namespace {leases_namespace(value)!r} is a namespace name too")
    return value


def jobs_options(items: list[str]) -> dict[str, str]:
    """`--jobs-option name=value` items; a malformed one is a ValueError naming it."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or name.startswith("-"):
            raise ValueError(f"--jobs-option {item!r} must look like name=value (e.g. max-timeout=3d)")
        out[name] = value
    return out


def write(args: argparse.Namespace) -> int:
    from jupyterhub_gpu.model.profiles_file import load_profiles
    from jupyterhub_gpu.model.validation import ProfilesError

    try:
        cfg = load_profiles(args.file)
    except ProfilesError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        options = jobs_options(args.jobs_option)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        paths = write_generated(cfg, Path(args.out), args.file, args.hub_namespace, args.image, args.runner_image,
                                options, args.monitoring_namespace)
    except UnicodeEncodeError as e:
        print(f"error: {args.file}: {e.object[e.start:e.end]!r} cannot be written as UTF-8 (a lone surrogate "
              "from a \\u escape?): nothing was written", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
