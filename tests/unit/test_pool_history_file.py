"""A full pool's wait history survives a hub restart (`pool_history_file.py`): a new hub process whose pod
relist no longer holds the servers that waited (their pods are deleted) reads the same history back from
the file and gives the same estimate; a damaged or hostile file is ignored, never a crash."""
from __future__ import annotations

import asyncio
import json
import os
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from test_pool_wait_estimate import CFG, T0, history_of_waits, pod  # tests/unit is on the path (no package)

from jupyterhub_gpu.hub.pool_history_file import MAX_FILE_BYTES, HistoryFile, dump, load_into
from jupyterhub_gpu.hub.pool_wait_estimate import MAX_HISTORY, PoolHistory

KEY = ("gpuh100", "nvidia.com/gpu")


def test_a_restarted_hub_reads_back_the_history_its_relist_no_longer_has(tmp_path):
    path = tmp_path / "history.json"
    before = history_of_waits()
    f = HistoryFile(path)
    f.attach(before)
    for i in range(7):  # the servers stop: their pods go, the history stays (in memory)
        before.apply("DELETED", pod(f"p{i}", T0 + timedelta(hours=i), T0 + timedelta(hours=i, minutes=10)))
    before.apply("MODIFIED", pod("late", T0 + timedelta(days=1), T0 + timedelta(days=1, minutes=13),
                                 phase="Running"))  # a new binding: saved (no loop here: at once)
    profile = CFG.profile("h100-full")
    want = before.picker_eta(profile)
    assert want.known

    after = PoolHistory(lambda: CFG)  # a new process: nothing in memory
    HistoryFile(path).attach(after)
    after.replace([pod("late", T0 + timedelta(days=1), T0 + timedelta(days=1, minutes=13), phase="Running")])
    assert list(after.history[KEY]) == list(before.history[KEY])  # the same bindings, in the same order
    assert after.picker_eta(profile) == want

    cold = PoolHistory(lambda: CFG)  # what a restart gave before: the relist only
    cold.replace([pod("late", T0 + timedelta(days=1), T0 + timedelta(days=1, minutes=13), phase="Running")])
    assert not cold.picker_eta(profile).known


def test_saves_wait_for_the_interval_and_happen_off_the_loop(tmp_path):
    path = tmp_path / "h.json"

    async def run():
        h = PoolHistory(lambda: CFG)
        f = HistoryFile(path, every=0.2)
        f.attach(h)
        h.apply("MODIFIED", pod("a", T0, T0 + timedelta(minutes=3), phase="Running"))
        h.apply("MODIFIED", pod("b", T0, T0 + timedelta(minutes=4), phase="Running"))
        assert not path.exists()  # not at once: within the interval
        for _ in range(50):
            await asyncio.sleep(0.05)
            if path.exists():
                break
        return json.loads(path.read_bytes())

    doc = asyncio.run(run())
    assert [b[0] for b in doc["pools"][0]["bindings"]] == ["uid-a", "uid-b"]


def test_history_read_back_stays_bounded_and_keeps_the_newest():
    h = PoolHistory(lambda: CFG)
    doc = {"version": 1, "pools": [{"pool": KEY[0], "resource": KEY[1], "bindings": [
        [f"u{i}", (T0 + timedelta(minutes=i)).isoformat(), (T0 + timedelta(minutes=i + 5)).isoformat()]
        for i in range(MAX_HISTORY + 50)]}]}
    assert load_into(h, json.dumps(doc).encode()) == MAX_HISTORY
    assert len(h.history[KEY]) == MAX_HISTORY and next(iter(h.history[KEY])) == "u50"


def test_an_unreadable_file_starts_empty_with_a_warning(tmp_path, caplog):
    path = tmp_path / "h.json"
    path.write_bytes(b"\xff{not json")
    h = HistoryFile(path).attach(PoolHistory(lambda: CFG))
    assert h.history == {} and "unreadable" in caplog.text
    path.write_text(json.dumps({"version": 2, "pools": []}))
    assert HistoryFile(path).attach(PoolHistory(lambda: CFG)).history == {}


def test_a_failed_save_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "h.json"
    h = history_of_waits()
    HistoryFile(path).save(dump(h))
    old = path.read_bytes()

    def broken(*_):
        raise OSError("disk full")

    monkeypatch.setattr("jupyterhub_gpu.hub.pool_history_file.os.replace", broken)
    HistoryFile(path).save(b"{}")
    assert path.read_bytes() == old and [p.name for p in tmp_path.iterdir()] == ["h.json"]


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=30),
                       lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
                       max_leaves=30)


