"""`gpuhub doctor`'s workload identity rows (pure): the webhook and each team's ServiceAccount, written out as the
API server returns them; no rows for a file whose teams have no identity."""
from __future__ import annotations

import copy

import pytest
import yaml

from jupyterhub_gpu.builders.identity import (
    WEBHOOK_CONFIGURATION,
    WEBHOOK_DEPLOYMENT,
    WI_CLIENT_ID,
    WI_TENANT_ID,
    service_accounts,
)
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.model.validation import parse_profiles
from jupyterhub_gpu.tools.doctor import FAIL, OK, SIMULATED, Snapshot, format_table, run_checks
from jupyterhub_gpu.tools.doctor_identity import check_identity, wanted

ACCOUNTS = [("jhub", "gpuhub-ml-research-identity"), ("team-mlr", "gpuhub-ml-research-identity")]
WEBHOOK = {"metadata": {"name": WEBHOOK_CONFIGURATION}}


@pytest.fixture(scope="module")
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def live(cfg):
    """The accounts as `kubectl apply` of `gpuhub render kueue` leaves them (the API server adds its fields)."""
    out = {}
    for sa in service_accounts(cfg, "jhub"):
        sa = copy.deepcopy(sa)
        sa["metadata"] |= {"uid": "u-1", "resourceVersion": "7", "creationTimestamp": "2026-12-03T10:00:00Z"}
        out[(sa["metadata"]["namespace"], sa["metadata"]["name"])] = sa
    return out


def rows(cfg, webhook=WEBHOOK, pods=None, accounts=None):
    return {c.name: c for c in check_identity(cfg, webhook, pods, live(cfg) if accounts is None else accounts,
                                               "jhub", "profiles.yaml")}


def test_the_webhook_and_the_teams_accounts_in_both_namespaces_pass(cfg):
    assert wanted(cfg, "jhub") == ACCOUNTS
    out = rows(cfg)
    assert {n: c.status for n, c in out.items()} == {
        "webhook": OK, "ServiceAccount jhub/gpuhub-ml-research-identity": OK,
        "ServiceAccount team-mlr/gpuhub-ml-research-identity": OK}


def test_the_webhooks_pods_are_enough_without_its_configuration_name(cfg):
    pods = [{"metadata": {"name": f"{WEBHOOK_DEPLOYMENT}-6d9c-x"}, "status": {"phase": "Running"}}]
    assert rows(cfg, webhook=None, pods=pods)["webhook"].status == OK
    pending = [{"metadata": {"name": f"{WEBHOOK_DEPLOYMENT}-6d9c-x"}, "status": {"phase": "Pending"}}]
    row = rows(cfg, webhook=None, pods=pending)["webhook"]
    assert row.status == FAIL and "--enable-workload-identity" in row.fix and "workload-identity.sh" in row.fix


def test_a_missing_account_fails_with_the_render_fix(cfg):
    accounts = live(cfg) | {ACCOUNTS[1]: None}
    row = rows(cfg, accounts=accounts)[f"ServiceAccount {ACCOUNTS[1][0]}/{ACCOUNTS[1][1]}"]
    assert row.status == FAIL and "cannot be created" in row.detail and "ml-research" in row.detail
    assert row.fix == "gpuhub render kueue profiles.yaml | kubectl apply --server-side -f -"


@pytest.mark.parametrize("annotations, needle", [
    ({}, f"{WI_CLIENT_ID} is None"),
    ({WI_CLIENT_ID: "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"}, "the file says '11111111-2222-3333-4444-555555555555'"),
    ({WI_CLIENT_ID: "11111111-2222-3333-4444-555555555555", WI_TENANT_ID: "99999999-8888-4777-8666-555555555555"},
     "the file names no tenant"),
])
def test_a_wrong_annotation_fails_naming_both_values(cfg, annotations, needle):
    accounts = live(cfg)
    accounts[ACCOUNTS[0]]["metadata"]["annotations"] = annotations
    row = rows(cfg, accounts=accounts)[f"ServiceAccount {ACCOUNTS[0][0]}/{ACCOUNTS[0][1]}"]
    assert row.status == FAIL and needle in row.detail and "render kueue" in row.fix


def test_the_client_id_compares_as_azure_does(cfg):
    accounts = live(cfg)
    accounts[ACCOUNTS[0]]["metadata"]["annotations"][WI_CLIENT_ID] = "11111111-2222-3333-4444-555555555555".upper()
    assert rows(cfg, accounts=accounts)[f"ServiceAccount {ACCOUNTS[0][0]}/{ACCOUNTS[0][1]}"].status == OK


def test_no_identity_no_rows_and_unreadable_says_what_to_allow(cfg):
    plain = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    plain["teams"]["ml-research"].pop("identity")
    assert check_identity(parse_profiles(plain), None, None, None, "jhub") == []
    (row,) = check_identity(cfg, None, None, None, "jhub", "f.yaml", "HTTP 403: forbidden")
    assert row.status == FAIL and "HTTP 403" in row.detail and "serviceaccounts" in row.fix


def test_run_checks_adds_the_rows_only_when_they_were_read(cfg):
    snap = Snapshot(nodes=[], crds={}, kueue={})
    assert not [c for c in run_checks(cfg, snap) if c.section == "identity"]
    snap.identity_webhook, snap.identity_accounts = None, live(cfg)
    table = format_table(run_checks(cfg, snap, "profiles.yaml"))
    assert "✗ identity" in table and "az aks update" in table


def test_on_the_dev_clusters_simulated_nodes_the_missing_webhook_is_said_not_failed(cfg):
    simulated = [{"metadata": {"name": "kwok-0", "labels": {"gpuhub.io/simulated": "true"}}}]
    snap = Snapshot(nodes=simulated, crds={}, kueue={}, identity_accounts=live(cfg))
    (hook,) = [c for c in run_checks(cfg, snap) if c.section == "identity" and c.name == "webhook"]
    assert hook.status == SIMULATED and not hook.failed
    snap.nodes = simulated + [{"metadata": {"name": "aks-gput4-0", "labels": {}}}]  # one real node: AKS's rules
    (hook,) = [c for c in run_checks(cfg, snap) if c.section == "identity" and c.name == "webhook"]
    assert hook.status == FAIL
