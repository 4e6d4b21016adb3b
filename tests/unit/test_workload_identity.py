"""Workload identity per team (issue 28 item 2): a team's `identity` gives its servers and jobs, and only them,
its own ServiceAccount (annotated with the managed identity's client id) and the webhook's pod label; teams
without one, the hub and gpu-jobs are exactly as before. Through the real validation, builders, GPUSpawner's
manifest, the rendered deploy/ script (run against a fake `az`)."""
from __future__ import annotations

import copy
import os
import subprocess

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.builders import deploy
from jupyterhub_gpu.builders.identity import (
    WI_CLIENT_ID,
    WI_SKIP_CONTAINERS,
    WI_TENANT_ID,
    WI_USE,
    federated_credentials,
    pod_identity,
    service_accounts,
)
from jupyterhub_gpu.builders.jobs import build_job
from jupyterhub_gpu.builders.jobsets import build_jobset
from jupyterhub_gpu.builders.kueue import render_kueue
from jupyterhub_gpu.contract import GPU_CHECK_CONTAINER
from jupyterhub_gpu.hub.render_pod import pod_manifest
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles

EXAMPLE = yaml.safe_load(EXAMPLE_PROFILES.read_text())
MLR_ID = "11111111-2222-3333-4444-555555555555"
DS_ID = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
TENANT = "99999999-8888-4777-8666-555555555555"
NB = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
ACCOUNT = "gpuhub-ml-research-identity"


def data(**identities) -> dict:
    """The example file with these teams' identities (None: removed)."""
    d = copy.deepcopy(EXAMPLE)
    for team, ident in identities.items():
        d["teams"][team].pop("identity", None)
        if ident is not None:
            d["teams"][team]["identity"] = ident
    return d


def problems(d: dict) -> list[str]:
    with pytest.raises(ProfilesError) as e:
        parse_profiles(d)
    return [str(p) for p in e.value.problems]


# ---------------------------------------------------------------------------------------------- the model
def test_the_example_gives_ml_research_an_identity_with_the_default_account():
    cfg = parse_profiles(EXAMPLE)
    ident = cfg.teams["ml-research"].identity
    assert ident.client_id == MLR_ID and ident.tenant_id is None and ident.service_account is None
    assert cfg.teams["data-science"].identity is None


@pytest.mark.parametrize("ident, where, words", [
    ({"client_id": "not-a-guid"}, "identity.client_id", "is not a GUID"),
    ({"client_id": MLR_ID + "0"}, "identity.client_id", "is not a GUID"),
    ({"client_id": MLR_ID, "tenant_id": "contoso.onmicrosoft.com"}, "identity.tenant_id", "is not a GUID"),
    ({"client_id": MLR_ID, "service_account": "Team_SA"}, "identity.service_account", "not a valid ServiceAccount"),
    ({"client_id": MLR_ID, "service_account": "a" * 254}, "identity.service_account", "at most 253"),
    ({"client_id": MLR_ID, "service_account": "hub"}, "identity.service_account", "other pods use"),
    ({"client_id": MLR_ID, "service_account": "gpu-jobs"}, "identity.service_account", "other pods use"),
    ({"client_id": MLR_ID, "service_account": "default"}, "identity.service_account", "other pods use"),
    ({"client_id": MLR_ID, "secret": "x"}, "identity.secret", "unknown key"),
    ({}, "identity.client_id", "is required"),
])
def test_a_bad_identity_is_refused_with_its_path(ident, where, words):
    (problem,) = problems(data(**{"ml-research": ident}))
    assert problem.startswith(f"teams.ml-research.{where}:") and words in problem, problem


def test_two_teams_never_share_an_account_or_a_managed_identity():
    same_account = data(**{"data-science": {"client_id": DS_ID, "service_account": ACCOUNT}})
    (problem,) = problems(same_account)
    assert problem.startswith("teams.ml-research.identity.service_account:") and "'data-science'" in problem
    same_identity = data(**{"data-science": {"client_id": MLR_ID.upper()}})  # GUIDs compare as Azure does
    (problem,) = problems(same_identity)
    assert problem.startswith("teams.ml-research.identity.client_id:") and "own managed identity" in problem


def test_guids_are_kept_as_azure_writes_them():
    cfg = parse_profiles(data(**{"ml-research": {"client_id": MLR_ID.upper(), "tenant_id": TENANT.upper()}}))
    assert cfg.teams["ml-research"].identity.client_id == MLR_ID
    assert cfg.teams["ml-research"].identity.tenant_id == TENANT


# ---------------------------------------------------------------------------------------------- objects
def test_the_team_account_is_in_the_hub_namespace_and_the_teams_with_the_annotations():
    cfg = parse_profiles(data(**{"ml-research": {"client_id": MLR_ID, "tenant_id": TENANT}}))
    sas = [o for o in render_kueue(cfg, "hubns") if o["kind"] == "ServiceAccount"]
    assert sas == service_accounts(cfg, "hubns")
    assert sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in sas) == [
        ("hubns", ACCOUNT), ("team-mlr", ACCOUNT)]
    for sa in sas:
        assert sa["metadata"]["annotations"] == {WI_CLIENT_ID: MLR_ID, WI_TENANT_ID: TENANT}
        assert sa["automountServiceAccountToken"] is False
    kinds = [o["kind"] for o in render_kueue(cfg, "hubns")]
    assert kinds.index("ServiceAccount") > kinds.index("Namespace")  # the team's namespace exists first


