"""Preemptible interactive sessions, the pure parts: the profile key and its rule, the Kueue classes below every
job's, the server pod's labels, grace period and env (through KubeSpawner's real code), the picker's line, Kueue's
reason read off a stopped pod, the home page's "stopped" record, and the server's own end
(jupyterhub_gpu/singleuser/stopping.py).
"""
from __future__ import annotations

import asyncio
import signal
from types import SimpleNamespace

import pytest
import yaml
from jinja2 import Environment, FileSystemLoader

from jupyterhub_gpu.builders.kueue import (
    preemptible_priority_values,
    render_kueue,
    server_priority_values,
    server_queue_labels,
)
from jupyterhub_gpu.cluster.evictions import KueueStop, kueue_stop
from jupyterhub_gpu.config import HUB_PAGES
from jupyterhub_gpu.contract import ENV_PREEMPTION_GRACE, PREEMPTIBLE_LABEL, PRIORITY_LABEL, QUEUE_LABEL
from jupyterhub_gpu.hub import picker, wait_messages
from jupyterhub_gpu.hub.preemption import PreemptionMixin, StopReasons, stopped_message
from jupyterhub_gpu.hub.render_pod import pod_manifest
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.model.validation import ProfilesError, parse_profiles
from jupyterhub_gpu.singleuser import stopping

KUEUE_MESSAGE = ("Preempted to accommodate a workload (UID: 1f2e, JobUID: 9a8b) due to prioritization in the "
                 "ClusterQueue; preemptor path: /team-data-science; preemptee path: /team-data-science")


def example(**changes) -> dict:
    """The example file with `changes` (slug → keys) applied to its profiles."""
    data = yaml.safe_load(EXAMPLE_PROFILES.read_text())
    for p in data["profiles"]:
        p.update(changes.get(p["slug"], {}))
    return data


@pytest.fixture(scope="module")
def cfg():
    return parse_profiles(example(**{"t4-shared": {"preemptible": True}}))


def stopped_pod(reason="WorkloadEvictedDueToPreempted", message=KUEUE_MESSAGE, name="jupyter-ana") -> dict:
    return {"metadata": {"name": name, "namespace": "jhub", "deletionTimestamp": "2026-12-05T12:00:00Z"},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "TerminationTarget", "status": "True", "reason": reason, "message": message}]}}


# ---------------------------------------------------------------------- the profiles file
def test_not_preemptible_by_default_and_a_queued_gpu_profile_may_be(cfg):
    assert not parse_profiles(example()).profile("t4-shared").preemptible
    assert cfg.profile("t4-shared").preemptible and not cfg.profile("h100-full").preemptible


@pytest.mark.parametrize("changes, says", [
    ({"cpu": {"preemptible": True}}, "do not wait in a team's Kueue queue"),
    ({"t4-shared": {"preemptible": True, "queue_servers": False}}, "do not wait in a team's Kueue queue"),
])
def test_preemptible_needs_a_kueue_queue(changes, says):
    with pytest.raises(ProfilesError) as e:
        parse_profiles(example(**changes))
    (problem,) = e.value.problems
    assert problem.path.endswith(".preemptible") and says in problem.message
    assert "remove `preemptible`" in problem.message


def test_preemptible_on_a_pool_no_team_has_quota_on_is_refused():
    data = example(**{"t4-shared": {"preemptible": True}})
    for team in data["teams"].values():
        team["quota"].pop("gput4", None)
    with pytest.raises(ProfilesError) as e:
        parse_profiles(data)
    assert any("no team has quota on pool 'gput4'" in p.message for p in e.value.problems)


# ---------------------------------------------------------------------- Kueue: below every job
def test_preemptible_classes_rank_below_every_job_and_servers_stay_above(cfg):
    jobs = cfg.priorities
    low = preemptible_priority_values(cfg)
    assert set(low) == set(jobs) and max(low.values()) < min(jobs.values())
    assert sorted(low, key=low.get) == sorted(jobs, key=jobs.get)  # their order among themselves is kept
    assert min(server_priority_values(cfg).values()) > max(jobs.values())  # unchanged
    classes = {o["metadata"]["name"]: o["value"] for o in render_kueue(cfg) if o["kind"] == "WorkloadPriorityClass"}
    assert classes["gpuhub-preemptible-normal"] == low["normal"] and classes["gpuhub-server-normal"] > jobs["high"]


