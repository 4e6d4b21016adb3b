"""Read-only datasets: the profiles file's `datasets` (validation, every refusal naming its field), the PV/claim
pairs rendered per namespace, the one rule servers and jobs share (a job sees exactly its server's datasets),
and `gpuhub doctor`'s rows against objects written out as the API server returns them."""
from __future__ import annotations

import copy
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.builders.datasets import claim_name, dataset_objects, pod_datasets
from jupyterhub_gpu.builders.jobs import build_job
from jupyterhub_gpu.builders.jobsets import build_jobset
from jupyterhub_gpu.builders.pods import spawner_overrides
from jupyterhub_gpu.contract import DATASET_LABEL, ENV_DATASETS
from jupyterhub_gpu.hub.render_pod import pod_manifest
from jupyterhub_gpu.model.datasets import NAME_MAX, datasets_for
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles
from jupyterhub_gpu.tools.cli import main as gpuhub
from jupyterhub_gpu.tools.doctor import FAIL, OK, SIMULATED, Snapshot, run_checks
from jupyterhub_gpu.tools.doctor_datasets import check_datasets, wanted

EXAMPLE = yaml.safe_load(EXAMPLE_PROFILES.read_text())
NB = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
BLOB = {"storage_account": "gpuhubdatasets", "container": "imagenet-mini"}
CLIENT = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"


def data(**datasets) -> dict:
    d = copy.deepcopy(EXAMPLE)
    d["datasets"] = datasets
    return d


def problems(d: dict) -> list[str]:
    with pytest.raises(ProfilesError) as e:
        parse_profiles(d)
    return [str(p) for p in e.value.problems]


# ---------------------------------------------------------------------------------------------- the model
def test_the_example_gives_imagenet_mini_to_data_science_on_blob():
    cfg = parse_profiles(EXAMPLE)
    ds = cfg.datasets["imagenet-mini"]
    assert ds.blob.storage_account == "gpuhubdatasets" and ds.blob.protocol == "fuse2" and ds.teams == ["data-science"]
    assert datasets_for(cfg, "t4-shared", ["data-science"]) == ["imagenet-mini"]
    assert datasets_for(cfg, "t4-shared", ["teaching"]) == ["imagenet-mini"]  # the default team's, as for quotas
    assert datasets_for(cfg, "a100-spot", ["ml-research"]) == []


@pytest.mark.parametrize("dataset, where, words", [
    ({"teams": ["data-science"]}, "datasets.d", "exactly one source"),
    ({"blob": BLOB, "azurefile": {"storage_account": "acct1", "share": "data"}, "teams": ["data-science"]},
     "datasets.d", "exactly one source"),
    ({"blob": BLOB}, "datasets.d", "nobody would get it"),
    ({"blob": BLOB, "teams": ["data-sciense"]}, "datasets.d.teams[0]", "not a team of this file"),
    ({"blob": BLOB, "profiles": ["cpu", "gpu"]}, "datasets.d.profiles[1]", "not a profile of this file"),
    ({"blob": {**BLOB, "storage_account": "Has-Dash"}, "teams": ["data-science"]}, "datasets.d.blob.storage_account",
     "3 to 24 lowercase letters and digits"),
    ({"blob": {**BLOB, "container": "a--b"}, "teams": ["data-science"]}, "datasets.d.blob.container", "single '-'"),
    ({"blob": {**BLOB, "resource_group": "rg."}, "teams": ["data-science"]}, "datasets.d.blob.resource_group",
     "not ending in '.'"),
    ({"blob": {**BLOB, "protocol": "nfs", "identity_client_id": CLIENT}, "teams": ["data-science"]},
     "datasets.d.blob", "NFS mount uses no credentials"),
    ({"blob": {**BLOB, "identity_client_id": "me"}, "teams": ["data-science"]}, "datasets.d.blob.identity_client_id",
     "not a GUID"),
    ({"blob": {**BLOB, "protocol": "fuse"}, "teams": ["data-science"]}, "datasets.d.blob.protocol", "fuse2"),
    ({"azurefile": {"storage_account": "acct1", "share": "x"}, "teams": ["data-science"]},
     "datasets.d.azurefile.share", "3 to 63"),
    ({"blob": BLOB, "teams": ["data-science"] * 65}, "datasets.d.teams", "at most 64"),
    ({"blob": BLOB, "teams": ["data-science"], "readonly": False}, "datasets.d.readonly", "unknown key"),
])
def test_a_bad_dataset_is_refused_naming_the_field_and_why(dataset, where, words):
    found = problems(data(d=dataset))
    assert any(p.startswith(f"{where}:") and words in p for p in found), found