def test_no_identity_no_account_and_the_hub_and_gpu_jobs_get_nothing_extra():
    with_id, without = parse_profiles(EXAMPLE), parse_profiles(data(**{"ml-research": None}))
    assert not service_accounts(without, "jhub") and not federated_credentials(without, "jhub")
    assert deploy.render_rbac(with_id) == deploy.render_rbac(without)
    assert deploy.hub_permissions(with_id) == deploy.hub_permissions(without)
    assert ([o for o in render_kueue(with_id) if o["kind"] != "ServiceAccount"] == render_kueue(without))


# ---------------------------------------------------------------------------------------------- pods
def job_pod(cfg, groups, slug="a100-spot", nodes=None):
    if nodes:
        (obj, _cm) = build_jobset(cfg, cfg.profile(slug), "alice", groups, "a.ipynb", NB, nodes)
        return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    (job, _cm) = build_job(cfg, cfg.profile(slug), "alice", groups, "a.ipynb", NB, name="gpu-alice-a-abc123")
    return job["spec"]["template"], job


def test_a_teams_jobs_run_as_its_account_with_the_label_and_no_api_token():
    cfg = parse_profiles(EXAMPLE)
    template, job = job_pod(cfg, ["ml-research"])
    assert template["spec"]["serviceAccountName"] == ACCOUNT
    assert template["spec"]["automountServiceAccountToken"] is False
    assert template["metadata"]["labels"][WI_USE] == "true"
    assert WI_USE not in job["metadata"]["labels"]  # the pod's label only: the webhook mutates pods
    gang = job_pod(cfg, ["ml-research"], "h100-full", nodes=2)
    assert gang["spec"]["serviceAccountName"] == ACCOUNT and gang["metadata"]["labels"][WI_USE] == "true"


def test_a_job_of_a_team_without_identity_is_exactly_as_before():
    with_id, without = parse_profiles(EXAMPLE), parse_profiles(data(**{"ml-research": None}))
    for slug in ("t4-shared", "a100-mig-1g10gb"):
        a, b = job_pod(with_id, ["data-science"], slug)[0], job_pod(without, ["data-science"], slug)[0]
        assert a == b and "serviceAccountName" not in a["spec"]


async def test_a_teams_server_runs_as_its_account_and_the_gpu_check_is_left_alone():
    pod = await pod_manifest(EXAMPLE_PROFILES, "a100-spot", "rhea", ["ml-research"])
    assert pod["spec"]["serviceAccountName"] == ACCOUNT
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["metadata"]["labels"][WI_USE] == "true"
    assert pod["metadata"]["annotations"][WI_SKIP_CONTAINERS] == GPU_CHECK_CONTAINER
    assert GPU_CHECK_CONTAINER in {c["name"] for c in pod["spec"]["initContainers"]}
    cpu = await pod_manifest(EXAMPLE_PROFILES, "cpu", "rhea", ["ml-research"])  # every server of the team
    assert cpu["spec"]["serviceAccountName"] == ACCOUNT and cpu["metadata"]["labels"][WI_USE] == "true"


async def test_a_server_of_a_team_without_identity_is_exactly_as_before(tmp_path):
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(data(**{"ml-research": None})))
    for groups in (["data-science"], ["data-science", "ml-research"], []):  # first team in file order; default
        a = await pod_manifest(EXAMPLE_PROFILES, "cpu", "alice", groups)
        b = await pod_manifest(plain, "cpu", "alice", groups)
        assert a == b and "serviceAccountName" not in a["spec"] and WI_USE not in a["metadata"]["labels"]


@settings(max_examples=60, deadline=None)
@given(groups=st.lists(st.sampled_from(["data-science", "ml-research", "teaching", "other"]), unique=True),
       default=st.sampled_from(["data-science", "ml-research", None]))
def test_servers_and_jobs_of_a_user_get_their_own_teams_identity_or_none(groups, default):
    d = data(**{"data-science": {"client_id": DS_ID}})
    for name, team in d["teams"].items():
        team["default"] = name == default
    cfg = parse_profiles(d)
    ident = pod_identity(cfg, groups)
    found = cfg.team_for(groups)  # the user's team: the one rule quotas, servers and jobs share
    if found is None or found[0] not in groups:  # no team, or the default one by falling back: never its identity
        assert ident is None
        return
    assert ident.team == found[0] and ident.service_account == f"gpuhub-{found[0]}-identity"
    assert ident.identity.client_id == found[1].identity.client_id
    template, _ = job_pod(cfg, groups, "t4-shared")  # a profile everyone may use
    assert template["spec"]["serviceAccountName"] == ident.service_account
    namespaces = {sa["metadata"]["namespace"] for sa in service_accounts(cfg, "jhub")
                  if sa["metadata"]["name"] == ident.service_account}
    assert namespaces == {"jhub", found[1].namespace}  # the account exists where its pods run, nowhere else