def test_no_preemptible_classes_without_a_preemptible_profile():
    plain = parse_profiles(example())
    assert preemptible_priority_values(plain) == {}
    assert not any(o["metadata"]["name"].startswith("gpuhub-preemptible-") for o in render_kueue(plain))


def test_only_the_preemptible_profiles_server_gets_the_low_class(cfg):
    labels = server_queue_labels(cfg, cfg.profile("t4-shared"), ["data-science"])
    assert labels == {QUEUE_LABEL: "data-science", PRIORITY_LABEL: "gpuhub-preemptible-normal",
                      PREEMPTIBLE_LABEL: "true"}
    other = server_queue_labels(cfg, cfg.profile("a100-mig-1g10gb"), ["data-science"])
    assert other[PRIORITY_LABEL] == "gpuhub-server-normal" and PREEMPTIBLE_LABEL not in other


def test_the_pod_of_a_preemptible_server_has_its_grace_period_and_says_so(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(example(**{"t4-shared": {"preemptible": True}})))
    pod = asyncio.run(pod_manifest(path, "t4-shared", "ana", ["data-science"], preemption_grace_period=90))
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert pod["metadata"]["labels"][PREEMPTIBLE_LABEL] == "true"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 90 and env[ENV_PREEMPTION_GRACE] == "90"
    plain = asyncio.run(pod_manifest(path, "a100-mig-1g10gb", "ana", ["data-science"]))
    assert PREEMPTIBLE_LABEL not in plain["metadata"]["labels"]
    assert "terminationGracePeriodSeconds" not in plain["spec"]
    assert ENV_PREEMPTION_GRACE not in {e["name"] for e in plain["spec"]["containers"][0]["env"]}


# ---------------------------------------------------------------------- the picker
def test_the_picker_says_preemptible_only_where_the_server_is_queued(cfg):
    entry = picker.profile_entry(cfg, cfg.profile("t4-shared"), False, None, ["data-science"])
    assert entry["gpuhub"]["preemptible"] == picker.PREEMPTIBLE_LINE
    assert "warned first" in picker.PREEMPTIBLE_LINE and "saves your open notebooks" in picker.PREEMPTIBLE_LINE
    assert picker.profile_entry(cfg, cfg.profile("h100-full"), False, None, ["ml-research"])["gpuhub"][
        "preemptible"] == ""
    env = Environment(loader=FileSystemLoader(picker.__file__.rsplit("/", 1)[0] + "/templates"), autoescape=True)
    html = env.get_template("form.html").render(profile_list=[entry], user_options={})
    assert 'id="profile-preemptible-t4-shared"' in html and "Preemptible: a training job" in html


# ---------------------------------------------------------------------- Kueue's reason, read off the pod
def test_kueue_stop_reads_the_termination_target_condition():
    stop = kueue_stop(stopped_pod())
    assert stop == KueueStop("WorkloadEvictedDueToPreempted", KUEUE_MESSAGE) and stop.preempted and stop.by == "team"
    cohort = kueue_stop(stopped_pod(message="Preempted to accommodate a workload (UID: a, JobUID: b) due to "
                                            "reclamation within the cohort while borrowing; preemptor path: /x"))
    assert cohort.by == "cohort"
    other = kueue_stop(stopped_pod("WorkloadEvictedDueToClusterQueueStopped", "The ClusterQueue is stopped"))
    assert not other.preempted and other.by is None
    assert kueue_stop({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}) is None
    assert kueue_stop(None) is None


def test_stopped_messages_say_why_and_what_next():
    team = stopped_message(kueue_stop(stopped_pod()), "Shared T4", 60)
    assert "preempted" in team and "a training job of your team" in team
    assert "within the 60 s grace period" in team and "start it again" in team and "%gpu_submit" in team
    cohort = stopped_message(KueueStop("WorkloadEvictedDueToPreempted", "due to reclamation within the cohort"),
                             "Shared T4", None)
    assert "another team took back GPUs" in cohort and "warned" not in cohort
    other = stopped_message(KueueStop("WorkloadEvictedDueToClusterQueueStopped", "stopped"), "Shared T4", 60)
    assert "stopped by your team's GPU queue" in other and "ClusterQueueStopped" in other


