"""Interactive servers in their team's Kueue queue, the pure parts: who queues where, a server's place in
the queue and the sentences the spawn page shows, deadlines, and the failure record the home page reads."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.builders.kueue import queues_servers, server_queue, server_queue_labels
from jupyterhub_gpu.contract import KUEUE_ADMISSION_GATE, PRIORITY_LABEL, QUEUE_LABEL
from jupyterhub_gpu.hub import wait_messages
from jupyterhub_gpu.hub.queued_spawn import QueuedSpawnMixin, SpawnFailed, is_patience, merged
from jupyterhub_gpu.model.kueue_words import context_for
from jupyterhub_gpu.model.profiles import ProfilesConfig
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def cfg() -> ProfilesConfig:
    return load_profiles(EXAMPLE_PROFILES)


def with_settings(cfg: ProfilesConfig, pool: dict | None = None, profile: dict | None = None) -> ProfilesConfig:
    data = cfg.model_dump(exclude_unset=True)
    for name, value in (pool or {}).items():
        data["pools"][name]["queue_servers"] = value
    for p in data["profiles"]:
        if p["slug"] in (profile or {}):
            p["queue_servers"] = profile[p["slug"]]
    return ProfilesConfig.model_validate(data)


# ---------------------------------------------------------------------- who queues where
def test_gpu_profiles_queue_by_default_cpu_does_not(cfg):
    assert queues_servers(cfg, cfg.profile("t4-shared")) and queues_servers(cfg, cfg.profile("h100-full"))
    assert not queues_servers(cfg, cfg.profile("cpu"))


def test_profile_setting_wins_over_pool_setting(cfg):
    off = with_settings(cfg, pool={"gput4": False})
    assert not queues_servers(off, off.profile("t4-shared"))
    back_on = with_settings(cfg, pool={"gput4": False}, profile={"t4-shared": True})
    assert queues_servers(back_on, back_on.profile("t4-shared"))
    cpu_on = with_settings(cfg, pool={"system": True})
    assert queues_servers(cpu_on, cpu_on.profile("cpu"))


def test_labels_name_the_users_team_queue_and_the_profiles_priority(cfg):
    # the server class of the profile's priority (above every job's: a job never preempts a server)
    assert server_queue_labels(cfg, cfg.profile("t4-shared"), ["data-science"]) == {
        QUEUE_LABEL: "data-science", PRIORITY_LABEL: "gpuhub-server-normal"}
    assert server_queue_labels(cfg, cfg.profile("h100-full"), ["ml-research"]) == {
        QUEUE_LABEL: "ml-research", PRIORITY_LABEL: "gpuhub-server-high"}
    assert server_queue_labels(cfg, cfg.profile("cpu"), ["data-science"]) == {}


def test_no_team_or_a_pool_outside_the_teams_quota_is_not_queued(cfg):
    data = cfg.model_dump(exclude_unset=True)
    data["teams"] = {"ml-research": {"namespace": "team-mlr", "quota": {"gpuh100": 2}}}
    alone = ProfilesConfig.model_validate(data)
    # the team has no quota (nor a cohort to borrow from) on the T4 pool: Kueue could never admit it
    assert server_queue(alone, alone.profile("t4-shared"), ["ml-research"]) is None
    # a user in no team (and no default team) is scheduled as before
    assert server_queue(alone, alone.profile("h100-full"), ["visitors"]) is None
    assert server_queue(alone, alone.profile("h100-full"), ["ml-research"])[0] == "ml-research"


# ---------------------------------------------------------------------- place in the queue
def workload(name, created_s, owner=None, priority=0, admitted_s=None, ns="jhub", queue="ds"):
    wl = {"metadata": {"name": name, "namespace": ns,
                       "creationTimestamp": (T0 + timedelta(seconds=created_s)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "ownerReferences": [{"kind": "Pod", "name": owner or name}]},
          "spec": {"queueName": queue, "priority": priority}, "status": {}}
    if admitted_s is not None:
        at = (T0 + timedelta(seconds=admitted_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
        wl["status"]["conditions"] = [{"type": "QuotaReserved", "status": "True", "lastTransitionTime": at},
                                      {"type": "Admitted", "status": "True", "lastTransitionTime": at}]
    return wl


def cq(pending):
    return {"status": {"pendingWorkloads": pending}}


def test_place_among_the_teams_waiting_servers_and_the_queues_count(cfg):
    wls = [workload("pod-a", 0, "jupyter-a", admitted_s=1),          # running: not waiting
           workload("pod-b", 20, "jupyter-b"),
           workload("pod-me", 30, "jupyter-me"),
           workload("pod-late", 40, "jupyter-late"),
           workload("other-team", 5, "jupyter-x", queue="mlr")]     # another team's queue
    place = wait_messages.queue_place(wls, "jhub", "ds", "jupyter-me", cq(5), now=T0 + timedelta(seconds=60))
    assert (place.position, place.servers_waiting, place.in_queue) == (2, 3, 5)
    assert not place.eta.known  # one admission is no history
    text = wait_messages.queue_message("data-science", place, context_for(cfg, "team-ds", "t4-shared"))
    assert "yours is the 2nd of the team's 3 waiting servers (1 ahead of you); 5 servers and jobs wait" in text
    # Kueue has said nothing yet: no resource is named that it did not name
    assert "Your team's quota on the T4 pool is in use" in text and "No wait estimate yet" in text


def pending(wl, message):
    wl["status"]["conditions"] = [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                   "message": message}]
    return wl


def test_a_gpu_bound_wait_names_the_gpus(cfg):
    wl = pending(workload("pod-me", 0, "jupyter-me"), "couldn't assign flavors to pod set main: insufficient "
                 "unused quota for nvidia.com/gpu in flavor gput4, 1 more needed")
    place = wait_messages.queue_place([wl], "jhub", "ds", "jupyter-me", cq(1), flavor="gput4")
    text = wait_messages.queue_message("data-science", place, context_for(cfg, "team-ds", "t4-shared"))
    assert "Your team's 8 T4 slots are in use; you start as soon as one of the team's servers or jobs" in text


def test_a_cpu_bound_wait_names_cpu_with_the_live_queues_numbers_and_the_free_slices(cfg):
    """Kueue names cpu: the headline says CPU, with what the live ClusterQueue holds, never 'GPUs in use'."""
    wl = pending(workload("pod-me", 0, "jupyter-me", queue="mlr"), "couldn't assign flavors to pod set main: "
                 "flavor gput4 doesn't match node affinity, insufficient unused quota for cpu in flavor gpumig, "
                 "572m more needed")
    queue = {"spec": {"resourceGroups": [{"flavors": [{"name": "gpumig", "resources": [
                 {"name": "cpu", "nominalQuota": "3428m"}, {"name": "memory", "nominalQuota": "52Gi"},
                 {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 2}]}]}]},
             "status": {"pendingWorkloads": 1, "flavorsReservation": [{"name": "gpumig", "resources": [
                 {"name": "cpu", "total": "3"}, {"name": "nvidia.com/mig-1g.10gb", "total": "1"}]}]}}
    place = wait_messages.queue_place([wl], "jhub", "mlr", "jupyter-me", queue, flavor="gpumig")
    text = wait_messages.queue_message("ml-research", place, context_for(cfg, "team-mlr", "a100-mig-1g10gb"))
    assert ("Your team's CPU quota on the A100 80GB pool is used up: 3 of 3.43 CPUs in use, 0.572 CPUs more "
            "needed; 1 of 2 A100 80GB MIG slices is free; you start as soon as") in text, text
    assert "slices are in use" not in text and "GPU" not in text


def test_higher_priority_goes_first():
    wls = [workload("pod-me", 0, "jupyter-me"), workload("pod-urgent", 50, "jupyter-u", priority=10000)]
    assert wait_messages.queue_place(wls, "jhub", "ds", "jupyter-me").position == 2


def test_only_waiting_server_not_found_yet_and_unreadable():
    wls = [workload("pod-me", 0, "jupyter-me")]
    place = wait_messages.queue_place(wls, "jhub", "ds", "jupyter-me", None)
    assert place.in_queue is None
    assert "yours is the team's only waiting server." in wait_messages.queue_message("ds", place)
    missing = wait_messages.queue_place(wls, "jhub", "ds", "jupyter-other", cq(1))
    assert missing.position is None
    assert "being added" in wait_messages.queue_message("ds", missing)
    assert "cannot be read right now" in wait_messages.queue_message("ds", None)


def test_eta_from_the_queues_history():
    # ten past arrivals to a busy queue, each admitted 120 s after it came, 20 s after the one before it left
    wls = [workload(f"pod-{i}", 100 * i, f"jupyter-{i}", admitted_s=100 * i + 120) for i in range(10)]
    wls.append(workload("pod-me", 1000, "jupyter-me"))
    place = wait_messages.queue_place(wls, "jhub", "ds", "jupyter-me", cq(1), now=T0 + timedelta(seconds=1001))
    assert place.position == 1 and place.eta.known  # the wait estimator over the servers' own history
    estimated = f"Estimated wait: about {wait_messages.duration(place.eta.p50_s)}"
    assert estimated in wait_messages.queue_message("ds", place)


def test_gated_reads_kueues_admission_gate():
    assert wait_messages.gated({"spec": {"schedulingGates": [{"name": KUEUE_ADMISSION_GATE}]}})
    assert not wait_messages.gated({"spec": {"schedulingGates": [{"name": "example.com/other"}]}})
    assert not wait_messages.gated({"spec": {}}) and not wait_messages.gated(None)


@pytest.mark.parametrize("seconds,text", [(0, "0 s"), (59.6, "1 min"), (61, "1 min"), (3600, "1 h"),
                                          (3900, "1 h 5 min")])
def test_duration(seconds, text):
    assert wait_messages.duration(seconds) == text


# ---------------------------------------------------------------------- failures in plain words
def test_every_failure_message_says_what_to_do_next():
    for message in (wait_messages.queue_limit_message("data-science", 7200, "Shared T4"),
                    wait_messages.start_timeout_message(600, "Shared T4", "A node was found: placed on gput4-0."),
                    wait_messages.unexplained_message(RuntimeError(""))):
        assert "What next" in message
    limit = wait_messages.queue_limit_message("data-science", 7200, "Shared T4")
    assert "%gpu_submit" in limit and "2 h in the data-science team's queue" in limit
    assert "last thing that happened: A node was found: placed on gput4-0." in wait_messages.start_timeout_message(
        600, "Shared T4", "A node was found: placed on gput4-0.")
    assert "RuntimeError" in wait_messages.unexplained_message(RuntimeError(""))  # never an empty reason


def test_failure_record_round_trip_and_bad_state_is_ignored():
    rec = wait_messages.failure_record("x" * 5000, "Shared T4", T0)
    assert len(rec["message"]) == 2000 and rec["when"] == "2026-01-05 09:00 UTC"
    assert wait_messages.valid_record(rec) == rec
    for bad in (None, "text", {"message": ""}, {"message": 3}, ["message"]):
        assert wait_messages.valid_record(bad) is None


@given(st.dictionaries(st.text(max_size=10), st.one_of(st.text(max_size=50), st.integers(), st.none())))
def test_valid_record_takes_any_saved_state(value):
    rec = wait_messages.valid_record(value)
    assert rec is None or (set(rec) == {"message", "profile", "when", "kind"} and rec["message"]
                           and rec["kind"] in (wait_messages.FAILED, wait_messages.STOPPED))


# ---------------------------------------------------------------------- deadlines
class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def spawn(monkeypatch):
    clock = Clock()
    monkeypatch.setattr("jupyterhub_gpu.hub.queued_spawn.time.monotonic", clock)
    s = QueuedSpawnMixin(queue_wait_limit=300)
    s._base_start_timeout, s._spawn_began, s._queue = 60, clock.now, ("data-science", None)
    return s, clock


GATED = {"metadata": {"name": "jupyter-me"}, "spec": {"schedulingGates": [{"name": KUEUE_ADMISSION_GATE}]}}
ADMITTED = {"metadata": {"name": "jupyter-me"}, "spec": {"nodeName": "gput4-0"}}


def test_queued_spawn_outlives_start_timeout_until_the_queue_limit(spawn):
    s, clock = spawn
    clock.now += 200  # past start_timeout (60 s), within the queue limit (300 s)
    s.check_deadlines(GATED)
    clock.now += 101
    with pytest.raises(SpawnFailed, match="data-science team's queue"):
        s.check_deadlines(GATED)


def test_start_timeout_counts_from_admission(spawn):
    s, clock = spawn
    clock.now += 250
    s.check_deadlines(GATED)
    clock.now += 1
    s.check_deadlines(ADMITTED)  # admitted now: start_timeout starts here
    clock.now += 59
    s.check_deadlines(ADMITTED)
    s._headline = "A node was found: your server is placed on gput4-0."
    clock.now += 2
    with pytest.raises(SpawnFailed, match="did not become ready within 1 min") as e:
        s.check_deadlines(ADMITTED)
    assert "placed on gput4-0" in e.value.jupyterhub_message


def test_no_queue_limit_means_wait_as_long_as_it_takes(spawn):
    s, clock = spawn
    s.queue_wait_limit = 0
    clock.now += 10 * 86400
    s.check_deadlines(GATED)


# ---------------------------------------------------------------------- progress events
def test_kubespawners_patience_line_is_recognised():
    assert is_patience({"message": "Please be patient! Your server is starting... 65 seconds"})
    assert not is_patience({"message": "x", "progress": 30, "raw_event": {}})
    assert not is_patience({"message": "Waiting in the ds team's queue", "gpuhub": {"queued": True}})


def test_merged_interleaves_and_ends_with_the_first_source():
    async def spawn_events():
        for i in range(3):
            await asyncio.sleep(0.02)
            yield {"n": f"spawn-{i}"}

    async def queue_events():
        for i in range(100):
            yield {"n": f"queue-{i}"}
            await asyncio.sleep(0.015)

    async def collect():
        return [e["n"] async for e in merged(spawn_events(), queue_events())]

    got = asyncio.run(collect())
    assert [n for n in got if n.startswith("spawn")] == ["spawn-0", "spawn-1", "spawn-2"]
    assert got[-1] == "spawn-2" and 1 <= sum(n.startswith("queue") for n in got) < 100


def test_more_than_the_whole_quota_is_said_at_once(spawn):
    wl = workload("pod-me", 0, "jupyter-me")
    wl["status"]["conditions"] = [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                   "message": "couldn't assign flavors to pod set main: insufficient quota for "
                                              "nvidia.com/gpu in flavor gput4, request > maximum capacity (2 > 1)"}]
    place = wait_messages.queue_place([wl], "jhub", "ds", "jupyter-me")
    assert place.never and "maximum capacity" in place.never
    s, _ = spawn
    s._never = place.never
    with pytest.raises(SpawnFailed, match="needs more than the data-science team's whole quota"):
        s.check_deadlines(GATED)


# ---------------------------------------------------------------------- the kept failure on the hub's pages
def test_last_failure_banner_is_escaped_and_only_for_a_stopped_server():
    from types import SimpleNamespace

    from jinja2 import Environment, FileSystemLoader

    from jupyterhub_gpu.config import HUB_PAGES

    banner = Environment(loader=FileSystemLoader(HUB_PAGES), autoescape=True).get_template(
        "gpuhub_last_failure.html")
    record = wait_messages.failure_record("<script>x</script> can never start", "H200 (retired pool)", T0)
    html = banner.render(server=SimpleNamespace(active=False, gpuhub_last_failure=record))
    assert 'role="alert"' in html and "(H200 (retired pool), 2026-01-05 09:00 UTC)" in html
    assert "&lt;script&gt;x&lt;/script&gt; can never start" in html and "<script>" not in html
    assert banner.render(server=SimpleNamespace(active=True, gpuhub_last_failure=record)).strip() == ""
    assert banner.render(server=SimpleNamespace(active=False, gpuhub_last_failure=None)).strip() == ""
    assert banner.render(server=None).strip() == ""