@settings(max_examples=80, deadline=None)
@given(name=st.one_of(st.text(min_size=1, max_size=300), st.from_regex(r"[a-z0-9-]{49,200}", fullmatch=True)))
def test_hostile_names_are_refused_bounded_or_are_dns_labels(name):
    d = data(**{name: {"blob": BLOB, "teams": ["data-science"]}})
    if re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= NAME_MAX:
        cfg = parse_profiles(d)
        assert all(len(o["metadata"]["name"]) <= 253 for o in dataset_objects(cfg, "jhub"))
        assert all(len(v["name"]) <= 63 for v in pod_datasets(cfg, cfg.profile("cpu"), ["data-science"])[0])
        return
    (found,) = problems(d)
    assert "is not a valid dataset name" in found and len(found) < 400  # bounded, whatever the name was


# ---------------------------------------------------------------------------------------------- the objects
def test_each_namespace_that_mounts_it_gets_a_read_only_pv_and_claim_bound_to_each_other():
    objs = dataset_objects(parse_profiles(EXAMPLE), "jhub")
    pvs = {o["spec"]["claimRef"]["namespace"]: o for o in objs if o["kind"] == "PersistentVolume"}
    claims = {o["metadata"]["namespace"]: o for o in objs if o["kind"] == "PersistentVolumeClaim"}
    assert set(pvs) == set(claims) == {"jhub", "team-ds"}  # servers, and data-science's jobs; not team-mlr
    handles = set()
    for ns, pv in pvs.items():
        claim = claims[ns]
        assert claim["metadata"]["name"] == pv["spec"]["claimRef"]["name"] == claim_name("imagenet-mini")
        assert claim["spec"]["volumeName"] == pv["metadata"]["name"] and claim["spec"]["storageClassName"] == ""
        assert pv["spec"]["accessModes"] == claim["spec"]["accessModes"] == ["ReadOnlyMany"]
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
        csi = pv["spec"]["csi"]
        assert csi["driver"] == "blob.csi.azure.com" and csi["readOnly"] is True and "#" not in csi["volumeHandle"]
        assert csi["volumeAttributes"] == {"containerName": "imagenet-mini", "protocol": "fuse2",
                                           "storageAccount": "gpuhubdatasets"}
        assert "-o allow_other" in pv["spec"]["mountOptions"]  # jovyan, not root, reads a blobfuse2 mount
        assert pv["metadata"]["labels"][DATASET_LABEL] == claim["metadata"]["labels"][DATASET_LABEL] == "imagenet-mini"
        handles.add(csi["volumeHandle"])
    assert len(handles) == 2  # one handle per PV, as the driver requires


def test_a_managed_identity_blob_and_an_azure_files_share_render_their_drivers_attributes():
    cfg = parse_profiles(data(
        mi={"blob": {**BLOB, "resource_group": "rg-data", "identity_client_id": CLIENT}, "profiles": ["cpu"]},
        files={"azurefile": {"storage_account": "acct1", "share": "corpus", "protocol": "nfs"},
               "teams": ["ml-research"]}))
    objs = {(o["metadata"]["name"]): o for o in dataset_objects(cfg, "jhub") if o["kind"] == "PersistentVolume"}
    # a profile's dataset: every team's namespace, since any team's member may start that profile
    assert {n for n in objs if n.endswith(".mi")} == {"gpuhub-dataset.jhub.mi", "gpuhub-dataset.team-ds.mi",
                                                      "gpuhub-dataset.team-mlr.mi"}
    assert objs["gpuhub-dataset.jhub.mi"]["spec"]["csi"]["volumeAttributes"] == {
        "AzureStorageAuthType": "MSI", "AzureStorageIdentityClientID": CLIENT, "containerName": "imagenet-mini",
        "protocol": "fuse2", "resourceGroup": "rg-data", "storageAccount": "gpuhubdatasets"}
    files = objs["gpuhub-dataset.team-mlr.files"]["spec"]
    assert files["csi"]["driver"] == "file.csi.azure.com" and files["mountOptions"] == ["ro"]
    assert files["csi"]["volumeAttributes"] == {"protocol": "nfs", "shareName": "corpus", "storageAccount": "acct1"}
    assert "gpuhub-dataset.team-ds.files" not in objs


