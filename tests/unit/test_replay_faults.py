"""The faulted day replay's pure parts: the seeded fault schedule (every kind once, in the busiest hours, far
enough apart to be measured alone), the invariants' verdicts and the plain-vs-faulted comparison."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpu_dev.replay import faults, invariants, notified
from jupyterhub_gpu_dev.replay import trace as traces
from jupyterhub_gpu_dev.replay.trace import HOUR


@pytest.fixture(scope="module")
def day() -> traces.Trace:
    return traces.generate(1)


def test_the_schedule_is_seeded_and_has_every_kind_once(day):
    a, b = faults.schedule(7, day, speed=120), faults.schedule(7, day, speed=120)
    assert a == b
    assert sorted(f.what for f in a) == sorted(faults.KINDS)
    assert faults.schedule(8, day, speed=120) != a


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), speed=st.sampled_from([60, 120, 360]),
       kinds=st.lists(st.sampled_from(faults.KINDS), min_size=1, max_size=len(faults.KINDS), unique=True))
def test_faults_are_apart_enough_to_be_measured_alone_and_inside_the_day(seed, speed, kinds):
    day = traces.generate(1)
    plan = faults.schedule(seed, day, speed, tuple(kinds))
    times = [f.at for f in plan]
    assert times == sorted(times)
    gap = min(faults.GAP_WALL_S * speed, day.duration / len(kinds))
    assert all(b - a >= gap - 0.2 for a, b in zip(times, times[1:]))
    assert all(0 <= t < day.duration for t in times)


def test_faults_fall_in_the_busiest_hours(day):
    load = faults.hourly_load(day)
    start, end = faults.busiest_window(day, 3)
    window = sum(load[int(start // HOUR):int(end // HOUR)])
    assert window == max(sum(load[h:h + 3]) for h in range(len(load) - 2))
    quiet = min(range(len(load)), key=lambda h: load[h])
    assert load[quiet] < max(load)  # a working day has quiet hours: the window is not just the first hours
    for f in faults.schedule(1, day, speed=60):
        lo, hi = faults.busiest_window(day, int(-(-faults.GAP_WALL_S * 60 * len(faults.KINDS) // HOUR)) + 1)
        assert lo <= f.at < hi


def test_nothing_violated_says_nothing():
    assert invariants.violations({"sessions_not_served": [], "jobs_not_asked_for": [],
                                  "lifetimes_missing_from_store": None}) == []


def test_each_violation_is_said_in_words():
    said = invariants.violations({"jobs_not_asked_for": ["gpu-alice-x"], "outputs_missing": ["gpu-bob-y"],
                                  "lost_checkpointed_work": ["gpu-c"], "cluster_read_error": "boom"})
    text = "\n".join(said)
    assert "a retry's second job" in text and "gpu-alice-x" in text
    assert "without an output notebook" in text and "checkpoint" in text and "boom" in text
    assert len(said) == 4


def test_the_comparison_holds_node_hours_to_five_percent_and_every_fault_to_its_recovery():
    plain = {"sessions_served": 6, "jobs_finished": 4, "gpu_node_hours": 40.0}
    assert invariants.compare(plain, {**plain, "gpu_node_hours": 41.9}, [
        {"what": "hub", "at_h": 10.0, "recovered_after_s": 12.3}]) == []
    out = invariants.compare(plain, {**plain, "gpu_node_hours": 42.5, "jobs_finished": 3}, [
        {"what": "kueue", "at_h": 11.0, "recovered_after_s": None},
        {"what": "proxy", "at_h": 12.0, "recovered_after_s": None, "error": "not applied: x"}])
    assert any("jobs_finished 3 != 4" in o for o in out)
    assert any("not within 5%" in o for o in out)
    assert any("kueue" in o and "not healthy again" in o for o in out)
    assert any("proxy" in o and "not applied" in o for o in out)


def test_answers_a_person_retries():
    import requests

    class Answer:
        def __init__(self, code):
            self.status_code = code

    assert invariants.transient(requests.ConnectionError("gone"))
    assert invariants.transient(Answer(503)) and invariants.transient(Answer(502))
    assert not invariants.transient(Answer(400)) and not invariants.transient(Answer(403))


def test_pods_seen_bound_are_kept_with_when_they_ended():
    seen: dict = {}
    pod = {"metadata": {"uid": "u1", "namespace": "jhub", "name": "jupyter-a"}, "spec": {"nodeName": "n1"}}
    waiting = {"metadata": {"uid": "u2", "namespace": "jhub", "name": "jupyter-b"}, "spec": {}}
    invariants.record_pods(seen, [pod, waiting], 1.0)
    assert set(seen) == {"u1"} and seen["u1"]["gone"] is None
    invariants.record_pods(seen, [], 2.0)
    assert seen["u1"]["gone"] == 2.0
    invariants.record_pods(seen, [], 3.0)
    assert seen["u1"]["gone"] == 2.0
    assert seen["u1"]["started"] is False  # bound, never acknowledged by a kubelet: no lifetime to store


def test_a_pod_once_seen_with_a_start_time_counts_as_started():
    seen: dict = {}
    pod = {"metadata": {"uid": "u1", "namespace": "team-ds", "name": "gpu-a-x"}, "spec": {"nodeName": "n1"},
           "status": {"startTime": "2026-12-05T10:00:00Z"}}
    invariants.record_pods(seen, [pod], 1.0)
    invariants.record_pods(seen, [{**pod, "status": {}}], 2.0)
    assert seen["u1"]["started"] is True


def test_the_usage_collectors_cycle_is_compressed_like_the_cullers():
    """At x120 the default 60 s cycle is two trace hours: a server stopped within one is never listed."""
    import argparse
    import types

    from jupyterhub_gpu_dev.replay.stack import collector_cycle_config

    for speed, every in ((120, 1.0), (30, 2.0), (1, 60.0)):
        c = types.SimpleNamespace(JupyterHub=types.SimpleNamespace(services=[
            {"name": "gpu-usage-collector", "command": ["python", "-m", "x", "--every=60.0"]},
            {"name": "gpu-jobs", "command": ["python", "-m", "y"]}]))
        exec(collector_cycle_config(speed), {"c": c})
        collector, jobs = c.JupyterHub.services
        parser = argparse.ArgumentParser()
        parser.add_argument("--every", type=float)
        assert parser.parse_known_args(collector["command"][3:])[0].every == every
        assert jobs["command"] == ["python", "-m", "y"]


# ---------------------------------------------------------------------- notifications and queued servers
def _posts(*events):
    """What gpu-jobs posts to a Slack-shaped hook for each (kind, status): the product's own payloads."""
    from jupyterhub_gpu.services.notify.events import job_event
    from jupyterhub_gpu.services.notify.payloads import webhook_payload

    return [(notified.HOOK_PATH, webhook_payload("slack", job_event(kind, status))) for kind, status in events]