def test_stop_reasons_keep_the_newest_and_are_read_once():
    reasons = StopReasons(limit=2)
    reasons.replace([stopped_pod(name="jupyter-a"), {"metadata": {"name": "jupyter-b", "namespace": "jhub"}}])
    reasons.apply("MODIFIED", stopped_pod(name="jupyter-c"))
    reasons.apply("DELETED", stopped_pod(name="jupyter-d"))
    assert list(reasons.seen) == ["jhub/jupyter-c", "jhub/jupyter-d"]
    assert reasons.pop("jhub/jupyter-d").preempted and reasons.pop("jhub/jupyter-d") is None


# ---------------------------------------------------------------------- the hub notices
class _Base:
    """KubeSpawner's poll, as far as the mixin sees it."""

    async def poll(self):
        return self.status

    def start(self):
        return "started"


class FakeSpawner(PreemptionMixin, _Base):
    profiles_file = "p.yaml"
    _last_failure = None
    _log_name = "ana"

    def __init__(self, cfg, pods):
        super().__init__()
        self.profiles, self.pod_reflector, self.status = cfg, SimpleNamespace(pods=pods), None
        self.gpu_profile, self.user_options = cfg.profile("t4-shared"), {"profile": "t4-shared"}

    def _pod_key(self):
        return "jhub/jupyter-ana"


def test_poll_keeps_kueues_reason_seen_while_the_pod_terminated(cfg):
    pods = {"jhub/jupyter-ana": stopped_pod()}
    s = FakeSpawner(cfg, pods)
    assert asyncio.run(s.poll()) is None and s._last_failure is None  # still saving: still running
    pods.clear()
    s.status = 1
    assert asyncio.run(s.poll()) == 1
    assert s._last_failure["kind"] == wait_messages.STOPPED and "preempted" in s._last_failure["message"]
    assert s._last_failure["profile"] == cfg.profile("t4-shared").display_name


def test_poll_reads_the_watchs_memory_when_the_pod_is_already_gone(cfg):
    s = FakeSpawner(cfg, {})
    s.stop_reasons = StopReasons()
    s.stop_reasons.apply("DELETED", stopped_pod())
    s.gpu_profile = None  # after a hub restart: the profile comes from the saved options
    s.status = 0
    asyncio.run(s.poll())
    assert "within the 60 s grace period" in s._last_failure["message"] and s.stop_reasons.seen == {}


def test_a_server_stopped_otherwise_keeps_no_record(cfg):
    s = FakeSpawner(cfg, {"jhub/jupyter-ana": {"metadata": {}, "status": {}}})
    s.stop_reasons = StopReasons()
    s.status = 0
    asyncio.run(s.poll())
    assert s._last_failure is None
    s.stop_reasons.apply("DELETED", stopped_pod())
    assert s.start() == "started" and s.stop_reasons.seen == {}  # a new start: an old pod's stop is history


def test_the_home_page_says_why_it_stopped_and_offers_to_start_again():
    banner = Environment(loader=FileSystemLoader(HUB_PAGES), autoescape=True).get_template("gpuhub_last_failure.html")
    stopped = wait_messages.failure_record(stopped_message(kueue_stop(stopped_pod()), "Shared T4", 60), "Shared T4",
                                           kind=wait_messages.STOPPED)
    html = banner.render(server=SimpleNamespace(active=False, gpuhub_last_failure=stopped), start_url="/hub/spawn/ana")
    assert "Your server was stopped" in html and 'data-kind="stopped"' in html
    assert 'href="/hub/spawn/ana"' in html and "Start it again" in html and "%gpu_submit" in html
    failed = wait_messages.failure_record("no node", "Shared T4")
    html = banner.render(server=SimpleNamespace(active=False, gpuhub_last_failure=failed), start_url="/hub/spawn/ana")
    assert "did not work" in html and "Start it again" not in html
    assert wait_messages.valid_record(stopped)["kind"] == wait_messages.STOPPED
    assert wait_messages.valid_record({"message": "old state"})["kind"] == wait_messages.FAILED