def test_gpuhub_render_datasets_prints_the_objects(capsys):
    assert gpuhub(["render", "datasets", str(EXAMPLE_PROFILES), "--hub-namespace", "hub2"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {(d["kind"], d["metadata"].get("namespace")) for d in docs} == {
        ("PersistentVolume", None), ("PersistentVolumeClaim", "hub2"), ("PersistentVolumeClaim", "team-ds")}


# ---------------------------------------------------------------------------------------------- who gets what
def job_pod(cfg, slug, groups, nodes=None):
    if nodes:
        (obj, _cm) = build_jobset(cfg, cfg.profile(slug), "alice", groups, "a.ipynb", NB, nodes)
        return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    (job, _cm) = build_job(cfg, cfg.profile(slug), "alice", groups, "a.ipynb", NB, name="gpu-alice-a-abc123")
    return job["spec"]["template"]["spec"]


def dataset_fields(volumes, mounts, env) -> tuple[list, list, str | None]:
    env = dict(env) if isinstance(env, dict) else {e["name"]: e.get("value") for e in env}
    return ([v for v in volumes if v["name"].startswith("dataset-")],
            [m for m in mounts if m["name"].startswith("dataset-")], env.get(ENV_DATASETS))


GROUPS = ["data-science", "ml-research", "teaching", "other"]
SLUGS = [p["slug"] for p in EXAMPLE["profiles"]]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grants=st.lists(st.tuples(st.lists(st.sampled_from(["data-science", "ml-research"]), unique=True),
                                 st.lists(st.sampled_from(SLUGS), unique=True)), min_size=1, max_size=4),
       groups=st.lists(st.sampled_from(GROUPS), unique=True), default=st.sampled_from(["data-science", None]))
def test_a_job_sees_exactly_the_datasets_its_server_would(grants, groups, default):
    sets = {f"set{i}": {"blob": {**BLOB, "container": f"c{i}-data"}, "teams": teams, "profiles": slugs}
            for i, (teams, slugs) in enumerate(grants) if teams or slugs}
    d = data(**sets)
    for name, team in d["teams"].items():
        team["default"] = name == default
    cfg = parse_profiles(d)
    team = cfg.team_for(groups)
    for profile in cfg.profiles_for(groups):
        names = datasets_for(cfg, profile.slug, groups)
        assert names == [n for n, s in sets.items()
                         if (team and team[0] in s["teams"]) or profile.slug in s["profiles"]]
        over = spawner_overrides(cfg, profile, None, groups)
        server = dataset_fields(over["volumes"], over["volume_mounts"], over["environment"])
        assert [m["mountPath"] for m in server[1]] == [f"/datasets/{n}" for n in names]
        assert all(m["readOnly"] and v["persistentVolumeClaim"]["readOnly"] for v, m in zip(server[0], server[1]))
        if not profile.is_gpu or team is None:
            continue  # jobs are GPU jobs of a team
        spec = job_pod(cfg, profile.slug, groups)
        assert dataset_fields(spec["volumes"], spec["containers"][0]["volumeMounts"],
                              spec["containers"][0]["env"]) == server
        claims = {(ns, n) for ns, n in wanted(cfg, "jhub")}  # the claim exists where each pod runs
        assert all(("jhub", v["persistentVolumeClaim"]["claimName"]) in claims for v in server[0])
        assert all((team[1].namespace, v["persistentVolumeClaim"]["claimName"]) in claims for v in server[0])


def test_a_multi_node_jobs_ranks_get_the_same_datasets_as_the_server():
    cfg = parse_profiles(data(d={"blob": BLOB, "profiles": ["h100-full"]}))
    over = spawner_overrides(cfg, cfg.profile("h100-full"), None, ["ml-research"])
    spec = job_pod(cfg, "h100-full", ["ml-research"], nodes=2)
    server = dataset_fields(over["volumes"], over["volume_mounts"], over["environment"])
    assert server[0] and dataset_fields(spec["volumes"], spec["containers"][0]["volumeMounts"],
                                        spec["containers"][0]["env"]) == server


async def test_the_spawners_own_pod_mounts_the_teams_dataset_read_only_and_no_one_elses():
    pod = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "alice", ["data-science"])
    (mount,) = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "dataset-imagenet-mini"]
    assert mount == {"name": "dataset-imagenet-mini", "mountPath": "/datasets/imagenet-mini", "readOnly": True}
    assert {"name": ENV_DATASETS, "value": "/datasets"} in pod["spec"]["containers"][0]["env"]
    assert not any("volumeMounts" in c for c in pod["spec"].get("initContainers") or [])  # the GPU check: none
    other = await pod_manifest(EXAMPLE_PROFILES, "t4-shared", "bob", ["ml-research"])
    assert not [v for v in other["spec"]["volumes"] if v["name"].startswith("dataset-")]
    assert ENV_DATASETS not in {e["name"] for e in other["spec"]["containers"][0]["env"]}