def _status(name, user, state, preempted=0):
    return {"name": name, "user": user, "state": state, "preempted": preempted, "uid": f"uid-{name}"}


def test_notifications_the_jobs_imply_are_found_in_what_the_hook_received():
    jobs = [{"name": "gpu-ds01-a", "user": "ds01", "state": "Succeeded", "bound": 10.0, "preempted": 1},
            {"name": "gpu-ds02-b", "user": "ds02", "state": "Queued", "bound": None, "preempted": 0}]
    got = _posts(("admitted", _status("gpu-ds01-a", "ds01", "Running")),
                 ("preempted", _status("gpu-ds01-a", "ds01", "Queued", 1)),
                 ("resumed", _status("gpu-ds01-a", "ds01", "Resumed", 1)),
                 ("succeeded", _status("gpu-ds01-a", "ds01", "Succeeded", 1)))
    assert notified.check(jobs, got) == {"expected": 3, "delivered": 4, "missing": [], "twice": []}
    # the end never delivered, the start twice (an outbox that forgot it had sent it)
    out = notified.check(jobs, got[:1] * 2 + got[1:3])
    assert out["missing"] == ["gpu-ds01-a succeeded (for ds01)"] and out["twice"] == ["gpu-ds01-a admitted x2"]
    said = "\n".join(invariants.violations({"notifications": out}))
    assert "never sent" in said and "sent twice" in said


def test_posts_to_other_paths_or_shapes_are_not_counted():
    (path, body), = _posts(("succeeded", _status("gpu-x-1", "x", "Succeeded")))
    assert notified.parse([("/other", body), (path, {"text": "hello"}), (path, {})]) == []
    assert notified.parse([(path, body)]) == [("gpu-x-1", "succeeded", "x")]