@settings(max_examples=200)
@given(st.one_of(JSONISH.map(lambda v: json.dumps(v).encode()),
                 st.fixed_dictionaries({"version": st.just(1), "pools": st.lists(JSONISH, max_size=4)}).map(
                     lambda v: json.dumps(v).encode()),
                 st.binary(max_size=200)))
def test_hostile_files_are_refused_or_skipped_never_a_crash(data):
    h = PoolHistory(lambda: CFG)
    try:
        load_into(h, data)
    except ValueError:
        return
    for hist in h.history.values():  # whatever was taken reads as bindings
        assert hist and all(a.created.tzinfo and a.admitted.tzinfo for a in hist.values())


def test_one_bad_binding_is_skipped_and_the_rest_kept(tmp_path):
    good = [[f"u{i}", (T0 + timedelta(minutes=i)).isoformat(), (T0 + timedelta(minutes=i + 5)).isoformat()]
            for i in range(4)]
    bad = ["u-bad", "2026-13-45T99:00:00Z", T0.isoformat()]  # reads as a time to neither parser
    doc = {"version": 1, "pools": [{"pool": KEY[0], "resource": KEY[1], "bindings": good[:2] + [bad] + good[2:]},
                                   {"pool": "gpua100", "resource": KEY[1], "bindings": good}]}
    path = tmp_path / "h.json"
    path.write_text(json.dumps(doc))
    h = HistoryFile(path).attach(PoolHistory(lambda: CFG))
    assert list(h.history[KEY]) == ["u0", "u1", "u2", "u3"]  # the bindings after the bad one too
    assert list(h.history[("gpua100", KEY[1])]) == ["u0", "u1", "u2", "u3"]  # and the pools after it


def test_a_file_over_the_bound_is_refused_unread(tmp_path, caplog):
    path = tmp_path / "h.json"
    with open(path, "wb") as f:
        f.truncate(2**36)  # 64 GiB, sparse: read whole, the hub would stall or run out of memory
    h = HistoryFile(path).attach(PoolHistory(lambda: CFG))
    assert h.history == {} and f"{2**36} bytes, over the {MAX_FILE_BYTES}" in caplog.text  # its size, by stat


def test_the_hub_loads_the_file_off_its_event_loop(tmp_path, monkeypatch):
    """A big valid file is read and parsed in a worker thread, never on the loop's (which serves every user's
    picker meanwhile): checked by the threads the read and the parse run in, not by wall-clock gaps that a
    loaded machine would make up."""
    import threading

    import jupyterhub_gpu.hub.pool_history_file as module

    pools = [{"pool": f"pool{k}", "resource": KEY[1], "bindings": [
        [f"u{i}", (T0 + timedelta(minutes=i)).isoformat(), (T0 + timedelta(minutes=i + 5)).isoformat()]
        for i in range(MAX_HISTORY)]} for k in range(30)]
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"version": 1, "pools": pools}))
    ran_in = []
    real_parse = module.parse
    monkeypatch.setattr(module, "parse", lambda data: (ran_in.append(threading.get_ident()), real_parse(data))[1])

    async def run():
        loop_thread = threading.get_ident()
        return await HistoryFile(path).load(PoolHistory(lambda: CFG)), loop_thread

    h, loop_thread = asyncio.run(run())
    assert len(h.history) == 30 and all(len(hist) == MAX_HISTORY for hist in h.history.values())
    assert ran_in and loop_thread not in ran_in, "the file was parsed on the event loop's thread"


def test_a_save_is_on_disk_before_the_rename(tmp_path, monkeypatch):
    path, order = tmp_path / "h.json", []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr("jupyterhub_gpu.hub.pool_history_file.os.fsync",
                        lambda fd: (order.append(("fsync", os.fstat(fd).st_size)), real_fsync(fd)))
    monkeypatch.setattr("jupyterhub_gpu.hub.pool_history_file.os.replace",
                        lambda a, b: (order.append(("replace", None)), real_replace(a, b)))
    HistoryFile(path).save(b'{"version":1,"pools":[]}')
    assert order == [("fsync", 24), ("replace", None)] and path.read_bytes() == b'{"version":1,"pools":[]}'