# ---------------------------------------------------------------------------------------------- doctor
def live(cfg, ns_claims=None):
    """The file's claims and volumes as the API server returns them once bound (claims; volumes by name)."""
    claims, volumes = {}, {}
    for o in dataset_objects(cfg, "jhub"):
        o = copy.deepcopy(o)
        if o["kind"] == "PersistentVolume":
            volumes[o["metadata"]["name"]] = o | {"status": {"phase": "Bound"}}
        else:
            o["metadata"]["uid"] = "u-1"
            o["status"] = {"phase": "Bound", "accessModes": ["ReadOnlyMany"], "capacity": {"storage": "1Ti"}}
            claims[(o["metadata"]["namespace"], o["metadata"]["name"])] = o
    return claims, volumes


DRIVERS = {"blob.csi.azure.com": {"metadata": {"name": "blob.csi.azure.com"}}}


def rows(cfg, drivers=DRIVERS, claims=None, volumes=None, simulated=False):
    c, v = live(cfg)
    return {r.name: r for r in check_datasets(cfg, drivers, c if claims is None else claims,
                                              v if volumes is None else volumes, "jhub", "profiles.yaml",
                                              simulated=simulated)}


def test_doctor_passes_the_driver_and_each_bound_claim():
    cfg = parse_profiles(EXAMPLE)
    out = rows(cfg)
    assert set(out) == {"CSI driver blob.csi.azure.com", "claim jhub/gpuhub-dataset-imagenet-mini",
                        "claim team-ds/gpuhub-dataset-imagenet-mini"}
    assert all(r.status == OK for r in out.values()), out


def test_doctor_fails_a_missing_driver_with_the_az_fix_and_says_simulated_on_the_dev_cluster():
    cfg = parse_profiles(EXAMPLE)
    row = rows(cfg, drivers={"blob.csi.azure.com": None})["CSI driver blob.csi.azure.com"]
    assert row.status == FAIL and "--enable-blob-driver" in row.fix
    row = rows(cfg, drivers={"blob.csi.azure.com": None}, simulated=True)["CSI driver blob.csi.azure.com"]
    assert row.status == SIMULATED and not row.failed


def test_doctor_fails_a_missing_pending_writable_or_foreign_claim():
    cfg = parse_profiles(EXAMPLE)
    claims, volumes = live(cfg)
    name = "claim team-ds/gpuhub-dataset-imagenet-mini"
    key = ("team-ds", "gpuhub-dataset-imagenet-mini")
    missing = rows(cfg, claims={k: (None if k == key else c) for k, c in claims.items()}, volumes=volumes)[name]
    assert missing.status == FAIL and "jobs in team-ds cannot mount" in missing.detail
    assert "gpuhub render datasets profiles.yaml" in missing.fix
    pending = copy.deepcopy(claims)
    pending[key]["status"] = {"phase": "Pending"}
    assert "Pending, not Bound" in rows(cfg, claims=pending, volumes=volumes)[name].detail
    writable = copy.deepcopy(claims)
    writable[key]["status"]["accessModes"] = ["ReadWriteMany"]
    assert "not ['ReadOnlyMany']" in rows(cfg, claims=writable, volumes=volumes)[name].detail
    foreign = copy.deepcopy(volumes)
    foreign["gpuhub-dataset.team-ds.imagenet-mini"]["spec"]["csi"]["volumeAttributes"]["containerName"] = "other"
    assert "the file says" in rows(cfg, claims=claims, volumes=foreign)[name].detail


def test_doctor_names_the_dev_clusters_local_folder_and_refuses_one_on_a_real_cluster():
    cfg = parse_profiles(EXAMPLE)
    claims, volumes = live(cfg)
    for pv in volumes.values():
        del pv["spec"]["csi"]
        pv["spec"]["hostPath"] = {"path": "/state/datasets/imagenet-mini", "type": "Directory"}
    dev = rows(cfg, claims=claims, volumes=volumes, simulated=True)["claim jhub/gpuhub-dataset-imagenet-mini"]
    assert dev.status == OK and "local folder" in dev.detail
    real = rows(cfg, claims=claims, volumes=volumes)["claim jhub/gpuhub-dataset-imagenet-mini"]
    assert real.status == FAIL and "not on blob.csi.azure.com" in real.detail