def test_gpu_jobs_notification_settings_name_the_replays_hook_and_outbox(tmp_path):
    import json
    import types

    from jupyterhub_gpu.services.notify.prefs import parse_webhooks
    from jupyterhub_gpu_dev.replay.stack import notify_config

    c = types.SimpleNamespace(JupyterHub=types.SimpleNamespace(services=[
        {"name": "gpu-jobs", "command": ["x"], "environment": {"A": "1"}}, {"name": "gpu-culler", "command": ["y"]}]))
    exec(notify_config("http://127.0.0.1:9", tmp_path / "n.sqlite"), {"c": c})
    jobs, culler = c.JupyterHub.services
    hooks = parse_webhooks(json.loads(jobs["environment"]["GPUHUB_NOTIFY_WEBHOOKS"]))
    assert hooks[notified.HOOK].url == "http://127.0.0.1:9/replay" and hooks[notified.HOOK].kind == "slack"
    assert jobs["environment"]["A"] == "1" and jobs["environment"]["GPUHUB_NOTIFY_DB"] == str(tmp_path / "n.sqlite")
    assert "environment" not in culler


def test_servers_queued_at_the_gate_are_found_and_their_place_judged():
    gate = {"name": "kueue.x-k8s.io/admission"}
    pods = [{"metadata": {"name": "jupyter-a", "namespace": "jhub", "uid": "ua"}, "spec": {"schedulingGates": [gate]}},
            {"metadata": {"name": "jupyter-b", "namespace": "jhub", "uid": "ub"}, "spec": {"nodeName": "n"}},
            {"metadata": {"name": "gpu-c", "namespace": "team-ds", "uid": "uc"}, "spec": {"schedulingGates": [gate]}},
            {"metadata": {"name": "jupyter-d", "namespace": "jhub", "uid": "ud", "deletionTimestamp": "x"},
             "spec": {"schedulingGates": [gate]}}]
    assert faults.queued_servers(pods) == {"jupyter-a": "ua"}
    results = [{"what": "hub", "queued_servers": {"jupyter-a": "ua", "jupyter-e": "ue", "jupyter-f": "uf"}}]
    seen = {"ua": {"pod": "jupyter-a", "namespace": "jhub"}, "ue2": {"pod": "jupyter-e", "namespace": "jhub"}}
    assert invariants.kept_places(results, seen) == [
        {"pod": "jupyter-a", "kept": True, "replaced": False},
        {"pod": "jupyter-e", "kept": False, "replaced": True},   # a new pod at the back of the queue
        {"pod": "jupyter-f", "kept": False, "replaced": False}]  # never started (its session ended)
    said = invariants.violations({"queued_at_hub_restart": invariants.kept_places(results, seen)})
    assert said == ["queued servers that lost their place across the hub restart: ['jupyter-e']"]


def test_what_people_heard_is_counted_in_its_own_words_and_a_changed_end_is_wrong():
    import requests

    counts: dict = {}
    busy = requests.Response()
    busy.status_code, busy._content = 503, b'{"message": "gpu-jobs is  busy:\\ntry again"}'
    plain = requests.Response()
    plain.status_code, plain._content = 502, b"<html>Bad gateway</html>"
    for r in (busy, busy, plain, requests.ConnectionError("reset")):
        invariants.heard(counts, "submit", r)
    assert counts == {"submit: 503 gpu-jobs is busy: try again": 2, "submit: 502 <html>Bad gateway</html>": 1,
                      "submit: no answer (ConnectionError)": 1}
    jobs = [{"name": "a", "state": "Succeeded"}, {"name": "b", "state": "Failed"}, {"name": "c", "state": "Running"}]
    assert invariants.contradictions(jobs, {"a": "Succeeded", "b": "Failed", "c": "Succeeded"}) == []
    assert invariants.contradictions(jobs, {"a": "Failed", "b": None}) == [
        "a: Succeeded during the replay, Failed at the end", "b: Failed during the replay, None at the end"]


