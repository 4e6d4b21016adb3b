"""`gpuhub doctor`'s home-share rows against claims and volumes written out as the API server returns them
(pure), and `gpuhub render storage` (what the fixes tell the admin to run)."""
from __future__ import annotations

import pytest
import yaml

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.tools.doctor import FAIL, OK
from jupyterhub_gpu.tools.doctor_storage import check_storage

NAMESPACES = ("jhub", "team-ds", "team-mlr")


@pytest.fixture(scope="module")
def cfg():
    return load_profiles(EXAMPLE_PROFILES)


def claim(ns, phase="Bound", modes=("ReadWriteMany",), labelled=True):
    return {"metadata": {"name": "gpuhub-home", "namespace": ns,
                         "labels": {"gpuhub.io/home-share": "true"} if labelled else {}},
            "spec": {"accessModes": list(modes), "volumeName": f"pv-{ns}", "storageClassName": ""},
            "status": {"phase": phase, "accessModes": list(modes)}}


def volume(ns, share="homes", policy="Retain"):
    return {"metadata": {"name": f"pv-{ns}"},
            "spec": {"persistentVolumeReclaimPolicy": policy, "accessModes": ["ReadWriteMany"],
                     "csi": {"driver": "file.csi.azure.com", "volumeHandle": f"rg#acct#{share}#{ns}",
                             "volumeAttributes": {"resourceGroup": "rg", "storageAccount": "acct",
                                                  "shareName": share, "protocol": "nfs"}}}}


def rows(cfg, claims, volumes):
    return {c.name: c for c in check_storage(cfg, claims, volumes, "jhub", "profiles.yaml")}


def test_one_labelled_rwx_share_bound_in_every_namespace_passes(cfg):
    out = rows(cfg, {ns: claim(ns) for ns in NAMESPACES}, {f"pv-{ns}": volume(ns) for ns in NAMESPACES})
    assert {n: c.status for n, c in out.items()} == {
        "claim jhub/gpuhub-home": OK, "claim team-ds/gpuhub-home": OK, "claim team-mlr/gpuhub-home": OK,
        "one share": OK}


@pytest.mark.parametrize("bad,needle,fix", [
    ({"claim": None}, "missing: jobs in team-ds", "gpuhub render storage profiles.yaml"),
    ({"claim": claim("team-ds", phase="Pending")}, "Pending, not Bound", "describe pvc"),
    ({"claim": claim("team-ds", modes=("ReadWriteOnce",))}, "not ReadWriteMany", "ReadWriteMany share"),
    ({"claim": claim("team-ds", labelled=False)}, "not labelled gpuhub.io/home-share=true", "label pvc"),
    ({"volume": volume("team-ds", policy="Delete")}, "deleting the claim deletes homes", "Retain"),
])
def test_each_storage_problem_fails_with_its_fix(cfg, bad, needle, fix):
    claims = {ns: claim(ns) for ns in NAMESPACES}
    volumes = {f"pv-{ns}": volume(ns) for ns in NAMESPACES}
    if "claim" in bad:
        claims["team-ds"] = bad["claim"]
    if "volume" in bad:
        volumes["pv-team-ds"] = bad["volume"]
    row = rows(cfg, claims, volumes)["claim team-ds/gpuhub-home"]
    assert row.status == FAIL and needle in row.detail and fix in row.fix, row


def test_claims_on_different_shares_fail(cfg):
    volumes = {f"pv-{ns}": volume(ns, share="homes" if ns != "team-mlr" else "scratch") for ns in NAMESPACES}
    row = rows(cfg, {ns: claim(ns) for ns in NAMESPACES}, volumes)["one share"]
    assert row.status == FAIL and "not on one share" in row.detail


def test_unreadable_claims_say_so(cfg):
    (row,) = check_storage(cfg, None, {}, "jhub", error="HTTP 403: forbidden")
    assert row.status == FAIL and "HTTP 403" in row.detail


def test_render_storage_prints_bound_pairs_for_the_hub_and_every_team(capsys):
    from jupyterhub_gpu.tools.cli import main

    assert main(["render", "storage", str(EXAMPLE_PROFILES), "--nfs", "10.0.0.4:/homes"]) == 0
    objs = list(yaml.safe_load_all(capsys.readouterr().out))
    claims = {o["metadata"]["namespace"]: o for o in objs if o["kind"] == "PersistentVolumeClaim"}
    assert set(claims) == set(NAMESPACES)
    pvs = {o["metadata"]["name"]: o for o in objs if o["kind"] == "PersistentVolume"}
    for ns, c in claims.items():
        pv = pvs[c["spec"]["volumeName"]]
        assert pv["spec"]["nfs"] == {"server": "10.0.0.4", "path": "/homes"}
        assert pv["spec"]["claimRef"]["namespace"] == ns
    # and doctor passes on exactly what render made
    cfg = load_profiles(EXAMPLE_PROFILES)
    bound = {ns: {**c, "status": {"phase": "Bound", "accessModes": ["ReadWriteMany"]}} for ns, c in claims.items()}
    assert all(r.status == OK for r in check_storage(cfg, bound, pvs, "jhub"))


@pytest.mark.parametrize("args,needle", [([], "exactly one of"), (["--nfs", "nohost"], "SERVER:/EXPORT"),
                                         (["--azure-files", "rg/acct"], "RESOURCE_GROUP/STORAGE_ACCOUNT/SHARE"),
                                         (["--nfs", "h:/x", "--azure-files", "a/b/c"], "exactly one of")])
def test_render_storage_refuses_an_unclear_share(args, needle, capsys):
    from jupyterhub_gpu.tools.cli import main

    assert main(["render", "storage", str(EXAMPLE_PROFILES), *args]) != 0
    assert needle in capsys.readouterr().err
