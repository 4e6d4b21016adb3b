"""A multi-node job's own NetworkPolicy (builders/network.py `jobset_ranks_policy`): its ranks take
connections from each other only, never from another user's JobSet in the same team namespace (torch's
rendezvous store on rank 0's MASTER_PORT is unauthenticated and unpickles). The dev-cluster half:
tests/jobs/test_multinode_cluster.py."""
from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.builders.jobsets import build_jobset
from jupyterhub_gpu.builders.network import NAME_LIMIT, jobset_ranks_policy, ranks_policy_name, render_network_policies
from jupyterhub_gpu.contract import JOBSET_API, JOBSET_NAME_LABEL
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

NB = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.fixture(scope="module")
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def created(cfg, user: str, uid: str) -> dict:
    """A JobSet as the API server returns it (with its uid)."""
    jobset, _ = build_jobset(cfg, cfg.by_slug["h100-full"], user, ["ml-research"], "train.ipynb", NB, nodes=2)
    jobset["metadata"]["uid"] = uid
    return jobset


def selects(selector: dict, labels: dict) -> bool:
    """A label selector's meaning (matchLabels and matchExpressions), as the network plugin applies it."""
    ok = all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())
    for e in selector.get("matchExpressions", []):
        ok &= {"Exists": e["key"] in labels, "In": labels.get(e["key"]) in e.get("values", []),
               "DoesNotExist": e["key"] not in labels}[e["operator"]]
    return ok


def test_the_policy_selects_and_admits_only_its_own_gang(cfg):
    mine, other = created(cfg, "alice", "uid-a"), created(cfg, "bob", "uid-b")
    pol = jobset_ranks_policy(mine)
    name = mine["metadata"]["name"]
    assert pol["kind"] == "NetworkPolicy" and pol["metadata"]["namespace"] == mine["metadata"]["namespace"]
    spec = pol["spec"]
    assert spec["podSelector"] == {"matchLabels": {JOBSET_NAME_LABEL: name}}
    assert spec["policyTypes"] == ["Ingress"]  # egress stays as gpuhub-job-pods says (no metadata endpoints)
    (rule,) = spec["ingress"]
    assert "ports" not in rule  # any port (torch's store, NCCL's own), but only ...
    assert rule["from"] == [{"podSelector": {"matchLabels": {JOBSET_NAME_LABEL: name}}}]  # ... from the same gang,
    # in the same namespace (no namespaceSelector, no ipBlock)
    my_rank = {JOBSET_NAME_LABEL: name, "jobset.sigs.k8s.io/job-index": "1"}
    their_rank = {JOBSET_NAME_LABEL: other["metadata"]["name"], "jobset.sigs.k8s.io/job-index": "0"}
    peer = rule["from"][0]["podSelector"]
    assert selects(spec["podSelector"], my_rank) and not selects(spec["podSelector"], their_rank)
    assert selects(peer, my_rank) and not selects(peer, their_rank) and not selects(peer, {})


def test_the_policy_is_owned_by_its_jobset(cfg):
    jobset = created(cfg, "alice", "0b5e0c1e-uid")
    (ref,) = jobset_ranks_policy(jobset)["metadata"]["ownerReferences"]
    assert ref["apiVersion"] == JOBSET_API and ref["kind"] == "JobSet"
    assert ref["name"] == jobset["metadata"]["name"] and ref["uid"] == "0b5e0c1e-uid"
    with pytest.raises(KeyError):  # not before the JobSet exists: the garbage collector needs its uid
        jobset_ranks_policy({**jobset, "metadata": {k: v for k, v in jobset["metadata"].items() if k != "uid"}})


@given(st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True))
def test_policy_names_are_dns_labels_of_at_most_63_characters(jobset):
    name = ranks_policy_name(jobset)
    assert len(name) <= NAME_LIMIT and DNS_LABEL.match(name), name
    if len(f"gpuhub-ranks-{jobset}") <= NAME_LIMIT:
        assert name == f"gpuhub-ranks-{jobset}"


def test_long_names_that_share_a_prefix_get_different_policies():
    a, b = "x" * 60 + "-a", "x" * 60 + "-b"
    assert ranks_policy_name(a) != ranks_policy_name(b)
    assert len(ranks_policy_name(a)) == NAME_LIMIT


def test_no_namespace_wide_policy_opens_jobset_pods(cfg):
    """The rendered deploy policies let no pod of a team namespace take connections (gpuhub-job-ranks is
    gone): the only way into a rank is its own gang's policy."""
    teams = {t.namespace for t in cfg.teams.values()}
    team_pols = [p for p in render_network_policies(cfg, "jhub") if p["metadata"]["namespace"] in teams]
    assert team_pols and all(p["spec"]["ingress"] == [] for p in team_pols)
    assert not any("job-ranks" in p["metadata"]["name"] for p in render_network_policies(cfg, "jhub"))
