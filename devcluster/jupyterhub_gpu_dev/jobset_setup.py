"""The JobSet controller in the dev cluster: its CRD, its Configuration and its webhook configurations,
read from the jobset module in the Go module cache (`%gpu_submit --nodes N` creates JobSets).

Run like Kueue: the admin kubeconfig, no leader election, no internal certificate rotation (it would
write a Secret and patch a Service that do not exist here), our serving certificate, webhooks with a
`url` client config on 127.0.0.1 and our CA bundle. The pod webhooks get the objectSelector JobSet's
kustomize patch gives them, so only JobSet pods go through them. Metrics are off (nothing scrapes them).
"""
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml

from . import binaries
from .components import Component, Layout, _module_cache, serving_cert_dir
from .kueue_setup import _load_yaml
from .pki import PKI

MODULE = "sigs.k8s.io/jobset"
CRD_FILE = "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
WEBHOOK_MANIFESTS = "config/components/webhook/manifests.yaml"
API_VERSION = "v1alpha2"
JOBSET_POD_LABEL = "jobset.sigs.k8s.io/jobset-name"
MANAGED = {"app.kubernetes.io/managed-by": "gpuhub-devcluster"}


def module() -> Path:
    return _module_cache(MODULE, binaries.JOBSET_VERSION)


def crds() -> list[dict[str, Any]]:
    """The JobSet CRD (one version, v1alpha2, no conversion), cached as JSON next to the binaries."""
    from .kueue_setup import strip_crd

    cache = binaries.cache_root() / f"jobset-{binaries.JOBSET_VERSION}-crds-{API_VERSION}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    out = [strip_crd(d, API_VERSION) for d in _load_yaml(module() / CRD_FILE)
           if d.get("kind") == "CustomResourceDefinition"]
    cache.write_text(json.dumps(out))
    return out


def write_config(layout: Layout, pki: PKI, ports: dict[str, int]) -> Path:
    """JobSet's Configuration (config.jobset.x-k8s.io/v1alpha1): loopback only, our certificates."""
    cert_dir = serving_cert_dir(layout, pki, "jobset")
    config = {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['jobset-health']}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": ports["jobset-webhook"], "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 200, "burst": 400},
    }
    path = layout.config / "jobset.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def component(layout: Layout, ports: dict[str, int], bins: Path) -> Component:
    return Component("jobset", [str(bins / binaries.JOBSET_BINARY), f"--config={layout.config / 'jobset.yaml'}",
                                f"--kubeconfig={layout.kubeconfig}", "--zap-devel=false", "--zap-log-level=info"],
                     f"http://127.0.0.1:{ports['jobset-health']}/readyz", layout.log("jobset"),
                     {"health": ports["jobset-health"], "webhook": ports["jobset-webhook"]})


def webhook_configurations(port: int, ca_cert: Path) -> list[dict[str, Any]]:
    """JobSet's Mutating/ValidatingWebhookConfigurations with URL client configs on 127.0.0.1:`port`."""
    ca_bundle = base64.b64encode(ca_cert.read_bytes()).decode()
    out = []
    for doc in _load_yaml(module() / WEBHOOK_MANIFESTS):
        hooks = []
        for hook in doc.get("webhooks", []):
            path = hook["clientConfig"]["service"]["path"]
            hook = dict(hook, clientConfig={"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle},
                        timeoutSeconds=10)
            if any("pods" in rule.get("resources", []) for rule in hook.get("rules", [])):
                hook["objectSelector"] = {"matchExpressions": [{"key": JOBSET_POD_LABEL, "operator": "Exists"}]}
            hooks.append(hook)
        out.append({"apiVersion": doc["apiVersion"], "kind": doc["kind"],
                    "metadata": {"name": "gpuhub-dev-jobset-" + doc["metadata"]["name"], "labels": dict(MANAGED)},
                    "webhooks": hooks})
    return out
