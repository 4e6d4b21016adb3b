"""The I/O shell of `gpuhub doctor`: fetch a `doctor.Snapshot` from the cluster, run the pure checks.

Reads with the kubeconfig ($KUBECONFIG, --kubeconfig, ~/.kube/config, or in-cluster). The hub's
permissions are checked with SubjectAccessReviews for `--hub-service-account NS/NAME` (default
jhub/hub, z2jh's), or with SelfSubjectAccessReviews for the kubeconfig's own identity
(`--hub-service-account self`, e.g. when doctor runs inside the hub pod).
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jupyterhub_gpu.builders import dra
from jupyterhub_gpu.builders.deploy import HUB_ACCOUNT
from jupyterhub_gpu.builders.identity import WEBHOOK_CONFIGURATION, WEBHOOK_DEPLOYMENT, WEBHOOK_NAMESPACE
from jupyterhub_gpu.builders.storage import HOME_CLAIM
from jupyterhub_gpu.kubeio.clients import api_client
from jupyterhub_gpu.tools import doctor, doctor_datasets, doctor_dra, doctor_identity, doctor_kueue_config
from jupyterhub_gpu.tools.doctor import (
    DEVICE_PLUGIN_NAME,
    KUEUE_CRDS,
    KUEUE_VERSION,
    Snapshot,
    access_requests,
    request_accounts,
)

KUEUE_PLURALS = {"WorkloadPriorityClass": "workloadpriorityclasses", "ResourceFlavor": "resourceflavors",
                 "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues"}


class DoctorError(Exception):
    """The cluster could not be reached at all (not a check result)."""


def _raw(call, *args, **kw) -> Any:
    resp = call(*args, _preload_content=False, _request_timeout=20, **kw)
    return json.loads(resp.data)


def _why(e: Exception) -> str:
    from kubernetes.client.rest import ApiException

    if isinstance(e, ApiException):
        try:
            return f"HTTP {e.status}: {json.loads(e.body).get('message')}"
        except (ValueError, TypeError, AttributeError):
            return f"HTTP {e.status}: {e.reason}"
    return f"{type(e).__name__}: {e}"


def _read_or_none(call, *args) -> dict[str, Any] | None:
    """One object, or None when the API server says it does not exist."""
    from kubernetes.client.rest import ApiException

    try:
        return _raw(call, *args)
    except ApiException as e:
        if e.status != 404:
            raise
        return None


def fetch(api, cfg, hub_namespace: str, service_account: str | None) -> Snapshot:
    """`service_account`: "NS/NAME" for SubjectAccessReviews, None for SelfSubjectAccessReviews."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    ext, custom = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
    authz = client.AuthorizationV1Api(api)
    snap = Snapshot()
    try:
        snap.nodes = _raw(core.list_node)["items"]
    except ApiException as e:
        snap.errors["nodes"] = _why(e)
    except Exception as e:  # noqa: BLE001 - unreachable server: nothing else will work either
        raise DoctorError(f"cannot reach the cluster: {_why(e)}") from None

    try:
        ds = _raw(apps.list_daemon_set_for_all_namespaces)["items"]
        snap.daemonsets = [d for d in ds if DEVICE_PLUGIN_NAME in d["metadata"]["name"]]
        pods = []
        for d in snap.daemonsets:
            sel = ",".join(f"{k}={v}" for k, v in ((d["spec"].get("selector") or {}).get("matchLabels") or {}).items())
            pods += _raw(core.list_namespaced_pod, d["metadata"]["namespace"], label_selector=sel)["items"]
        snap.device_plugin_pods = pods
    except ApiException as e:
        snap.daemonsets = snap.device_plugin_pods = None
        snap.errors["device_plugin"] = _why(e)

    try:
        crds = {}
        for plural in KUEUE_CRDS:
            try:
                crds[f"{plural}.kueue.x-k8s.io"] = _raw(ext.read_custom_resource_definition,
                                                        f"{plural}.kueue.x-k8s.io")
            except ApiException as e:
                if e.status != 404:
                    raise
        snap.crds = crds
    except ApiException as e:
        snap.errors["crds"] = _why(e)

    if snap.crds and len(snap.crds) == len(KUEUE_CRDS):
        try:
            snap.kueue = {kind: _raw(custom.list_cluster_custom_object, "kueue.x-k8s.io", KUEUE_VERSION,
                                     plural)["items"] for kind, plural in KUEUE_PLURALS.items()}
        except ApiException as e:
            snap.errors["kueue"] = _why(e)

    if snap.crds and len(snap.crds) == len(KUEUE_CRDS):  # Kueue's own Configuration and its manager's flags
        try:
            ns = doctor_kueue_config.NAMESPACE
            snap.kueue_config_maps = _raw(core.list_namespaced_config_map, ns)["items"]
            snap.kueue_deployments = _raw(apps.list_namespaced_deployment, ns)["items"]
        except ApiException as e:
            snap.kueue_config_maps = None
            snap.errors["kueue_config"] = _why(e)

    if doctor_dra.has_dra(cfg):  # a dra pool: DeviceClasses, the driver's ResourceSlices, gpuhub's claim templates
        try:
            group, version = dra.RESOURCE_API.split("/")
            snap.dra_classes = {o["metadata"]["name"]: o for o in _raw(
                custom.list_cluster_custom_object, group, version, "deviceclasses")["items"]}
            snap.dra_templates = {(ns, name): _read_or_none(custom.get_namespaced_custom_object, group, version, ns,
                                                            "resourceclaimtemplates", name)
                                  for ns, name in doctor_dra.wanted_templates(cfg, hub_namespace)}
            snap.dra_slices = _raw(custom.list_cluster_custom_object, group, version, "resourceslices")["items"]
        except ApiException as e:
            snap.dra_slices = None
            snap.errors["dra"] = _why(e)

    accounts = request_accounts(cfg, hub_namespace)

    def account_sa(account: str) -> str:
        """The hub's account is the one given; gpu-jobs' is `gpu-jobs` next to it (deploy/gpu-jobs.yaml)."""
        return service_account if account == HUB_ACCOUNT else f"{service_account.split('/', 1)[0]}/{account}"

    def review(req) -> tuple[tuple, bool]:
        verb, group, resource, ns = req
        res, _, sub = resource.partition("/")
        attrs = {"verb": verb, "group": group, "resource": res}
        if sub:
            attrs["subresource"] = sub
        if ns:
            attrs["namespace"] = ns
        if service_account:
            sa_ns, sa = account_sa(accounts[req]).split("/", 1)
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                    "spec": {"resourceAttributes": attrs, "user": f"system:serviceaccount:{sa_ns}:{sa}",
                             "groups": ["system:serviceaccounts", f"system:serviceaccounts:{sa_ns}",
                                        "system:authenticated"]}}
            r = authz.create_subject_access_review(body, _preload_content=False, _request_timeout=20)
        else:
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": attrs}}
            r = authz.create_self_subject_access_review(body, _preload_content=False, _request_timeout=20)
        return req, bool(json.loads(r.data).get("status", {}).get("allowed"))

    try:  # the users' home share: the claim in the hub namespace and in each team's, and their volumes
        snap.home_claims = {}
        for ns in {hub_namespace, *(t.namespace for t in cfg.teams.values())}:
            try:
                snap.home_claims[ns] = _raw(core.read_namespaced_persistent_volume_claim, HOME_CLAIM, ns)
            except ApiException as e:
                if e.status != 404:
                    raise
                snap.home_claims[ns] = None
        for c in filter(None, snap.home_claims.values()):
            if name := (c.get("spec") or {}).get("volumeName"):
                snap.home_volumes[name] = _raw(core.read_persistent_volume, name)
    except ApiException as e:
        snap.home_claims = None
        snap.errors["storage"] = _why(e)

    if doctor_identity.wanted(cfg, hub_namespace):  # a team's workload identity: the webhook, the accounts
        try:
            admission = client.AdmissionregistrationV1Api(api)
            snap.identity_webhook = _read_or_none(admission.read_mutating_webhook_configuration, WEBHOOK_CONFIGURATION)
            if snap.identity_webhook is None:  # installed another way: its controller's pods
                snap.identity_webhook_pods = [p for p in _raw(core.list_namespaced_pod, WEBHOOK_NAMESPACE)["items"]
                                              if p["metadata"]["name"].startswith(WEBHOOK_DEPLOYMENT)]
            snap.identity_accounts = {(ns, name): _read_or_none(core.read_namespaced_service_account, name, ns)
                                      for ns, name in doctor_identity.wanted(cfg, hub_namespace)}
        except ApiException as e:
            snap.identity_accounts = None
            snap.errors["identity"] = _why(e)

    if cfg.datasets:  # the CSI drivers, the claims in every namespace that mounts one, their volumes
        try:
            storage_api = client.StorageV1Api(api)
            snap.dataset_drivers = {d: _read_or_none(storage_api.read_csi_driver, d)
                                    for d in doctor_datasets.drivers(cfg)}
            snap.dataset_claims = {(ns, name): _read_or_none(core.read_namespaced_persistent_volume_claim, name, ns)
                                   for ns, name in doctor_datasets.wanted(cfg, hub_namespace)}
            for c in filter(None, snap.dataset_claims.values()):
                if name := (c.get("spec") or {}).get("volumeName"):
                    snap.dataset_volumes[name] = _read_or_none(core.read_persistent_volume, name)
        except ApiException as e:
            snap.dataset_claims = None
            snap.errors["datasets"] = _why(e)

    snap.identity = f"service account {service_account}" if service_account else "the kubeconfig's user"
    if service_account:
        snap.identities = {a: f"service account {account_sa(a)}" for a in set(accounts.values())}
    try:
        with ThreadPoolExecutor(8) as pool:
            snap.access = dict(pool.map(review, access_requests(cfg, hub_namespace)))
    except ApiException as e:
        snap.errors["access"] = _why(e)
    return snap


def run(cfg, file: str, kubeconfig: str | None, hub_service_account: str = "jhub/hub",
        hub_namespace: str | None = None, rbac: bool = True) -> tuple[int, str]:
    """(exit code, table). `hub_service_account`: NS/NAME, or "self" for the kubeconfig's identity."""

    sa = None if hub_service_account == "self" else hub_service_account
    ns = hub_namespace or (sa.split("/", 1)[0] if sa else "jhub")
    api = api_client(kubeconfig)
    try:
        snap = fetch(api, cfg, ns, sa)
    finally:
        api.close()
    checks = doctor.run_checks(cfg, snap, file, ns if rbac else None)
    return doctor.exit_code(checks), doctor.format_table(checks)
