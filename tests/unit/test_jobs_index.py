"""gpu-jobs' cache indexes equal the full scans they replace, after every watch event (property test)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.contract import USER_ANNOTATION
from jupyterhub_gpu.services.jobs.cache import NamespaceStore
from jupyterhub_gpu.services.jobs.index import INDEX_KEYS, ByKey, QueueIndex
from jupyterhub_gpu.services.jobs.status import queue_positions, workload_owner

NS = "team-a"

workload_events = st.fixed_dictionaries({
    "kind": st.sampled_from(["ADDED", "MODIFIED", "MODIFIED", "DELETED"]),
    "name": st.sampled_from([f"w{i}" for i in range(10)]),
    "queue": st.sampled_from(["q1", "q2"]),
    "priority": st.sampled_from([None, 0, 100, 1000]),
    "created": st.integers(0, 59),
    "admitted": st.one_of(st.none(), st.integers(0, 59)),
    "requeued": st.one_of(st.none(), st.integers(0, 59)),
    "owned": st.booleans(),
})


def stamp(minute: int) -> str:
    return f"2026-01-01T10:{minute:02d}:00Z"


def workload(e) -> dict:
    conditions = []
    if e["admitted"] is not None:
        conditions.append({"type": "QuotaReserved", "status": "True",
                           "lastTransitionTime": stamp(max(e["admitted"], e["created"]))})
    if e["requeued"] is not None:
        conditions.append({"type": "Requeued", "status": "True", "lastTransitionTime": stamp(e["requeued"])})
    meta = {"name": e["name"], "namespace": NS, "creationTimestamp": stamp(e["created"])}
    if e["owned"]:
        meta["ownerReferences"] = [{"kind": "Job", "name": f"job-{e['name']}"}]
    return {"metadata": meta, "spec": {"queueName": e["queue"], "priority": e["priority"]},
            "status": {"conditions": conditions}}


@settings(max_examples=200, deadline=None)
@given(st.lists(workload_events, min_size=1, max_size=40), st.integers(0, 39))
def test_positions_and_owners_equal_the_full_scan(events, relist_at):
    queues, owners = QueueIndex(), ByKey(INDEX_KEYS["workloads"])
    store = NamespaceStore(lambda: None, (owners, queues))
    for i, e in enumerate(events):
        store.apply(e["kind"], workload(e))
        if i == relist_at:  # a relist rebuilds the indexes from scratch
            store.replace(list(store.by_name.values()))
        everything = list(store.by_name.values())
        want = queue_positions(everything)
        for wl in everything:
            owner = workload_owner(wl)
            got = queues.position(wl)
            if owner:
                assert got == want.get(owner), (owner, e, got, want.get(owner))
                assert owners.get(owner) == [wl]
            else:
                assert got is None or got["of"] == len([w for w in everything if queues.position(w) is not None
                                                         and w["spec"]["queueName"] == wl["spec"]["queueName"]])
        assert sum(len(g) for g in owners.groups.values()) == sum(1 for w in everything if workload_owner(w))


def test_a_users_jobs_and_a_jobs_pods_by_key():
    jobs = NamespaceStore(lambda: None, (ByKey(INDEX_KEYS["jobs"]),))
    ann = USER_ANNOTATION
    jobs.replace([{"metadata": {"name": f"j{i}", "annotations": {ann: f"u{i % 3}"}}} for i in range(9)])
    assert [j["metadata"]["name"] for j in jobs.indexes[0].get("u1")] == ["j1", "j4", "j7"]
    jobs.apply("MODIFIED", {"metadata": {"name": "j4", "annotations": {ann: "u2"}}})
    jobs.apply("DELETED", {"metadata": {"name": "j7"}})
    assert [j["metadata"]["name"] for j in jobs.indexes[0].get("u1")] == ["j1"]
    assert len(jobs.indexes[0].get("u2")) == 4 and jobs.indexes[0].get("nobody") == []