# ---------------------------------------------------------------------- the server's own end
class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_server_waits_for_an_open_jupyterlab_to_save_and_not_past_its_grace():
    clock = Clock()
    s = stopping.Stopping(60, clock)
    assert s.answer() == {"preemptible": True, "stopping": False, "grace_s": 60}
    assert s.begin() == 0  # no JupyterLab has asked: nothing to save, stop now
    s = stopping.Stopping(60, clock)
    s.asked()
    clock.now += stopping.OPEN_S + 1
    assert s.begin() == 0  # none asked for longer than a background tab's slowest poll: none is open
    s = stopping.Stopping(60, clock)
    s.asked()
    clock.now += 3
    assert s.begin() == stopping.SAVE_WINDOW_S
    clock.now += 7
    answer = s.answer()
    assert answer["stopping"] and answer["seconds_left"] == 53 and "%gpu_submit" in answer["message"]
    short = stopping.Stopping(12, clock)
    short.asked()
    assert short.begin() == 12 - stopping.MARGIN_S
    assert stopping.Stopping(None).answer() == {"preemptible": False, "stopping": False}
    assert stopping.grace_from_env({ENV_PREEMPTION_GRACE: "60"}) == 60
    assert stopping.grace_from_env({ENV_PREEMPTION_GRACE: "-1"}) is None and stopping.grace_from_env({}) is None


class FakeLoop:
    def __init__(self):
        self.soon, self.later = [], []

    def add_callback_from_signal(self, fn):
        self.soon.append(fn)

    def call_later(self, delay, fn):
        self.later.append((delay, fn))


class FakeEvents:
    def __init__(self):
        self.schemas, self.emitted = [], []

    def register_event_schema(self, schema):
        self.schemas.append(schema["$id"])

    def emit(self, *, schema_id, data):
        self.emitted.append((schema_id, data))


def test_sigterm_on_a_preemptible_server_tells_jupyterlab_at_once_and_stops_after_the_save_window():
    stops = []
    app = SimpleNamespace(web_app=SimpleNamespace(settings={}), io_loop=FakeLoop(), log=SimpleNamespace(
        warning=lambda *a: None), stop=lambda from_signal=False: stops.append(from_signal), event_logger=FakeEvents())
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert stopping.install(app, {}).grace_s is None and signal.getsignal(signal.SIGTERM) is before
        s = stopping.install(app, {ENV_PREEMPTION_GRACE: "60"})
        handler = signal.getsignal(signal.SIGTERM)
        assert handler is not before and app.web_app.settings["gpuhub_stopping"] is s
        s.asked()
        handler(signal.SIGTERM, None)
        (later,) = app.io_loop.soon
        later()
        ((delay, stop),) = app.io_loop.later
        assert delay == stopping.SAVE_WINDOW_S and s.answer()["stopping"] and stops == []
        assert app.event_logger.schemas == [stopping.STOPPING_SCHEMA]
        ((schema, data),) = app.event_logger.emitted  # pushed on the event bus: a background tab hears it too
        assert schema == stopping.STOPPING_SCHEMA and data["seconds_left"] == 60 and "preempted" in data["message"]
        handler(signal.SIGTERM, None)  # a second SIGTERM: at once
        assert stops == [True]
    finally:
        signal.signal(signal.SIGTERM, before)


def test_the_stopping_event_is_a_valid_jupyter_events_schema_and_reaches_a_listener():
    from jupyter_events import EventLogger

    heard = []

    async def listen(logger, schema_id, data):  # noqa: ARG001 - jupyter_server's event websocket's signature
        heard.append((schema_id, data))

    async def main():
        bus = EventLogger()
        bus.register_event_schema(stopping.SCHEMA)
        bus.add_listener(listener=listen)  # every schema, as jupyter_server's /api/events/subscribe listens
        bus.emit(schema_id=stopping.STOPPING_SCHEMA, data={"message": "stopping", "seconds_left": 55})
        await asyncio.sleep(0.1)

    asyncio.run(main())
    assert heard == [(stopping.STOPPING_SCHEMA, {"message": "stopping", "seconds_left": 55})]
