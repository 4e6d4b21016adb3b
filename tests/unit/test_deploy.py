"""deploy/: the z2jh values, RBAC, NetworkPolicies, AKS node pools and NVIDIA configs. The generated files
must equal what the example profiles file renders now (regenerate:
gpuhub render deploy jupyterhub_gpu/examples/profiles.yaml)."""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.builders import deploy
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.services.culler import DEFAULT_PORT as CULLER_PORT
from jupyterhub_gpu.services.culler import SCOPES as CULLER_SCOPES
from jupyterhub_gpu.services.culler import SERVICE_NAME as CULLER
from jupyterhub_gpu.services.jobs import SERVICE_NAME as GPU_JOBS
from jupyterhub_gpu.services.jobs.hub import DEFAULT_PORT as JOBS_PORT

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
EXAMPLE_REL = "jupyterhub_gpu/examples/profiles.yaml"


@pytest.fixture(scope="module")
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


@pytest.mark.parametrize("name", deploy.GENERATED)
def test_generated_files_are_current(cfg, name):
    want = deploy.generated_files(cfg, EXAMPLE_REL)[name]
    assert (DEPLOY / name).read_text() == want, \
        f"deploy/{name} is stale: run gpuhub render deploy jupyterhub_gpu/examples/profiles.yaml"


@pytest.mark.parametrize("name", ["values.yaml", "rbac.yaml", "networkpolicy.yaml", "gpu-jobs.yaml",
                                  "gpu-operator-values.yaml", "nvidia-device-plugin-config.yaml",
                                  "mig-parted-config.yaml"])
def test_yaml_parses(name):
    assert docs(name)