def test_a_404_page_of_the_hub_is_a_routing_gap_a_person_retries_but_gpu_jobs_404_is_not():
    import requests

    page, json_404 = requests.Response(), requests.Response()
    page.status_code, page._content = 404, b"<!DOCTYPE HTML><html><title>JupyterHub</title></html>"
    page.headers["Content-Type"] = "text/html; charset=UTF-8"
    json_404.status_code, json_404._content = 404, b'{"message": "no such job"}'
    json_404.headers["Content-Type"] = "application/json"
    assert invariants.transient(page) and not invariants.transient(json_404)
    counts: dict = {}
    invariants.heard(counts, "submit", page)
    invariants.heard(counts, "a job's status", json_404)
    assert counts == {"submit: 404 the hub's page (no route to the service yet)": 1,
                      "a job's status: 404 no such job": 1}


def test_a_failed_job_that_never_ran_owes_no_start_but_a_succeeded_one_does():
    jobs = [{"name": "gpu-a-1", "user": "a", "state": "Failed", "bound": None, "preempted": 0},
            {"name": "gpu-a-2", "user": "a", "state": "Succeeded", "bound": None, "preempted": 0},
            {"name": None, "user": "a", "state": "Failed", "bound": None, "preempted": 0}]  # refused at submit
    assert notified.expected(jobs) == {("gpu-a-1", "failed", "a"), ("gpu-a-2", "admitted", "a"),
                                       ("gpu-a-2", "succeeded", "a")}
    assert invariants.contradictions(jobs, {"gpu-a-1": "Failed", "gpu-a-2": "Succeeded"}) == []


def test_a_period_inside_a_faults_outage_is_reported_with_it_and_one_outside_fails_the_check():
    """At x120 a hub back in 35 s was away 70 trace minutes (and a server's start takes half a minute more): a
    period held by that outage from start to end is lost to the fault, said so; one that outlasted every
    outage, or lay in none, is a session lost for no reason."""
    H = 3600
    shade = invariants.shadows([{"what": "hub", "at": 16 * H, "recovered_after_s": 35.0},
                                {"what": "etcd-pause", "at": 15 * H, "recovered_after_s": 0.1, "paused_s": 20.0},
                                {"what": "kueue", "at": 9 * H, "recovered_after_s": None, "error": "not applied"}],
                               speed=120)
    assert shade[0] == ("hub", 16 * H, 16 * H + 65 * 120) and shade[1] == ("etcd-pause", 15 * H, 15 * H + 50.1 * 120)
    assert len(shade) == 2  # a fault that could not be applied excuses nothing
    never = invariants.shadows([{"what": "proxy", "at": 0, "recovered_after_s": None}], speed=120)
    assert never == [("proxy", 0.0, (180 + 30) * 120.0)]  # never healthy again: its whole timeout
    # the hub's outage: 16.00-18.17 h; etcd's 15.00-16.67 h: joined, 15.00-18.17 h
    got = invariants.in_shadows([(15.9 * H, 16.2 * H), (17 * H, 18.5 * H), (12 * H, 12.5 * H)], shade)
    assert got == {"periods_h": [[15.9, 16.2], [17.0, 18.5], [12.0, 12.5]],
                   "in_the_outage_of": ["etcd-pause", "hub"], "unexplained_h": [[17.0, 18.5], [12.0, 12.5]]}
    lost = {"session": 3, "user": "ds04", **got}
    shadowed = {"session": 1, "user": "ds02", **invariants.in_shadows([(16.5 * H, 16.7 * H)], shade)}
    assert shadowed["unexplained_h"] == [] and shadowed["in_the_outage_of"] == ["etcd-pause", "hub"]
    assert invariants.unexplained({"sessions_not_served": [lost, shadowed]}) == [lost]
    said = invariants.violations({"sessions_not_served": [lost, shadowed]})
    assert len(said) == 1 and "outside any fault's outage" in said[0] and "ds04" in said[0] and "ds02" not in said[0]
    plain = {"sessions_served": 12, "jobs_finished": 10, "gpu_node_hours": 50.0}
    faulted = {**plain, "sessions_served": 11, "invariants": {"sessions_not_served": [shadowed]}}
    assert invariants.compare(plain, faulted, []) == []  # one session lost to the hub's outage, reported
    faulted = {**plain, "sessions_served": 10, "invariants": {"sessions_not_served": [shadowed, lost]}}
    assert invariants.compare(plain, faulted, []) == ["faulted sessions_served 10 (+1 lost to outages) != 12 unfaulted"]
