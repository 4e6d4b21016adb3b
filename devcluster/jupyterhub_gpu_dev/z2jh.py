"""The zero-to-jupyterhub (z2jh) chart as a platform team installs it: where the chart is, `helm template`
with the product's values, and the hub pod's configuration laid out as the chart mounts it.

The chart (z2jh 4.4.0 as published) is test input kept beside the repository (`shared/z2jh/jupyterhub` next to
the checkout, or $GPUHUB_Z2JH_CHART); where it is absent the tests skip and say how to get it. The hub pod's files come
from the rendered ConfigMap and Secret, byte for byte: `jupyterhub_config.py` and `z2jh.py` (the chart's own
hub configuration), `config/` and `secret/`. Only one thing differs from the pod: z2jh.py reads them from the
fixed folder `/usr/local/etc/jupyterhub/`, which `hub_config_tree` points at the tree's own folder.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from jupyterhub_gpu_dev import binaries

ROOT = Path(__file__).resolve().parents[2]  # the checkout (this package is devcluster/jupyterhub_gpu_dev/)
CHART_ENV = "GPUHUB_Z2JH_CHART"
CHART_VERSION = "4.4.0"
#: Where the tests find the chart unless $GPUHUB_Z2JH_CHART names another folder.
DEFAULT_CHART = ROOT.parent / "shared" / "z2jh" / "jupyterhub"
#: Where z2jh.py reads the hub pod's mounted ConfigMap and Secret.
POD_CONFIG_ROOT = "/usr/local/etc/jupyterhub/"
HOW_TO_GET = (f"the zero-to-jupyterhub chart {CHART_VERSION} is not at {DEFAULT_CHART} (or ${CHART_ENV}); get it with "
              f"`helm repo add jupyterhub https://hub.jupyter.org/helm-chart/ && helm pull jupyterhub/jupyterhub "
              f"--version {CHART_VERSION} --untar` and set ${CHART_ENV} to the folder it makes")
VALUES = ROOT / "deploy" / "values.yaml"
RELEASE, NAMESPACE = "jhub", "jhub"


class ChartMissing(RuntimeError):
    """The chart is not here; the message says how to get it."""


def chart_dir() -> Path:
    chart = Path(os.environ.get(CHART_ENV) or DEFAULT_CHART)
    if not (chart / "Chart.yaml").is_file():
        raise ChartMissing(HOW_TO_GET)
    return chart


def released(chart: Path) -> Path:
    """The chart as its release publishes it: helm validates values against `values.schema.json`, which z2jh's
    release tooling writes from the `values.schema.yaml` in its source; a chart folder with only the YAML is
    copied once per process with the JSON written beside it."""
    if (chart / "values.schema.json").is_file() or not (chart / "values.schema.yaml").is_file():
        return chart
    key = str(chart.resolve())
    if key not in _RELEASED:
        copy = Path(tempfile.mkdtemp(prefix="z2jh-chart-")) / chart.name
        shutil.copytree(chart, copy)
        schema = yaml.safe_load((chart / "values.schema.yaml").read_text())
        (copy / "values.schema.json").write_text(json.dumps(schema))
        _RELEASED[key] = copy
    return _RELEASED[key]


_RELEASED: dict[str, Path] = {}


def helm() -> Path:
    return binaries.build(verbose=False) / binaries.HELM_BINARY


def template(values: list[Path], *, chart: Path | None = None, kube_version: str = binaries.KUBERNETES_VERSION,
             set_values: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """`helm template` of the chart (its values.schema.yaml checked by helm) → the manifests; CalledProcessError
    with helm's message when the values do not fit the chart."""
    cmd = [str(helm()), "template", RELEASE, str(released(chart or chart_dir())), "--namespace", NAMESPACE,
           "--kube-version", kube_version]
    for v in values:
        cmd += ["-f", str(v)]
    for key, value in (set_values or {}).items():
        cmd += ["--set-string", f"{key}={value}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def find(manifests: list[dict], kind: str, name: str) -> dict[str, Any]:
    for m in manifests:
        if m["kind"] == kind and m["metadata"]["name"] == name:
            return m
    raise KeyError(f"{kind}/{name} is not in the rendered chart")


@dataclass
class HubPod:
    """The hub pod's config files (`root`, laid out as /usr/local/etc/jupyterhub/) and its container's env."""

    root: Path
    env: dict[str, str]

    @property
    def config_file(self) -> Path:
        return self.root / "jupyterhub_config.py"


def service_env(manifests: list[dict]) -> dict[str, str]:
    """The `<NAME>_SERVICE_HOST` / `_PORT` variables the kubelet gives a pod for each Service of its namespace
    (z2jh's hub config reads HUB_SERVICE_PORT and PROXY_API_SERVICE_PORT from them)."""
    env: dict[str, str] = {}
    for svc in (m for m in manifests if m["kind"] == "Service"):
        prefix = svc["metadata"]["name"].upper().replace("-", "_")
        ports = svc["spec"].get("ports") or []
        env[f"{prefix}_SERVICE_HOST"] = svc["metadata"]["name"]
        if ports:
            env[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
    return env


def hub_config_tree(manifests: list[dict], dest: Path, secrets: dict[str, dict[str, str]] | None = None) -> HubPod:
    """Lay out the hub pod's mounted files under `dest` and return them with the container's environment.

    `secrets`: Secrets that are not part of the chart (`{"gpu-jobs-api-token": {"token": ...}}`), for the
    container env's secretKeyRefs."""
    config = find(manifests, "ConfigMap", "hub")["data"]
    secret = {k: base64.b64decode(v).decode() for k, v in (find(manifests, "Secret", "hub").get("data") or {}).items()}
    for folder, files in (("config", config), ("secret", secret)):
        (dest / folder).mkdir(parents=True, exist_ok=True)
        for key, text in files.items():
            (dest / folder / key).write_text(text)
    (dest / "jupyterhub_config.py").write_text(config["jupyterhub_config.py"])
    (dest / "z2jh.py").write_text(config["z2jh.py"].replace(POD_CONFIG_ROOT, f"{dest}/"))
    all_secrets = {"hub": secret, **(secrets or {})}
    deployment = find(manifests, "Deployment", "hub")
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "hub"]
    env = service_env(manifests)
    for var in container.get("env") or []:
        source = var.get("valueFrom") or {}
        if "value" in var:
            env[var["name"]] = str(var["value"])
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[var["name"]] = all_secrets[ref["name"]][ref["key"]]
        elif source.get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[var["name"]] = NAMESPACE
    return HubPod(dest, env)