def rules_by_subject(objs: list[dict]) -> dict[tuple, set]:
    """(service account, namespace, apiGroup, resource) → verbs, through the bindings."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objs
             if o["kind"] in ("Role", "ClusterRole")}
    out: dict[tuple, set] = {}
    for b in (o for o in objs if o["kind"].endswith("Binding")):
        ns = b["metadata"].get("namespace")
        role = roles[(b["roleRef"]["kind"], ns, b["roleRef"]["name"])]
        (subject,) = b["subjects"]
        for r in role["rules"]:
            assert len(r["apiGroups"]) == 1 and len(r["resources"]) == 1
            assert "*" not in r["verbs"] + r["resources"] + r["apiGroups"]
            out[(subject["name"], ns, r["apiGroups"][0], r["resources"][0])] = set(r["verbs"])
    return out


def test_rbac_is_the_minimal_set_per_account(cfg):
    """The hub's account: server pods and the picker's reads; gpu-jobs' own account: its Jobs and what goes
    with them in the team namespaces (the verbs are checked against the code in tests/security)."""
    rules = rules_by_subject(docs("rbac.yaml"))
    read = {"get", "list", "watch"}
    assert rules == {
        ("hub", None, "", "nodes"): read,
        ("hub", None, "", "pods"): read,
        ("hub", "jhub", "", "pods"): read | {"create", "delete"},
        ("hub", "jhub", "", "events"): read,
        # a queued server's place: the servers' Workloads, and the team queue's count (nothing of the teams')
        ("hub", "jhub", "kueue.x-k8s.io", "workloads"): {"list"},
        ("hub", None, "kueue.x-k8s.io", "clusterqueues"): read,  # the picker watches them: team quota
        ("gpu-jobs", None, "kueue.x-k8s.io", "clusterqueues"): {"get"},
        # a namespace of their own (issue 50 item 9: in jhub the Role reached z2jh's user-scheduler's Lease too):
        # the per-user submit lock of every replica and the notification leader
        ("gpu-jobs", "jhub-gpuhub-leases", "coordination.k8s.io", "leases"): {"create", "delete", "get", "update"},
        **{k: v for ns in ("team-ds", "team-mlr") for k, v in {
            ("gpu-jobs", ns, "batch", "jobs"): read | {"create", "delete"},
            ("gpu-jobs", ns, "", "configmaps"): {"create", "delete", "get", "list", "patch"},
            ("gpu-jobs", ns, "", "persistentvolumeclaims"): {"get"},
            ("gpu-jobs", ns, "", "pods"): {"list", "watch"},
            ("gpu-jobs", ns, "", "pods/log"): {"get"},
            ("gpu-jobs", ns, "kueue.x-k8s.io", "workloads"): {"list", "watch"},
            ("gpu-jobs", ns, "kueue.x-k8s.io", "localqueues"): {"get"},
            ("hub", ns, "kueue.x-k8s.io", "workloads"): {"list"},  # the usage collector in the hub pod: waits
            ("gpu-jobs", ns, "jobset.x-k8s.io", "jobsets"): read | {"create", "delete"},  # h100-full: max_nodes
            # each JobSet's own policy (same-gang ingress only); the garbage collector deletes it with the JobSet
            ("gpu-jobs", ns, "networking.k8s.io", "networkpolicies"): {"create"},
        }.items()},
    }
    # nothing may write secrets, nodes, RBAC or anything cluster-wide; the hub has no rights on Jobs
    assert not any(ns is None and verbs - read for (_, ns, _, _), verbs in rules.items())
    assert not any(res in ("secrets", "roles", "rolebindings", "clusterroles") for (*_, res) in rules)
    # in the team namespaces the hub only reads Workloads (showback's queue waits), never Jobs or pods' logs
    assert {res for (sa, ns, _, res) in rules if sa == "hub" and ns in ("team-ds", "team-mlr")} == {"workloads"}


def test_gpu_jobs_may_touch_no_lease_of_the_hub_namespace_only_its_own_namespaces(tmp_path):
    """Issue 50 item 9: gpu-jobs could update or delete any Lease in the hub's namespace (z2jh's user-scheduler's
    leader election included). Its Leases have a namespace of their own, which rbac.yaml makes, and where its
    Deployment points the service."""
    rules = rules_by_subject(docs("rbac.yaml"))
    assert [k[1] for k in rules if k[0] == "gpu-jobs" and k[3] == "leases"] == ["jhub-gpuhub-leases"]
    assert not any(ns == "jhub" for (sa, ns, *_) in rules if sa == "gpu-jobs")  # nothing at all in the hub's
    (ns,) = [o for o in docs("rbac.yaml") if o["kind"] == "Namespace"]
    assert ns["metadata"]["name"] == "jhub-gpuhub-leases"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    (dep,) = [o for o in docs("gpu-jobs.yaml") if o["kind"] == "Deployment"]
    assert "--lease-namespace=jhub-gpuhub-leases" in dep["spec"]["template"]["spec"]["containers"][0]["command"]
    out = subprocess.run([sys.executable, "-m", "jupyterhub_gpu.tools.render_deploy", "--out", str(tmp_path / "d"),
                          "--hub-namespace", "h" * 50], capture_output=True, text=True)
    assert out.returncode == 2 and "at most 49 characters" in out.stderr and not (tmp_path / "d").exists()


def test_rbac_binds_every_role_to_exactly_one_account():
    objs = docs("rbac.yaml")
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs
             if o["kind"] in ("Role", "ClusterRole")}
    bound = {}
    for o in objs:
        if o["kind"].endswith("Binding"):
            (subject,) = o["subjects"]
            assert subject["kind"] == "ServiceAccount" and subject["namespace"] == "jhub"
            assert subject["name"] in ("hub", "gpu-jobs")
            bound[(o["roleRef"]["kind"], o["metadata"].get("namespace"), o["roleRef"]["name"])] = subject["name"]
    assert set(bound) == roles


def test_rbac_of_dra_pools_lets_the_hub_read_slices_and_claims_and_gives_gpu_jobs_nothing_new(cfg):
    """The picker's device watches and showback's claim reads (list + watch, cluster-wide, hub only), rendered only
    for a file with a dra pool; gpu-jobs' pods get their claims from Kubernetes' own controllers."""
    dra = load_profiles(EXAMPLE_PROFILES.with_name("profiles-dra.yaml"))
    rules = rules_by_subject(deploy.render_rbac(dra))
    assert {k: v for k, v in rules.items() if k[2] == "resource.k8s.io"} == {
        ("hub", None, "resource.k8s.io", "resourceslices"): {"list", "watch"},
        ("hub", None, "resource.k8s.io", "resourceclaims"): {"list", "watch"}}
    jobs = {k: v for k, v in rules.items() if k[0] == "gpu-jobs"}
    plain_jobs = {k: v for k, v in rules_by_subject(deploy.render_rbac(cfg)).items()
                  if k[0] == "gpu-jobs" and k[1] in (None, "jhub-gpuhub-leases", "team-ds")}
    assert jobs == plain_jobs  # the same rights as without DRA
    assert not any(k[2] == "resource.k8s.io" for k in rules_by_subject(docs("rbac.yaml")))  # the example: no dra


def test_rbac_rendered_for_other_namespaces(cfg):
    objs = deploy.render_rbac(cfg, hub_namespace="hub-prod", service_account="jh", jobs_service_account="jobs")
    assert {o["metadata"].get("namespace") for o in objs} == {None, "hub-prod", "hub-prod-gpuhub-leases", "team-ds",
                                                              "team-mlr"}
    subjects = {o["subjects"][0]["name"] for o in objs if "subjects" in o}
    assert subjects == {"jh", "jobs"}
    assert all(o["subjects"][0]["namespace"] == "hub-prod" for o in objs if "subjects" in o)


def test_values_wire_gpuspawner_profiles_services_and_roles():
    v = docs("values.yaml")[0]
    hub = v["hub"]
    config = hub["extraConfig"]["00-jupyterhub-gpu"]
    compile(config, "extraConfig", "exec")
    # the package's one configure() call; no role or scope is written here a second time
    assert "from jupyterhub_gpu.config import configure" in config and 'configure(c, services_host="hub")' in config
    assert "loadRoles" not in hub and "scopes" not in config
    # the profiles file: a ConfigMap mounted read-only where $GPUHUB_PROFILES points
    vol = next(x for x in hub["extraVolumes"] if x["name"] == "gpuhub-profiles")
    mount = next(x for x in hub["extraVolumeMounts"] if x["name"] == "gpuhub-profiles")
    assert vol["configMap"]["name"] == "gpuhub-profiles" and mount["readOnly"]
    assert hub["extraEnv"]["GPUHUB_PROFILES"] == mount["mountPath"] + "/profiles.yaml"
    # the culler inside the hub pod, reachable through the hub Service on its default port; gpu-jobs is its
    # own Deployment (deploy/gpu-jobs.yaml), registered with a token from its Secret
    ports = {p["name"]: p["port"] for p in hub["service"]["extraPorts"]}
    assert ports == {CULLER: CULLER_PORT, "gpu-usage": 10103, "gpu-admin": 10104}  # the showback page, the console
    assert all(p["targetPort"] == p["port"] for p in hub["service"]["extraPorts"])
    env = hub["extraEnv"]
    assert env["GPUHUB_JOBS_SERVICE_URL"] == f"http://{GPU_JOBS}.jhub.svc:{JOBS_PORT}"
    assert env["GPUHUB_JOBS_PUBLIC_URL"] == f"http://{GPU_JOBS}.jhub.svc:{JOBS_PORT}/services/{GPU_JOBS}/"
    assert env["GPUHUB_JOBS_API_TOKEN"] == {
        "valueFrom": {"secretKeyRef": {"name": "gpu-jobs-api-token", "key": "token"}}}
    assert v["cull"]["enabled"] is False  # our culler, not z2jh's
    assert v["singleuser"]["cmd"] == "gpuhub-singleuser"


def test_values_extra_config_runs_against_a_real_config(tmp_path, monkeypatch):
    """The extraConfig snippet, executed as z2jh would (after z2jh's own settings): it must set the spawner,
    both services reachable at the hub Service, their roles, and keep what z2jh set."""
    from traitlets.config import Config

    from jupyterhub_gpu.services.culler import ROLE as CULLER_ROLE
    from jupyterhub_gpu.services.jobs.hub import ACCESS
    from jupyterhub_gpu.services.jobs.hub import ROLE as JOBS_ROLE
    from jupyterhub_gpu.services.jobs.hub import SCOPES as JOBS_SCOPES

    for var in ("GPUHUB_JOBS_SERVICE_URL", "GPUHUB_CULLER_URL", "GPUHUB_JOBS_PORT", "GPUHUB_CULLER_PORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GPUHUB_PROFILES", str(EXAMPLE_PROFILES))
    monkeypatch.chdir(tmp_path)
    c = Config()
    # what z2jh's jupyterhub_config.py sets before extraConfig runs
    c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
    c.JupyterHub.services = []
    c.JupyterHub.services.append({"name": "z2jh-service", "api_token": "t"})
    c.KubeSpawner.environment = {"FROM_SINGLEUSER_EXTRAENV": "1"}
    c.KubeSpawner.start_timeout = 300
    exec(docs("values.yaml")[0]["hub"]["extraConfig"]["00-jupyterhub-gpu"], {"c": c})
    assert c.JupyterHub.spawner_class == "jupyterhub_gpu.hub.spawner.GPUSpawner"
    assert c.GPUSpawner.start_timeout == 600  # a GPU pool may have to scale from zero
    services = {s["name"]: s for s in c.JupyterHub.services}
    assert set(services) == {"z2jh-service", GPU_JOBS, CULLER, "gpu-usage", "gpu-usage-collector", "gpu-admin"}
    assert services["gpu-admin"]["url"] == "http://hub:10104"  # values.yaml's extra port on the hub Service
    assert services[GPU_JOBS]["url"] == f"http://hub:{JOBS_PORT}"
    assert services[CULLER]["url"] == f"http://hub:{CULLER_PORT}"
    assert services["gpu-usage"]["url"] == "http://hub:10103"  # values.yaml's extra port on the hub Service
    assert {"name": "gpu-usage", "port": 10103, "targetPort": 10103} in \
        docs("values.yaml")[0]["hub"]["service"]["extraPorts"]
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert roles[JOBS_ROLE]["scopes"] == JOBS_SCOPES and roles[JOBS_ROLE]["services"] == [GPU_JOBS]
    assert roles[CULLER_ROLE]["scopes"] == CULLER_SCOPES and roles[CULLER_ROLE]["services"] == [CULLER]
    assert roles["user"]["scopes"] == ["self", "access:services!service=gpu-usage", ACCESS]
    assert c.GPUSpawner.environment["FROM_SINGLEUSER_EXTRAENV"] == "1"


def test_services_listen_on_all_interfaces_behind_the_hub_service(monkeypatch):
    """z2jh: the proxy reaches the services at http://hub:PORT, so each listens on every interface (and on
    loopback only when the proxy shares the machine)."""
    from jupyterhub_gpu.services.culler.service import GPUCuller
    from jupyterhub_gpu.services.jobs.app import listen_address

    monkeypatch.delenv("GPUHUB_JOBS_LISTEN_IP", raising=False)
    monkeypatch.delenv("GPUHUB_CULLER_IP", raising=False)
    assert listen_address("hub") == "" and listen_address("127.0.0.1") == "127.0.0.1"
    monkeypatch.setenv("JUPYTERHUB_SERVICE_URL", f"http://hub:{CULLER_PORT}")
    assert GPUCuller.listen_ip() == "0.0.0.0"
    monkeypatch.setenv("JUPYTERHUB_SERVICE_URL", f"http://127.0.0.1:{CULLER_PORT}")
    assert GPUCuller.listen_ip() == "127.0.0.1"


def test_values_with_gpu_jobs_in_its_own_deployment(tmp_path, monkeypatch):
    """The extraConfig as it runs in the hub pod of deploy/values.yaml (hub.extraEnv set): gpu-jobs is an
    external service at its own Service with the Secret's token, kernels get its in-cluster URL, the culler
    stays a managed service at the hub Service."""
    from traitlets.config import Config

    hub = docs("values.yaml")[0]["hub"]
    for k, v in hub["extraEnv"].items():
        monkeypatch.setenv(k, "s3cret" if isinstance(v, dict) else str(v))
    monkeypatch.setenv("GPUHUB_PROFILES", str(EXAMPLE_PROFILES))
    monkeypatch.chdir(tmp_path)
    c = Config()
    c.KubeSpawner.environment = {"FROM_SINGLEUSER_EXTRAENV": "1"}
    exec(hub["extraConfig"]["00-jupyterhub-gpu"], {"c": c})
    services = {s["name"]: s for s in c.JupyterHub.services}
    jobs = services[GPU_JOBS]
    assert "command" not in jobs and jobs["api_token"] == "s3cret"
    assert jobs["url"] == f"http://{GPU_JOBS}.jhub.svc:{JOBS_PORT}"
    assert "command" in services[CULLER] and services[CULLER]["url"] == f"http://hub:{CULLER_PORT}"
    env = c.GPUSpawner.environment
    assert env["GPUHUB_JOBS_URL"] == hub["extraEnv"]["GPUHUB_JOBS_PUBLIC_URL"] \
        and env["FROM_SINGLEUSER_EXTRAENV"] == "1"
    # the lab's culling warnings go to the culler in the hub pod, not to gpu-jobs' Service (no culler there)
    assert env["GPUHUB_CULLER_URL"] == f"http://hub:{CULLER_PORT}/services/{CULLER}/"
    # the Deployment listens where the hub sends the proxy, under the service's prefix, with the same token
    (dep,) = [o for o in docs("gpu-jobs.yaml") if o["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert f"--url=http://0.0.0.0:{JOBS_PORT}" in container["command"]
    token = next(e for e in container["env"] if e["name"] == "JUPYTERHUB_API_TOKEN")
    assert token["valueFrom"] == hub["extraEnv"]["GPUHUB_JOBS_API_TOKEN"]["valueFrom"]
    assert {"name": "JUPYTERHUB_SERVICE_PREFIX", "value": f"/services/{GPU_JOBS}/"} in container["env"]


def test_networkpolicies_select_by_z2jh_component_labels(cfg):
    pols = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in docs("networkpolicy.yaml")}
    hub = pols[("jhub", "gpuhub-hub-services")]["spec"]
    assert hub["podSelector"] == {"matchLabels": {"component": "hub"}}
    proxy_rule, servers_rule = hub["ingress"]
    assert proxy_rule["from"] == [{"podSelector": {"matchLabels": {"component": "proxy"}}}]
    assert [p["port"] for p in proxy_rule["ports"]] == [CULLER_PORT, 10103, 10104]  # the culler, usage page, console
    # the servers' culling warnings ($GPUHUB_CULLER_URL), and the values let them out to that port only
    assert servers_rule["from"] == [{"podSelector": {"matchLabels": {"component": "singleuser-server"}}}]
    assert [p["port"] for p in servers_rule["ports"]] == [CULLER_PORT]
    egress = docs("values.yaml")[0]["singleuser"]["networkPolicy"]["egress"]
    assert {"to": [{"podSelector": {"matchLabels": {"component": "hub"}}}],
            "ports": [{"protocol": "TCP", "port": CULLER_PORT}]} in egress
    jobs = pols[("jhub", "gpuhub-gpu-jobs")]["spec"]
    rule, monitoring = jobs["ingress"]  # the API from the proxy, servers and hub; the metrics port from Prometheus
    assert monitoring["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"component": "proxy"}}},
                            {"podSelector": {"matchLabels": {"component": "singleuser-server"}}},
                            {"podSelector": {"matchLabels": {"component": "hub"}}}]  # the culler's warnings
    assert [p["port"] for p in rule["ports"]] == [JOBS_PORT]
    (dep,) = [o for o in docs("gpu-jobs.yaml") if o["kind"] == "Deployment"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert jobs["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert pod_labels["hub.jupyter.org/network-access-hub"] == "true"  # z2jh's hub policy admits it to the API
    # z2jh's legacy labels are never selected on
    text = (DEPLOY / "networkpolicy.yaml").read_text() + (DEPLOY / "values.yaml").read_text()
    assert "app: jupyterhub" not in text and "release:" not in text


def test_aks_script_creates_the_example_pools(cfg):
    text = (DEPLOY / "aks-nodepools.sh").read_text()
    cmds = [shlex.split(c.replace("\\\n", " ")) for c in text.split("\n\n") if "az aks nodepool add" in c]
    by_name = {}
    for block in cmds:
        argv = block[block.index("az"):]
        by_name[argv[argv.index("--name") + 1]] = argv
    assert set(by_name) == {n for n, p in cfg.pools.items() if p.is_gpu}  # the system pool comes with the cluster
    for name, argv in by_name.items():
        pool = cfg.pools[name]
        assert argv[argv.index("--node-vm-size") + 1] == pool.instance_type
        assert argv[argv.index("--node-taints") + 1] == "sku=gpu:NoSchedule"
        assert argv[argv.index("--max-count") + 1] == str(pool.max_nodes)
        assert argv[argv.index("--gpu-driver") + 1] == "none"
        labels = argv[argv.index("--labels") + 1:]
        assert f"nvidia.com/device-plugin.config={name}" in labels
        assert ("--priority" in argv) == pool.spot
    assert "nvidia.com/mig.config=all-1g.10gb" in by_name["gpumig"]
    assert by_name["spota100"][by_name["spota100"].index("--priority") + 1] == "Spot"
    assert "kubernetes.azure.com/scalesetpriority" not in text  # AKS adds the spot taint itself


def test_device_plugin_config_matches_the_pools(cfg):
    (cm,) = docs("nvidia-device-plugin-config.yaml")
    entries = {k: yaml.safe_load(v) for k, v in cm["data"].items()}
    assert set(entries) == {"default"} | {n for n, p in cfg.pools.items() if p.is_gpu}
    # a GPU node without the per-pool label (a pool added by hand) gets whole GPUs, not a crash loop
    assert entries["default"] == {"version": "v1", "flags": {"migStrategy": "none"}}
    ts = entries["gput4"]["sharing"]["timeSlicing"]
    assert ts["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert ts["renameByDefault"] is False and ts["failRequestsGreaterThanOne"] is True
    assert entries["gpumig"]["flags"]["migStrategy"] == "mixed"
    assert entries["gpuh100"] == {"version": "v1", "flags": {"migStrategy": "none"}}


def test_mig_parted_config_matches_the_layout(cfg):
    (cm,) = docs("mig-parted-config.yaml")
    configs = yaml.safe_load(cm["data"]["config.yaml"])["mig-configs"]
    pool = cfg.pools["gpumig"]
    assert configs[pool.mig_config_name()] == [{"devices": "all", "mig-enabled": True,
                                                "mig-devices": {"1g.10gb": 7}}]
    assert sum(pool.slots_per_node().values()) == sum(configs[pool.mig_config_name()][0]["mig-devices"].values())


def test_custom_mig_layout_and_rename(cfg):
    data = yaml.safe_load(Path(EXAMPLE_PROFILES).read_text())
    data["pools"]["gpumig"]["sharing"]["layout"] = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    data["pools"]["gput4"]["sharing"]["rename_by_default"] = True
    data["profiles"] = [p for p in data["profiles"] if p["slug"] != "a100-mig-1g10gb"]
    from jupyterhub_gpu.model.validation import parse_profiles_text

    other = parse_profiles_text(yaml.safe_dump(data, sort_keys=False))
    configs = deploy.mig_parted_configs(other)["mig-configs"]
    name = other.pools["gpumig"].mig_config_name()
    assert name.startswith("custom-") and configs[name][0]["mig-devices"] == {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    assert deploy.device_plugin_entry(other.pools["gput4"])["sharing"]["timeSlicing"]["renameByDefault"] is True
    assert f"nvidia.com/mig.config={name}" in deploy.render_aks_script(other)


# ---------------------------------------------------------------------------------------------- docs
def test_every_model_field_is_documented():
    from jupyterhub_gpu.tools import reference_docs as refdoc

    assert refdoc.undocumented() == []


def test_profiles_reference_is_current():
    from jupyterhub_gpu.tools import reference_docs as refdoc

    docs = ROOT / "docs"
    assert (docs / "profiles-reference.md").read_text() == refdoc.standalone(), \
        "docs/profiles-reference.md is stale: run python -m jupyterhub_gpu.tools.reference_docs"
    guide = (docs / "admin-guide.md").read_text()
    assert refdoc.splice(guide) == guide, \
        "docs/admin-guide.md's reference is stale: run python -m jupyterhub_gpu.tools.reference_docs"


def test_reference_names_every_field_with_type_and_default():
    from jupyterhub_gpu.tools import reference_docs as refdoc

    text = refdoc.reference()
    for _, model, _ in refdoc.SECTIONS:
        for name, field in model.model_fields.items():
            if not field.exclude:
                assert f"| `{field.alias or name}` |" in text
    assert "| `idle_timeout` | duration" in text and "| `memory` | memory quantity (`8Gi`, `512Mi`) | `4Gi` |" in text
    assert "| `replicas` | integer | **required** | ≥ 2, ≤ 64 |" in text
    assert "| `cohort` | DNS label |" in text


def test_docs_exist_and_link_what_exists():
    import re

    for name in ("admin-guide.md", "user-guide.md", "troubleshooting.md", "profiles-reference.md"):
        text = (ROOT / "docs" / name).read_text()
        for target in re.findall(r"\]\((\.\./[^)#]+)\)", text):
            assert (ROOT / "docs" / target).resolve().exists(), f"docs/{name} links to missing {target}"
    trouble = (ROOT / "docs" / "troubleshooting.md").read_text()
    for symptom in ("Pending", "Running without a GPU", "Non-GPU pods on GPU nodes", "idle GPUs", "spot eviction"):
        assert symptom in trouble


def test_singleuser_and_proxy_may_reach_gpu_jobs_on_its_port_only():
    v = docs("values.yaml")[0]
    (dep,) = [o for o in docs("gpu-jobs.yaml") if o["kind"] == "Deployment"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    servers = [r for r in v["singleuser"]["networkPolicy"]["egress"]  # the other rule: the culler (test above)
               if r["to"] != [{"podSelector": {"matchLabels": {"component": "hub"}}}]]
    for rules in (servers, v["proxy"]["chp"]["networkPolicy"]["egress"]):
        (rule,) = rules
        (to,) = rule["to"]
        assert to["podSelector"]["matchLabels"].items() <= labels.items()
        assert rule["ports"] == [{"protocol": "TCP", "port": JOBS_PORT}]


def test_kernels_find_gpu_jobs_inside_the_cluster(monkeypatch, tmp_path):
    """%gpu_submit calls the gpu-jobs Service directly (plain HTTP inside the cluster), not through the proxy,
    whose scheme (HTTPS) and address are the outside world's."""
    from traitlets.config import Config

    from jupyterhub_gpu.singleuser.client import service_url

    hub = docs("values.yaml")[0]["hub"]
    for k, val in hub["extraEnv"].items():
        monkeypatch.setenv(k, "t" if isinstance(val, dict) else str(val))
    monkeypatch.setenv("GPUHUB_PROFILES", str(EXAMPLE_PROFILES))
    monkeypatch.chdir(tmp_path)
    c = Config()
    exec(hub["extraConfig"]["00-jupyterhub-gpu"], {"c": c})
    url = service_url({**c.GPUSpawner.environment, "JUPYTERHUB_API_URL": "http://hub:8081/hub/api"})
    assert url == f"http://{GPU_JOBS}.jhub.svc:{JOBS_PORT}/services/{GPU_JOBS}/"