# ---------------------------------------------------------------------------------------------- the script
def test_the_script_creates_one_federated_credential_per_team_and_namespace(tmp_path):
    """deploy/workload-identity.sh run against a fake `az`: the exact calls, the file's words quoted."""
    cfg = parse_profiles(data(**{"data-science": {"client_id": DS_ID, "service_account": "ds.wi"}}))
    script = tmp_path / "wi.sh"
    script.write_text(deploy.generated_files(cfg, "x.yaml", "hubns")["workload-identity.sh"])
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "az").write_text("#!/bin/sh\nprintf '%s\\n' \"$*\" >> \"$AZ_LOG\"\n"
                             "case \"$*\" in 'aks show'*) echo https://issuer.example/abc/ ;;\n"
                             f"  *{DS_ID}*) echo ds-identity ;; *{MLR_ID}*) echo mlr-identity ;; esac\n")
    (fake / "az").chmod(0o755)
    log = tmp_path / "az.log"
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "AZ_LOG": str(log), "RESOURCE_GROUP": "rg",
           "CLUSTER": "aks1"}
    subprocess.run(["bash", str(script)], env=env, check=True, timeout=30)
    calls = log.read_text().splitlines()
    assert calls[0] == "aks show --name aks1 --resource-group rg --query oidcIssuerProfile.issuerUrl -o tsv"
    creates = [c for c in calls if c.startswith("identity federated-credential create")]
    common = "--resource-group rg --issuer https://issuer.example/abc/"
    assert creates == [
        f"identity federated-credential create --name gpuhub-data-science-servers --identity-name ds-identity {common}"
        " --subject system:serviceaccount:hubns:ds.wi --audience api://AzureADTokenExchange",
        f"identity federated-credential create --name gpuhub-data-science-jobs --identity-name ds-identity {common}"
        " --subject system:serviceaccount:team-ds:ds.wi --audience api://AzureADTokenExchange",
        f"identity federated-credential create --name gpuhub-ml-research-servers --identity-name mlr-identity "
        f"{common} --subject system:serviceaccount:hubns:{ACCOUNT} --audience api://AzureADTokenExchange",
        f"identity federated-credential create --name gpuhub-ml-research-jobs --identity-name mlr-identity "
        f"{common} --subject system:serviceaccount:team-mlr:{ACCOUNT} --audience api://AzureADTokenExchange",
    ]
    assert any(c.startswith("identity list --resource-group rg --query [?clientId=='" + DS_ID) for c in calls)


def test_the_script_stops_when_no_managed_identity_has_the_client_id(tmp_path):
    script = tmp_path / "wi.sh"
    script.write_text(deploy.generated_files(parse_profiles(EXAMPLE), "x.yaml")["workload-identity.sh"])
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "az").write_text("#!/bin/sh\ncase \"$*\" in 'identity federated'*) touch \"$MARK\" ;; esac\n")
    (fake / "az").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "RESOURCE_GROUP": "rg", "CLUSTER": "c",
           "MARK": str(tmp_path / "created")}
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert run.returncode != 0 and f"no managed identity with client id {MLR_ID}" in run.stderr
    assert not (tmp_path / "created").exists()


def test_without_identities_the_script_creates_nothing():
    text = deploy.render_identity_script(parse_profiles(data(**{"ml-research": None})))
    assert "nothing to create" in text and "az identity" not in text


def test_a_user_of_no_team_never_gets_the_default_teams_identity_unless_it_opts_in():
    """Issue 50 item 4: falling back to the default team (for quota) handed its Azure identity to anyone."""
    d = data(**{"data-science": {"client_id": DS_ID}})
    cfg = parse_profiles(d)
    assert cfg.teams["data-science"].default and cfg.team_for(["teaching"])[0] == "data-science"
    assert pod_identity(cfg, ["teaching"]) is None and pod_identity(cfg, []) is None
    assert pod_identity(cfg, ["data-science"]).team == "data-science"
    template, _ = job_pod(cfg, ["teaching"], "t4-shared")
    assert "serviceAccountName" not in template["spec"]
    d["teams"]["data-science"]["identity_for_users_in_no_team"] = True  # the admin's choice, by name
    assert pod_identity(parse_profiles(d), ["teaching"]).team == "data-science"


def test_only_a_default_team_with_an_identity_may_give_it_to_users_of_no_team():
    d = data()
    d["teams"]["ml-research"]["identity_for_users_in_no_team"] = True  # not the default team
    (problem,) = problems(d)
    assert problem.startswith("teams.ml-research.identity_for_users_in_no_team:") and "only a default team" in problem
    d = data(**{"ml-research": None})
    d["teams"]["data-science"]["identity_for_users_in_no_team"] = True  # default, but no identity
    (problem,) = problems(d)
    assert problem.startswith("teams.data-science.identity_for_users_in_no_team:")