def test_doctor_has_no_rows_without_datasets_and_says_what_to_allow_when_unreadable():
    plain = copy.deepcopy(EXAMPLE)
    del plain["datasets"]
    assert check_datasets(parse_profiles(plain), {}, {}, {}, "jhub") == []
    cfg = parse_profiles(EXAMPLE)
    (row,) = check_datasets(cfg, None, None, {}, "jhub", error="HTTP 403: forbidden")
    assert row.status == FAIL and "HTTP 403" in row.detail and "csidrivers" in row.fix
    snap = Snapshot(nodes=[], crds={}, kueue={})
    assert not [c for c in run_checks(cfg, snap) if c.section == "datasets"]  # not read: no rows
    snap.dataset_drivers, (snap.dataset_claims, snap.dataset_volumes) = DRIVERS, live(cfg)
    assert [c.status for c in run_checks(cfg, snap) if c.section == "datasets"] == [OK, OK, OK]


# ---------------------------------------------------------------------------------------------- the dev agent
def test_the_dev_agent_mounts_readonly_claims_read_only_and_shows_the_datasets_folder(tmp_path):
    """SIMULATOR: a `readOnly` mount (on the mount or the claim volume) is read-only for the process, even as root;
    `$GPUHUB_DATASETS` is a folder of the pod's own holding each dataset's mount."""
    import os
    import subprocess

    from jupyterhub_gpu_dev.agent_env import mount_parents, read_only_command, read_only_mounts_work
    from jupyterhub_gpu_dev.volumes import read_only_folders

    data, home = tmp_path / "imagenet-mini", tmp_path / "home"
    data.mkdir()
    home.mkdir()
    (data / "README.txt").write_text("the data\n")
    cfg = parse_profiles(EXAMPLE)
    volumes, mounts, env = pod_datasets(cfg, cfg.profile("cpu"), ["data-science"])
    pod = {"spec": {"volumes": volumes + [{"name": "home", "persistentVolumeClaim": {"claimName": "gpuhub-home"}}]}}
    container = {"volumeMounts": mounts + [{"name": "home", "mountPath": "/home/jovyan"}]}
    local = {"/datasets/imagenet-mini": data, "/home/jovyan": home}
    assert read_only_folders(pod, container, local) == [data]  # the home stays writable
    urls = {"JUPYTERHUB_BASE_URL": "/", "JUPYTERHUB_SERVICE_PREFIX": "/user/alice/"}  # paths of URLs, not folders
    seen = mount_parents({**env, **urls}, local, tmp_path / "rootfs")
    assert (tmp_path / "rootfs" / "datasets" / "imagenet-mini" / "README.txt").read_text() == "the data\n"
    assert seen == {ENV_DATASETS: str(tmp_path / "rootfs" / "datasets")}
    if not read_only_mounts_work(tmp_path):
        pytest.skip("this machine allows no mount namespace (the agent says so in its log)")
    script = 'cat "$D/imagenet-mini/README.txt"; echo x > "$D/imagenet-mini/new" || echo REFUSED; echo ok > "$H/f"'
    cmd = read_only_command(["sh", "-c", script], [data], os.geteuid() == 0)
    run = subprocess.run(cmd, env={**os.environ, "D": seen[ENV_DATASETS], "H": str(home)}, capture_output=True,
                         text=True, timeout=30)
    assert run.stdout.split() == ["the", "data", "REFUSED"] and "Read-only file system" in run.stderr
    assert sorted(p.name for p in data.iterdir()) == ["README.txt"] and (home / "f").read_text() == "ok\n"


def test_dataset_volumes_of_two_namespaces_never_share_a_name():
    """Issue 50 item 8: team `team` with dataset `ds-x` and team `team-ds` with dataset `x` made one PV name (validate
    said ok); the second claim stayed Pending. Each (namespace, dataset) pair has its own valid name now."""
    d = data(**{"ds-x": {"blob": BLOB, "teams": ["team"]}, "x": {"blob": BLOB, "teams": ["team-ds"]}})
    d["teams"] = {"team": {"namespace": "team", "default": True}, "team-ds": {"namespace": "team-ds"}}
    cfg = parse_profiles(d)
    pvs = [o for o in dataset_objects(cfg, "jhub") if o["kind"] == "PersistentVolume"]
    names = [pv["metadata"]["name"] for pv in pvs]
    assert len(names) == len(set(names)) == 4, names  # jhub and each team's namespace, per dataset
    assert all(len(n) <= 253 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", n)
               for n in names)


LABEL = r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.from_regex(LABEL, fullmatch=True), st.from_regex(LABEL, fullmatch=True)), max_size=6,
                unique=True))
def test_the_pv_name_of_each_namespace_and_dataset_pair_is_its_own(pairs):
    """Any namespaces and dataset names (DNS labels): as many PV names as pairs."""
    from jupyterhub_gpu.builders.datasets import pv_name

    assert len({pv_name(name, ns) for ns, name in pairs}) == len(pairs)
