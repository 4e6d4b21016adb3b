"""Per-user limits and priority ceilings on a real gpu-jobs (cluster tier: real hub, CHP, gpu-jobs, dev
cluster, Kueue): parallel submissions cannot pass a cap together, nobody picks a priority above their
ceiling, and a job without a priority still carries one (so Kueue never ranks it below `low`)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from .api_hub import api_hub, clean_teams, write_profiles

pytestmark = pytest.mark.cluster

CAP = 3
GROUPS = {"paula": ["data-science"], "mia": ["data-science"], "rita": ["ml-research"],
          "lena": ["ml-research", "leads"], "nora": ["data-science"]}


def edit(data: dict) -> None:
    data["group_max_priority"] = {"leads": "high"}
    for p in data["profiles"]:
        if p["slug"] == "t4-shared":
            p.pop("priority", None)  # no priority here: the file's default (normal) applies
            p.pop("max_priority", None)


@pytest.fixture(scope="module")
def hub(cluster, tmp_path_factory):
    profiles = write_profiles(cluster, tmp_path_factory.mktemp("limitprofiles") / "profiles.yaml", edit)
    with api_hub(cluster, tmp_path_factory.mktemp("limithub"), profiles, GROUPS,
                 (f"--max-jobs-per-user={CAP}", "--submissions-in-flight=8")) as h:  # the race, not the 429
        yield h


@pytest.fixture
def clean(cluster):
    yield
    clean_teams(cluster)


def jobs_of(cluster, user: str, ns: str = "team-ds") -> list:
    return [j for j in cluster.batch.list_namespaced_job(ns, label_selector="gpuhub.io/job").items
            if j.metadata.annotations.get("gpuhub.io/username") == user]


def parallel(hub, user: str, n: int, **kw) -> list:
    hub.token(user)  # log in once, before the race
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: hub.submit(user, **kw), range(n)))


def test_parallel_submissions_stop_at_the_per_user_cap(cluster, hub, clean):
    answers = parallel(hub, "paula", 8)
    codes = sorted(r.status_code for r in answers)
    assert codes == [201] * CAP + [400] * (8 - CAP), [(r.status_code, r.text[:200]) for r in answers]
    refused = [r.json()["message"] for r in answers if r.status_code == 400]
    assert all(f"the limit is {CAP} per user over all profiles" in m for m in refused), refused
    assert len(jobs_of(cluster, "paula")) == CAP
    # the cap counts every profile: a MIG job is refused too, until one is cancelled
    assert hub.submit("paula", profile="a100-mig-1g10gb").status_code == 400
    victim = next(r.json()["name"] for r in answers if r.status_code == 201)
    assert hub.call("paula", "DELETE", f"/jobs/{victim}").status_code == 200
    assert hub.submit("paula", profile="a100-mig-1g10gb").status_code == 201


def test_parallel_submissions_stop_at_the_profiles_max_per_user(cluster, hub, clean):
    answers = parallel(hub, "mia", 6, profile="a100-mig-1g10gb")  # max_per_user: 2
    assert sorted(r.status_code for r in answers) == [201, 201, 400, 400, 400, 400], \
        [(r.status_code, r.text[:200]) for r in answers]
    assert all("the limit is 2 per user" in r.json()["message"] for r in answers if r.status_code == 400)
    assert len(jobs_of(cluster, "mia")) == 2


def test_priority_ceilings_per_profile_and_group(cluster, hub, clean):
    # a100-spot: priority low and no max_priority: a member of ml-research may not raise it
    r = hub.submit("rita", profile="a100-spot", priority="normal")
    assert r.status_code == 400 and "above what you may pick on 'a100-spot'; allowed: low" in r.json()["message"]
    assert jobs_of(cluster, "rita", "team-mlr") == []
    # ... unless a group allows it (group_max_priority: {leads: high})
    r = hub.submit("lena", profile="a100-spot", priority="high")
    assert r.status_code == 201, r.text
    job = cluster.batch.read_namespaced_job(r.json()["name"], "team-mlr")
    assert job.metadata.labels["kueue.x-k8s.io/priority-class"] == "high"
    # the service tells each user what they may pick
    spot = next(p for p in hub.call("rita", "GET", "/profiles").json()["profiles"] if p["slug"] == "a100-spot")
    assert spot["priorities"] == ["low"] and spot["priority"] == "low"
    spot = next(p for p in hub.call("lena", "GET", "/profiles").json()["profiles"] if p["slug"] == "a100-spot")
    assert spot["priorities"] == ["low", "normal", "high"]


def test_a_job_without_priority_never_ranks_below_low(cluster, hub, clean):
    """t4-shared names no priority here: the job gets the file's default, and Kueue ranks it above `low`."""
    plain = hub.submit("nora")
    low = hub.submit("nora", priority="low")
    assert plain.status_code == 201 and low.status_code == 201, (plain.text, low.text)
    job = cluster.batch.read_namespaced_job(plain.json()["name"], "team-ds")
    assert job.metadata.labels["kueue.x-k8s.io/priority-class"] == "normal"
    wl = {n: cluster.wait_until(lambda n=n: cluster.workload_of("team-ds", n), 30, f"the Workload of {n}")
          for n in (plain.json()["name"], low.json()["name"])}
    assert wl[plain.json()["name"]]["spec"]["priority"] == 1000 > wl[low.json()["name"]]["spec"]["priority"] == 100


def test_a_server_on_a_profile_without_priority_gets_the_default_class(cluster, hub):
    """The `cpu` profile names no priority: its server pod still carries `gpuhub-normal`, which the real API
    server resolves to 1000 (a pod without a class would be 0, below servers of `low` profiles)."""
    hub.token("nora")  # logged in, groups set
    admin = hub.auth(hub.admin_token)
    r = requests.post(f"{hub.url}/hub/api/users/nora/server", headers=admin, json={"profile": "cpu"}, timeout=60)
    assert r.status_code in (201, 202), r.text
    try:
        pod = cluster.wait_until(lambda: cluster.core.list_namespaced_pod(
            "jhub", label_selector="hub.jupyter.org/username=nora").items, 60, "nora's server pod")[0]
        assert pod.spec.priority_class_name == "gpuhub-normal" and pod.spec.priority == 1000
    finally:
        requests.delete(f"{hub.url}/hub/api/users/nora/server", headers=admin, timeout=60)
