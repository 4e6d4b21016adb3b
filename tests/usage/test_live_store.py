"""The usage store (services/usage/store.py, SQLite) and its read-only views (live.py): every range query
gives what filtering a full read gives, through appends, duplicates, prunes and open.json changes; a view's
query is an index range, never a scan; a crash mid-write loses only that transaction; the JSON-lines store
of the version before is imported once, its bad lines skipped. Real files, the real collector's writers."""
from __future__ import annotations

import json
import os
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.services.usage.accounting import Lifetime
from jupyterhub_gpu.services.usage.live import UsageReader
from jupyterhub_gpu.services.usage.store import LEGACY_NAME, UsageStore

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
USERS = ("alice", "bob", "carol")
TEAMS = ("", "vision", "nlp")


def lifetime(uid: str, user: str, day: int, open_: bool = False, hours: int = 2, team: str = "") -> Lifetime:
    start = T0 + timedelta(days=day, minutes=7)
    return Lifetime(uid, "job" if team else "server", "jhub", f"jupyter-{user}", user, team, "h100-full",
                    "j" if team else "", 1, 6.98, start, None if open_ else start + timedelta(hours=hours))


def uid_of(lt: Lifetime) -> str:
    return lt.uid


def overlaps(lt: Lifetime, since: datetime, until: datetime) -> bool:
    return lt.start <= until and (lt.end is None or lt.end >= since)


op = st.one_of(
    st.tuples(st.just("append"), st.lists(st.tuples(st.integers(0, 30), st.sampled_from(USERS),
                                                     st.integers(0, 20), st.sampled_from((1, 2, 30 * 24)),
                                                     st.sampled_from(TEAMS)), max_size=8)),
    st.tuples(st.just("prune"), st.integers(0, 20)),
    st.tuples(st.just("open"), st.lists(st.tuples(st.integers(0, 30), st.sampled_from(USERS)), max_size=4)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(op, max_size=12), st.integers(0, 25), st.integers(0, 10))
def test_every_range_query_is_what_filtering_a_full_read_gives(tmp_path_factory, ops, first, days):
    store = UsageStore(tmp_path_factory.mktemp("store"))
    reader = UsageReader(store.dir)
    since, until = T0 + timedelta(days=first), T0 + timedelta(days=first + days)
    model: dict[str, Lifetime] = {}  # the first write of a uid wins
    for kind, arg in ops:
        if kind == "append":
            batch = [lifetime(f"u{n}", user, day, hours=h, team=team) for n, user, day, h, team in arg]
            store.append_finished(batch)
            for lt in batch:
                model.setdefault(lt.uid, lt)
        elif kind == "prune":
            store.prune(T0 + timedelta(days=arg))
            model = {uid: lt for uid, lt in model.items() if lt.end >= T0 + timedelta(days=arg)}
        else:
            store.save_open({f"u{n}": lifetime(f"u{n}", user, 10, open_=True) for n, user in arg}, T0)
        assert store.finished() == list(model.values())  # all of it, in the order written
        opened = store.load_open()[0]
        for user in (*USERS, None):
            for team in (None, *TEAMS):
                got = reader.lifetimes(user, since, until, team)
                assert len(got) == len({lt.uid for lt in got})  # each lifetime once
                want = [lt for lt in model.values() if overlaps(lt, since, until)
                        and (user is None or lt.user == user) and (team is None or lt.team == team)]
                want += [lt for uid, lt in opened.items() if uid not in model
                         and (user is None or lt.user == user) and (team is None or lt.team == team)]
                assert sorted(got, key=uid_of) == sorted(want, key=uid_of), (kind, user, team)
    reader.close()
    store.close()


def test_a_views_query_is_an_index_range_never_a_scan(tmp_path):
    everything = [lifetime(f"x{i}", f"user{i % 100}", i % 30, team=TEAMS[i % 3]) for i in range(3000)]
    UsageStore(tmp_path).append_finished(everything)
    reader = UsageReader(tmp_path)
    statements = []
    conn = reader._conn()
    conn.set_trace_callback(statements.append)
    since, until = T0 + timedelta(days=20), T0 + timedelta(days=28)
    for user, team in (("user7", None), (None, "vision"), (None, None)):
        want = [lt for lt in everything if overlaps(lt, since, until)
                and user in (None, lt.user) and team in (None, lt.team)]
        assert reader.finished(since, until, user, team) == want and 0 < len(want) < len(everything) / 3
    selects = [s for s in statements if s.startswith("SELECT uid")]
    assert len(selects) == 3
    for sql in selects:
        plan = " ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql))
        assert "USING INDEX finished_" in plan and "SCAN finished" not in plan, plan
    reader.close()


def test_the_reader_creates_nothing_and_cannot_write(tmp_path):
    missing = tmp_path / "nothing"
    reader = UsageReader(missing)
    assert reader.lifetimes(None, T0, T0) == [] and not missing.exists()
    UsageStore(missing).append_finished([lifetime("late", "alice", 1)])  # the collector starts later
    assert [lt.uid for lt in reader.lifetimes("alice", T0, T0 + timedelta(days=2))] == ["late"]
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader._conn().execute("DELETE FROM finished")
    reader.close()


def test_a_crash_mid_write_loses_only_that_transaction(tmp_path):
    store = UsageStore(tmp_path)
    store.append_finished([lifetime("kept", "alice", 1)])

    def cycle():
        yield lifetime("lost-1", "alice", 2)
        raise RuntimeError("the collector dies mid-cycle")

    with pytest.raises(RuntimeError):
        store.append_finished(cycle())
    assert [lt.uid for lt in UsageStore(tmp_path).finished()] == ["kept"]
    assert store.append_finished([lifetime("next", "bob", 3), lifetime("kept", "bob", 9)]) == 1  # first wins
    assert [(lt.uid, lt.user) for lt in UsageStore(tmp_path).finished()] == [("kept", "alice"), ("next", "bob")]


def test_prune_deletes_in_bounded_batches(tmp_path):
    store = UsageStore(tmp_path)
    store.append_finished([lifetime(f"old{i}", "alice", i) for i in range(7)] + [lifetime("new", "bob", 20)])
    statements = []
    store.conn.set_trace_callback(statements.append)
    assert store.prune(T0 + timedelta(days=10), batch=2) == 7
    assert sum(s.startswith("DELETE") for s in statements) == 4  # 2 + 2 + 2 + 1, each its own transaction
    assert statements.count("COMMIT") == 4 and [lt.uid for lt in store.finished()] == ["new"]


def test_the_json_lines_store_is_imported_once(tmp_path):
    lines = [json.dumps(lifetime("a", "alice", 1).to_json()), json.dumps(lifetime("b", "bob", 2).to_json()),
             json.dumps(lifetime("a", "mallory", 3).to_json()),  # a later line of a uid: the first won, still
             json.dumps(lifetime("open", "bob", 2, open_=True).to_json()),  # no end: not a finished row
             '{"uid": "torn", "user": "alice", "start": "2026-03-0']  # a crash mid-line
    (tmp_path / LEGACY_NAME).write_text("\n".join(lines))
    store = UsageStore(tmp_path)
    assert [(lt.uid, lt.user) for lt in store.finished()] == [("a", "alice"), ("b", "bob")]
    assert store.finished()[0] == lifetime("a", "alice", 1)  # every field as it was
    assert not (tmp_path / LEGACY_NAME).exists() and (tmp_path / (LEGACY_NAME + ".imported")).exists()
    assert store.import_jsonl() == 0 and len(UsageStore(tmp_path).finished()) == 2  # nothing left to import
    # a crash between the import's commit and the rename: the next start adds nothing twice
    os.replace(tmp_path / (LEGACY_NAME + ".imported"), tmp_path / LEGACY_NAME)
    assert store.import_jsonl() == 0 and not (tmp_path / LEGACY_NAME).exists()
    assert [(lt.uid, lt.user) for lt in UsageStore(tmp_path).finished()] == [("a", "alice"), ("b", "bob")]


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids,
                                                                                     max_size=3), max_leaves=6)
