"""Kueue objects rendered from the example file: quota per pool resource, cohort, borrowing, flavors."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.builders.kueue import render_kueue, server_queue_labels
from jupyterhub_gpu.contract import PRIORITY_LABEL
from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles


def objects(kind):
    return {o["metadata"]["name"]: o for o in render_kueue(load_profiles(EXAMPLE_PROFILES)) if o["kind"] == kind}


def quota(cq, flavor, resource):
    fl = next(f for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"] == flavor)
    return next(r for r in fl["resources"] if r["name"] == resource)


def test_flavor_per_gpu_pool_with_labels_and_tolerations():
    flavors = objects("ResourceFlavor")
    assert set(flavors) == {"gput4", "gpumig", "gpuh100", "spota100", "gput4mps"}
    spot = flavors["spota100"]["spec"]
    assert spot["nodeLabels"] == {"kubernetes.azure.com/agentpool": "spota100"}
    assert {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot",
            "effect": "NoSchedule"} in spot["tolerations"]


def test_every_flavor_lists_every_covered_resource():
    for cq in objects("ClusterQueue").values():
        (group,) = cq["spec"]["resourceGroups"]
        for flavor in group["flavors"]:
            assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]


def test_team_quota_in_the_pools_resource_name_with_cpu_memory_share():
    cq = objects("ClusterQueue")["team-data-science"]
    assert cq["spec"]["cohortName"] == "gpu"
    # the team's Jobs and its servers in the hub namespace (Kueue's pod integration) share the quota
    assert cq["spec"]["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["jhub", "team-ds"]}]}
    assert quota(cq, "gpumig", "nvidia.com/mig-1g.10gb") == {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 14,
                                                             "borrowingLimit": 4}
    # 14 of 7 slices per NC24ads_A100_v4, whose pods get 23.66 of its 24 vCPUs (AKS reserves the rest)
    assert quota(cq, "gpumig", "cpu")["nominalQuota"] == "47320m"
    assert quota(cq, "gpumig", "nvidia.com/gpu")["nominalQuota"] == 0
    assert quota(cq, "gput4", "nvidia.com/gpu")["nominalQuota"] == 8
    # data-science has no H100 quota but shares a cohort with ml-research, so it may borrow
    assert quota(cq, "gpuh100", "nvidia.com/gpu") == {"name": "nvidia.com/gpu", "nominalQuota": 0,
                                                      "borrowingLimit": 4}


def test_local_queue_in_team_namespace_and_priorities():
    lqs = [o for o in render_kueue(load_profiles(EXAMPLE_PROFILES)) if o["kind"] == "LocalQueue"]
    ds = {o["metadata"]["namespace"]: o for o in lqs if o["metadata"]["name"] == "data-science"}
    assert set(ds) == {"team-ds", "jhub"}  # its Jobs' queue, and its servers' queue in the hub namespace
    assert {o["spec"]["clusterQueue"] for o in ds.values()} == {"team-data-science"}
    # the jobs' classes, and the servers' above them all (offset: the spread of the job values + 1)
    assert {n: o["value"] for n, o in objects("WorkloadPriorityClass").items()} == {
        "low": 100, "normal": 1000, "high": 10000,
        "gpuhub-server-low": 10001, "gpuhub-server-normal": 10901, "gpuhub-server-high": 19901}
    pcs = objects("PriorityClass")
    assert set(pcs) == {"gpuhub-low", "gpuhub-normal", "gpuhub-high"}
    # interactive servers queue by priority but never evict someone else's running server
    assert {pc["preemptionPolicy"] for pc in pcs.values()} == {"Never"}


def with_priorities(priorities: dict[str, int]) -> ProfilesConfig:
    data = load_profiles(EXAMPLE_PROFILES).model_dump(exclude_unset=True)
    data.update(priorities=priorities, default_priority=min(priorities, key=priorities.__getitem__),
                group_max_priority={})
    for p in data["profiles"]:
        p.pop("priority", None), p.pop("max_priority", None)
    return ProfilesConfig.model_validate(data)


@given(st.dictionaries(st.from_regex(r"[a-z]{1,8}", fullmatch=True), st.integers(-10**8, 10**9),
                       min_size=1, max_size=5))
def test_every_server_class_is_above_every_job_class_in_the_same_order(priorities):
    """Within a ClusterQueue (`LowerPriority`) a job can then never preempt a running server, while a server
    still goes ahead of (or preempts) a server of a lower priority as before."""
    cfg = with_priorities(priorities)
    values = {o["metadata"]["name"]: o["value"] for o in render_kueue(cfg) if o["kind"] == "WorkloadPriorityClass"}
    jobs = {n: values[n] for n in priorities}
    servers = {n: values[f"gpuhub-server-{n}"] for n in priorities}
    assert len(values) == 2 * len(priorities) and jobs == priorities
    assert min(servers.values()) > max(jobs.values())
    assert all(values[n] < 2**31 for n in values)  # Kueue's int32
    for a in priorities:
        for b in priorities:
            assert (servers[a] > servers[b]) == (jobs[a] > jobs[b])
            assert (servers[a] == servers[b]) == (jobs[a] == jobs[b])


def test_a_server_pods_label_names_a_rendered_server_class():
    cfg = load_profiles(EXAMPLE_PROFILES)
    rendered = {o["metadata"]["name"]: o["value"] for o in render_kueue(cfg) if o["kind"] == "WorkloadPriorityClass"}
    labels = [server_queue_labels(cfg, p, [team])[PRIORITY_LABEL] for p in cfg.profiles for team in cfg.teams
              if server_queue_labels(cfg, p, [team])]
    assert labels and all(name.startswith("gpuhub-server-") and name in rendered for name in labels)
    assert min(rendered[name] for name in labels) > max(cfg.priorities.values())
