"""The picker's team line on the real hub and dev cluster (issue 28 item 9): a team whose one T4 slot of
quota a Job holds (Kueue admitted it) sees, on the T4 card, that the team, not the pool, is the limit, while the
pool still has free slots; the number comes from the hub's ClusterQueue watch. One small team of its own (no
cohort), so nothing else of the suite shares its quota."""
from __future__ import annotations

import secrets

import pytest
import yaml
from cluster.test_kueue_admission import admitted, job
from e2e.test_hub import cards

from jupyterhub_gpu.builders.kueue import render_kueue
from jupyterhub_gpu.contract import KUEUE_GROUP, KUEUE_VERSION
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu_dev.devhub import NAMESPACE, login
from jupyterhub_gpu_dev.testing import hub_with_agent, wait_until

pytestmark = pytest.mark.cluster

TEAM, QUEUE_NS = "qr-full", "team-qr"
TEAMS = {TEAM: {"namespace": QUEUE_NS, "quota": {"gput4": 1}}}
GROUPS = {"qr1": [TEAM]}


def active(cluster) -> bool:
    cq = cluster.custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", f"team-{TEAM}")
    conditions = (cq.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def team_hub(cluster, tmp_path_factory):
    data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    data["teams"] = {**TEAMS, **data["teams"]}
    path = tmp_path_factory.mktemp("teamroom") / "profiles.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    objs = [o for o in render_kueue(load_profiles(path), NAMESPACE)
            if o["metadata"]["name"] in (TEAM, f"team-{TEAM}", QUEUE_NS)]  # only the test team's own objects
    kube = cluster.kube()
    for obj in objs:
        kube.apply(obj)
    wait_until(lambda: active(cluster), 60, "the test team's ClusterQueue")
    token = secrets.token_hex(16)
    try:
        with hub_with_agent(cluster, tmp_path_factory.mktemp("teamroomhub"), path, GROUPS,
                            {"team-room-tests": token}) as (dev, agent):
            yield dev.settings.url
    finally:
        for obj in reversed(objs):
            if obj["kind"] != "Namespace":
                kube.delete(obj)
        kube.close()
        cluster.clean(QUEUE_NS)
        cluster.core.delete_namespace(QUEUE_NS)


def test_a_team_at_its_quota_is_the_limit_while_the_pool_has_free_slots(team_hub, cluster):
    session = login(team_hub, "qr1")

    def card() -> dict:
        return cards(session.get(f"{team_hub}/hub/spawn", timeout=30).text).get("t4-shared", {})

    before = wait_until(lambda: (c := card()) and "free in quota" in c.get("text", "") and c, 30,
                        "the team line with the quota read")
    assert f"your team ({TEAM}): 1 of 1 T4 time-slices free in quota" in before["text"], before
    assert "starts right away" in before["text"] and int(before["free"]) > 1, before

    name = f"job-{secrets.token_hex(3)}"
    try:
        cluster.create(job(name, QUEUE_NS, TEAM, "nvidia.com/gpu"))
        wait_until(lambda: admitted(cluster, QUEUE_NS, name), 60, "Kueue to admit the team's job")
        after = wait_until(lambda: (c := card()) and "waits for your team's quota" in c.get("text", "") and c, 30,
                           "the card saying the team is the limit")
        assert "waits for your team's quota (1 of 1 in use)" in after["text"], after
        assert "starts right away" not in after["text"], after
        assert int(after["free"]) > 0, after  # the pool itself still has room: the team is the limit
        assert 'data-team-limit="true"' in session.get(f"{team_hub}/hub/spawn", timeout=30).text
    finally:
        cluster.clean(QUEUE_NS)