def test_render_deploy_writes_the_files_with_images_and_jobs_options(tmp_path, capsys):
    from jupyterhub_gpu.tools.cli import main

    out = tmp_path / "d"
    assert main(["render", "deploy", str(EXAMPLE_PROFILES), "--out", str(out), "--hub-namespace", "hub-prod",
                 "--image", "acr.example/hub:1", "--runner-image", "acr.example/runner:1-cuda",
                 "--jobs-option", "max-timeout=3d"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(deploy.GENERATED)
    (dep,) = [d for d in yaml.safe_load_all((out / "gpu-jobs.yaml").read_text()) if d and d["kind"] == "Deployment"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "acr.example/hub:1" and dep["metadata"]["namespace"] == "hub-prod"
    assert "--runner-image=acr.example/runner:1-cuda" in c["command"] and "--max-timeout=3d" in c["command"]
    assert main(["render", "deploy", str(EXAMPLE_PROFILES), "--out", str(out), "--jobs-option", "oops"]) == 2
    assert "--jobs-option 'oops' must look like name=value" in capsys.readouterr().err


def test_the_culler_calls_the_hub_on_localhost_not_through_the_hub_service(tmp_path, monkeypatch):
    """z2jh's hub listens on all interfaces (hub_bind_url http://:8081); JupyterHub then gives a managed
    service 127.0.0.1 as the hub's address, as z2jh's own culler uses, so nothing hairpins through the `hub`
    Service. That holds as long as our config does not set the address itself."""
    import inspect

    from jupyterhub.services.service import Service
    from traitlets.config import Config

    assert "tell services to connect via localhost" in inspect.getsource(Service.start)
    hub = docs("values.yaml")[0]["hub"]
    for k, v in hub["extraEnv"].items():
        monkeypatch.setenv(k, "t" if isinstance(v, dict) else str(v))
    monkeypatch.setenv("GPUHUB_PROFILES", str(EXAMPLE_PROFILES))
    monkeypatch.chdir(tmp_path)
    c = Config()
    exec(hub["extraConfig"]["00-jupyterhub-gpu"], {"c": c})
    (culler,) = [s for s in c.JupyterHub.services if s["name"] == CULLER]
    assert "command" in culler  # managed: runs in the hub pod
    assert not {"JUPYTERHUB_API_URL", "JUPYTERHUB_HUB_URL"} & set(culler.get("environment") or {})


def test_render_deploy_that_cannot_encode_a_file_writes_none_and_keeps_the_old_ones(tmp_path, capsys):
    """A lone surrogate (YAML's \\ud800 escape) in a VM size reaches the script: exit 2 and every file already
    in the folder as it was, none truncated."""
    from jupyterhub_gpu.tools.cli import main

    out = tmp_path / "deploy"
    assert main(["render", "deploy", str(EXAMPLE_PROFILES), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    text = Path(EXAMPLE_PROFILES).read_text().replace("instance_type: Standard_NC4as_T4_v3\n",
                                                      'instance_type: "Standard_NC4as_T4_v3\\ud800"\n', 1)
    assert "\\ud800" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    capsys.readouterr()
    assert main(["render", "deploy", str(bad), "--out", str(out)]) == 2
    assert "nothing was written" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
