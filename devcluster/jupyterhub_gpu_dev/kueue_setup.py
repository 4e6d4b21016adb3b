"""Kueue's CRDs and webhook configurations, read from the kueue module in the Go module cache.

CRDs are applied with v1beta2 only (Kueue v0.19's storage version), with no conversion webhook to run.
Webhooks are Kueue's own `config/components/webhook/manifests.yaml`, with a `url` client
config pointing at 127.0.0.1 and our CA bundle instead of an in-cluster Service; only the webhooks
Kueue actually serves (its own kinds and the enabled job integrations) are registered, because a
registered but unserved webhook with `failurePolicy: Fail` would block every object of its kind.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import yaml

from jupyterhub_gpu.contract import QUEUE_LABEL

from . import binaries
from .components import KUEUE_FRAMEWORKS, kueue_module

CRD_DIR = "config/components/crd/bases"
WEBHOOK_MANIFESTS = "config/components/webhook/manifests.yaml"
API_VERSION = "v1beta2"
CACHE_FORMAT = 1  # bump when strip_crd changes
KUEUE_GROUP = "kueue.x-k8s.io"

#: The namespaceSelector Kueue's kustomization adds to its job and pod webhooks.
SYSTEM_NAMESPACES = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                           "values": ["kube-system", "kueue-system"]}]}


#: Pods Kueue's pod integration manages: those with a queue name.
QUEUED_PODS = {"matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]}


def _load_yaml(path: Path) -> list[dict[str, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(path.read_text(), Loader=loader) if d]


def strip_crd(crd: dict[str, Any], version: str = API_VERSION) -> dict[str, Any]:
    """Keep only `version` (served and stored) and drop any conversion webhook."""
    versions = [v for v in crd["spec"]["versions"] if v["name"] == version]
    if not versions:
        raise ValueError(f"CRD {crd['metadata']['name']} has no version {version}")
    spec = dict(crd["spec"], versions=[dict(versions[0], served=True, storage=True)])
    spec.pop("conversion", None)
    meta = {"name": crd["metadata"]["name"], "labels": {"app.kubernetes.io/managed-by": "gpuhub-devcluster"}}
    return {"apiVersion": crd["apiVersion"], "kind": crd["kind"], "metadata": meta, "spec": spec}


def crds() -> list[dict[str, Any]]:
    """Kueue's CRDs, stripped; cached as JSON next to the binaries (parsing 1.5 MB of YAML is slow)."""
    cache = binaries.cache_root() / f"kueue-{binaries.KUEUE_VERSION}-crds-{API_VERSION}-v{CACHE_FORMAT}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    out = []
    for f in sorted((kueue_module() / CRD_DIR).glob("*.yaml")):
        out += [strip_crd(d) for d in _load_yaml(f) if d.get("kind") == "CustomResourceDefinition"]
    cache.write_text(json.dumps(out))
    return out


def _served_groups() -> set[str]:
    """API groups whose webhooks Kueue serves: its own and those of the enabled integrations."""
    groups = {KUEUE_GROUP}
    for fw in KUEUE_FRAMEWORKS:
        groups.add(fw.split("/")[0] if "/" in fw else "")
    return groups


def webhook_configurations(port: int, ca_cert: Path) -> list[dict[str, Any]]:
    """Kueue's Mutating/ValidatingWebhookConfigurations with URL client configs on 127.0.0.1:`port`."""
    ca_bundle = base64.b64encode(ca_cert.read_bytes()).decode()
    served = _served_groups()
    out = []
    for doc in _load_yaml(kueue_module() / WEBHOOK_MANIFESTS):
        hooks = []
        for hook in doc.get("webhooks", []):
            groups = {g for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}
            if not groups <= served:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook = dict(hook, clientConfig={"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle},
                        timeoutSeconds=10)
            if KUEUE_GROUP not in groups:
                hook["namespaceSelector"] = SYSTEM_NAMESPACES
            if groups == {""}:  # the pod integration: only pods that name a queue are Kueue's (as with
                # manageJobsWithoutQueueName: false), so no other pod waits on (or fails with) the webhook
                hook["objectSelector"] = QUEUED_PODS
            hooks.append(hook)
        name = "gpuhub-dev-kueue-" + doc["metadata"]["name"]
        out.append({"apiVersion": doc["apiVersion"], "kind": doc["kind"],
                    "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpuhub-devcluster"}},
                    "webhooks": hooks})
    return out
