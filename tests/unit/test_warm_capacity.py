"""Warm capacity on AKS (builders/warm_capacity.py): the CronJobs change each pool's autoscaler minimum exactly when
the schedule's step function does, with no Kubernetes RBAC and nothing from the profiles file in the script."""
from __future__ import annotations

import copy
import re

import yaml

from jupyterhub_gpu.builders import deploy
from jupyterhub_gpu.builders import warm_capacity as WC
from jupyterhub_gpu.model import warm_schedule as W
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.model.validation import parse_profiles

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


# ---------------------------------------------------------------------------------------------- the job's script
FAKE_AZ = """#!/bin/sh
echo "$*" >> "$FAKE_DIR/az.log"
case "$1 $2 $3" in
  "login "*) exit 0 ;;
  "aks nodepool show") cat "$FAKE_DIR/min"; exit 0 ;;
  "aks nodepool update")
    n=$(cat "$FAKE_DIR/fails")
    if [ "$n" -gt 0 ]; then
      echo $((n - 1)) > "$FAKE_DIR/fails"
      echo "(Conflict) Operation is not allowed: another operation (Updating) is in progress. Status: 409" >&2
      exit 1
    fi
    while [ $# -gt 0 ]; do [ "$1" = --min-count ] && echo "$2" > "$FAKE_DIR/min"; shift; done
    exit 0 ;;
esac
exit 3
"""
FAKE_DATE = """#!/bin/sh
echo "$TZ $*" >> "$FAKE_DIR/date.log"
cat "$FAKE_DIR/now"
"""


def run_job(tmp_path, job, now=None, have="0", fails=0, **env_over):
    """The CronJob's container command run with bash against a fake `az` (and `date`, when `now` is given: the
    output of `date +'%u %H %M'` in the pool's zone) on PATH; returns (exit status, output, az calls, the pool's
    min-count after)."""
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("az", FAKE_AZ), ("date", FAKE_DATE)) if now else (("az", FAKE_AZ),):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "min").write_text(have + "\n")
    (tmp_path / "fails").write_text(str(fails))
    (tmp_path / "now").write_text((now or "") + "\n")
    (tmp_path / "token").write_text("a-token")
    for f in ("az.log", "date.log"):
        (tmp_path / f).write_text("")
    (c,) = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DIR": str(tmp_path), "RESOURCE_GROUP": "rg one",
           "CLUSTER": "aks", "AZURE_CLIENT_ID": "cid", "AZURE_TENANT_ID": "tid",
           "AZURE_FEDERATED_TOKEN_FILE": str(tmp_path / "token"),
           **{e["name"]: e["value"] for e in c["env"]}, "PAUSE_S": "0", **env_over}
    p = subprocess.run(c["command"], env=env, capture_output=True, text=True, timeout=60)
    calls = (tmp_path / "az.log").read_text().splitlines()
    return p.returncode, p.stdout + p.stderr, calls, (tmp_path / "min").read_text().strip()


def example_jobs():
    return [o for o in WC.render_warm_capacity(load_profiles(EXAMPLE_PROFILES)) if o["kind"] == "CronJob"]


def test_the_job_retries_a_409_until_the_update_goes_through(tmp_path):
    up, down = example_jobs()  # Mon-Fri 08:00 -> 1, 18:00 -> 0 (Europe/Berlin)
    rc, out, calls, after = run_job(tmp_path, down, now="5 18 00", have="1", fails=2)
    assert rc == 0 and after == "0", out
    updates = [c for c in calls if c.startswith("aks nodepool update")]
    assert len(updates) == 3 and "409" in out and "trying again" in out
    assert updates[-1].split() == ["aks", "nodepool", "update", "--resource-group", "rg", "one", "--cluster-name",
                                   "aks", "--name", "gput4", "--update-cluster-autoscaler", "--min-count", "0",
                                   "--max-count", "4", "--output", "none"]
    assert sum(c.startswith("login ") for c in calls) == 1 and "--federated-token a-token" in calls[0]
    assert (tmp_path / "date.log").read_text().startswith("Europe/Berlin ")  # read in the pool's zone
    # past its time budget it gives up, failed (the Job's deadline is longer than the script's)
    rc, out, calls, after = run_job(tmp_path, down, now="5 18 00", have="1", fails=99, TRY_FOR_S="0")
    assert rc == 1 and after == "1" and "not set to 0" in out
    spec = down["spec"]["jobTemplate"]["spec"]
    env = {e["name"]: e["value"] for e in spec["template"]["spec"]["containers"][0]["env"]}
    assert int(env["TRY_FOR_S"]) + 2 * int(env["PAUSE_S"]) < spec["activeDeadlineSeconds"] <= 3600


def test_the_job_sets_the_value_for_the_time_it_runs_whichever_change_it_is(tmp_path):
    up, down = example_jobs()
    for job in (up, down):  # either CronJob, run late or early, sets what the step function says now
        for now, want in (("1 08 05", "1"), ("3 17 59", "1"), ("5 18 00", "0"), ("6 09 00", "0"),
                          ("1 07 59", "0"), ("7 23 59", "0")):
            rc, out, calls, after = run_job(tmp_path, job, now=now, have="9")
            assert rc == 0 and after == want, (job["metadata"]["name"], now, out)
    # already right: nothing written
    rc, out, calls, after = run_job(tmp_path, up, now="2 10 00", have="1")
    assert rc == 0 and "already" in out and not [c for c in calls if c.startswith("aks nodepool update")]


def test_the_job_reads_the_real_clock_in_the_pools_zone_and_falls_back_without_zone_data(tmp_path):
    import pytest

    up, down = example_jobs()
    if not __import__("pathlib").Path("/usr/share/zoneinfo/Europe/Berlin").exists():
        pytest.skip("no system time zone data")
    from datetime import datetime, timezone
    pool = load_profiles(EXAMPLE_PROFILES).pools["gput4"]
    rc, out, calls, after = run_job(tmp_path, down, have="9")
    assert rc == 0 and after == str(W.minimum_at(pool, datetime.now(timezone.utc))), out
    rc, out, calls, after = run_job(tmp_path, up, have="9", WARM_TZ="Nowhere/Zone")  # this change's own value
    assert rc == 0 and after == "1" and "no time zone data" in out
    rc, out, calls, after = run_job(tmp_path, up, have="9", WARM_STEPS="0=1; rm -rf /")
    assert rc == 2 and after == "9" and not calls


def test_the_steps_env_is_the_step_function():
    pool = load_profiles(EXAMPLE_PROFILES).pools["gput4"]
    assert WC.steps_env(pool) == " ".join(f"{t}={v}" for t, v in W.steps(pool))
    assert WC.steps_env(pool).startswith("0=0 480=1 1080=0 1920=1 ")