FIELDS = list(lifetime("x", "alice", 1).to_json())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(FIELDS), json_values), max_size=3), st.binary(max_size=30))
def test_hostile_lines_are_skipped_and_never_stop_the_import(tmp_path_factory, damage, junk):
    folder = tmp_path_factory.mktemp("legacy")
    bad = {**lifetime("bad", "eve", 2).to_json(), **dict(damage)}
    good = [json.dumps(lifetime(f"g{i}", "alice", i).to_json()) for i in range(3)]
    (folder / LEGACY_NAME).write_bytes(
        "\n".join([good[0], json.dumps(bad), good[1]]).encode() + b"\n" + junk + b"\n" + good[2].encode())
    store = UsageStore(folder)  # the collector's start: never fails over a bad line
    uids = [lt.uid for lt in store.finished()]
    assert uids[:1] == ["g0"] and {"g1", "g2"} <= set(uids) and set(uids) <= {"g0", "g1", "g2", "bad"}
    for lt in store.finished():  # what was kept reads back whole
        assert isinstance(lt.user, str) and type(lt.gpus) is int and lt.end is not None
    store.close()


def test_the_pages_view_reads_its_rows_in_a_thread(tmp_path, monkeypatch):
    import asyncio
    import threading

    from jupyterhub_gpu.services.usage.web import usage_view

    store = UsageStore(tmp_path)
    everything = [lifetime(f"x{i}", USERS[i % 3], i % 30) for i in range(90)]
    store.append_finished(everything)
    store.save_open({"run": lifetime("run", "bob", 24, open_=True)}, T0)
    reader, threads = UsageReader(tmp_path), []
    real = reader.lifetimes
    monkeypatch.setattr(reader, "lifetimes", lambda *a: threads.append(threading.current_thread()) or real(*a))
    since, until = T0 + timedelta(days=20), T0 + timedelta(days=27)

    async def go():
        mine = (await usage_view(reader, None, "alice", since, until))[0]
        everyone = (await usage_view(reader, None, None, since, until))[0]
        return mine, everyone, threading.current_thread()

    mine, everyone, loop_thread = asyncio.run(go())
    shown = {u: sum(lt.user == u and overlaps(lt, since, until) for lt in everything) for u in USERS}
    assert [r["key"] for r in mine] == ["h100-full"] and mine[0]["pods"] == shown["alice"] > 0
    shown["bob"] += 1  # bob's running one too
    assert {r["key"]: r["pods"] for r in everyone} == shown
    assert len(threads) == 2 and loop_thread not in threads
    reader.close()
