"""Warm capacity on AKS (builders/warm_capacity.py): the CronJobs change each pool's autoscaler minimum exactly when
the schedule's step function does, with no Kubernetes RBAC and nothing from the profiles file in the script."""
from __future__ import annotations

import copy
import re

import yaml

from gpu_spawner.builders import deploy
from gpu_spawner.builders import warm_capacity as WC
from gpu_spawner.model import warm_schedule as W
from gpu_spawner.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from gpu_spawner.model.validation import parse_profiles

BASE = yaml.safe_load(EXAMPLE_PROFILES.read_text())


def cfg_with(**warm_by_pool):
    data = copy.deepcopy(BASE)
    for pool in data["pools"].values():
        pool.pop("warm", None)
    for name, warm in warm_by_pool.items():
        data["pools"][name]["warm"] = warm
    return parse_profiles(data)


def test_the_example_renders_two_changes_a_day_for_its_t4_pool():
    objs = WC.render_warm_capacity(load_profiles(EXAMPLE_PROFILES))
    kinds = [o["kind"] for o in objs]
    assert kinds == ["Namespace", "ServiceAccount", "ConfigMap", "CronJob", "CronJob"]
    jobs = [o for o in objs if o["kind"] == "CronJob"]
    assert [(j["spec"]["schedule"], j["spec"]["timeZone"]) for j in jobs] == [
        ("0 8 * * 1,2,3,4,5", "Europe/Berlin"), ("0 18 * * 1,2,3,4,5", "Europe/Berlin")]
    env = [{e["name"]: e.get("value") for e in j["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
            ["env"]} for j in jobs]
    assert [(e["NODEPOOL"], e["MIN_COUNT"], e["MAX_COUNT"]) for e in env] == [("gput4", "1", "4"), ("gput4", "0", "4")]


def test_least_privilege():
    objs = WC.render_warm_capacity(load_profiles(EXAMPLE_PROFILES))
    assert not [o for o in objs if o["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")]
    (sa,) = [o for o in objs if o["kind"] == "ServiceAccount"]
    assert sa["automountServiceAccountToken"] is False and WC.WI_CLIENT_ID in sa["metadata"]["annotations"]
    for job in (o for o in objs if o["kind"] == "CronJob"):
        pod = job["spec"]["jobTemplate"]["spec"]["template"]
        assert pod["metadata"]["labels"][WC.WI_USE] == "true"
        spec = pod["spec"]
        assert spec["serviceAccountName"] == WC.ACCOUNT and spec["automountServiceAccountToken"] is False
        (c,) = spec["containers"]
        assert c["command"] == ["bash", "-ceu", WC.SCRIPT]  # constant: values only through the environment
        assert c["securityContext"]["readOnlyRootFilesystem"] and c["securityContext"]["capabilities"] == {
            "drop": ["ALL"]}
    assert WC.AZURE_ROLE["Actions"] == ["Microsoft.ContainerService/managedClusters/agentPools/read",
                                        "Microsoft.ContainerService/managedClusters/agentPools/write"]


def test_the_headers_commands_quote_the_admins_variables():
    header = deploy.warm_capacity_header(load_profiles(EXAMPLE_PROFILES))
    cmds = [line for line in header.splitlines() if "az aks nodepool update" in line]
    assert len(cmds) == 2
    for line in cmds:
        assert '--resource-group "$RESOURCE_GROUP" --cluster-name "$CLUSTER"' in line, line


def test_no_warm_pool_renders_nothing_to_apply():
    cfg = cfg_with()
    assert WC.render_warm_capacity(cfg) == [] and WC.warm_commands(cfg) == []
    text = deploy.generated_files(cfg, "x.yaml")["warm-capacity.yaml"]
    assert "nothing to apply" in text and not [d for d in yaml.safe_load_all(text) if d]


def test_jobs_and_commands_agree_with_the_step_function_for_several_pools():
    cfg = cfg_with(gput4=[{"days": "Mon-Fri", "from": "07:45", "to": "12:00", "nodes": 2},
                          {"days": "Mon-Fri", "from": "12:00", "to": "19:30", "nodes": 1}],
                   spota100=[{"days": "Sat", "from": "10:00", "to": "24:00", "nodes": 1}])
    objs = WC.render_warm_capacity(cfg)
    jobs = [o for o in objs if o["kind"] == "CronJob"]
    names = [j["metadata"]["name"] for j in jobs]
    assert len(set(names)) == len(names) and all(len(n) <= 52 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", n)
                                                  for n in names)
    cmds = WC.warm_commands(cfg)
    assert len(cmds) == len(jobs)
    for (pool, _, words), job in zip(cmds, jobs):
        env = {e["name"]: e.get("value") for e in job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
               ["containers"][0]["env"]}
        assert words[words.index("--name") + 1] == env["NODEPOOL"] == job["metadata"]["labels"]["gpuhub/pool"]
        assert words[words.index("--min-count") + 1] == env["MIN_COUNT"]
    # each pool: the CronJobs' (day, time, value), applied through a week, give the model's minimum
    for pool_name in ("gput4", "spota100"):
        pool = cfg.pools[pool_name]
        events = sorted((d * 1440 + W.minutes(c.at), c.min_count) for c in W.changes(pool) for d in c.days)
        mine = [j for j in jobs if j["metadata"]["labels"]["gpuhub/pool"] == pool_name]
        assert len(mine) == len(W.changes(pool))
        value = events[-1][1]
        for t in range(0, W.WEEK_MIN, 15):
            value = next((v for at, v in events if at == t), value)
            assert value == W.minimum_at_minute(pool, t)
    assert [c.cron for c in W.changes(cfg.pools["gput4"])] == ["45 7 * * 1,2,3,4,5", "0 12 * * 1,2,3,4,5",
                                                               "30 19 * * 1,2,3,4,5"]
    assert [c.cron for c in W.changes(cfg.pools["spota100"])] == ["0 0 * * 0", "0 10 * * 6"]
