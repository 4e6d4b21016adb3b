"""The usage store as the page and the picker keep it (services/usage/live.py): always what a full read of
the files gives (UsageStore.finished + open.json), through appends, torn writes, duplicates and prunes, while
a view parses only what changed and reads only its user's rows. Real files, the real collector's writers."""
from __future__ import annotations

import asyncio
import os
from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_spawner.services.usage import live as live_mod
from gpu_spawner.services.usage.accounting import Lifetime
from gpu_spawner.services.usage.live import LiveStore
from gpu_spawner.services.usage.store import UsageStore

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
USERS = ("alice", "bob", "carol")


def lifetime(uid: str, user: str, day: int, open_: bool = False) -> Lifetime:
    start = T0 + timedelta(days=day)
    return Lifetime(uid, "server", "jhub", f"jupyter-{user}", user, "", "h100-full", "", 1, 6.98, start,
                    None if open_ else start + timedelta(hours=2))


def expected(store: UsageStore, user: str | None, since: datetime, until: datetime) -> set[str]:
    """What a full read says a view holds: the finished ones (first line of a uid), open ones not finished."""
    finished = {lt.uid: lt for lt in store.finished()}
    opened = store.load_open()[0]
    lts = [*finished.values(), *(lt for uid, lt in opened.items() if uid not in finished)]
    return {lt.uid for lt in lts if (user is None or lt.user == user)
            and (user is not None or lt.end is None or lt.end >= since)}


op = st.one_of(
    st.tuples(st.just("append"), st.lists(st.tuples(st.integers(0, 30), st.sampled_from(USERS),
                                                     st.integers(0, 20)), max_size=8)),
    st.tuples(st.just("torn"), st.integers(1, 40)),
    st.tuples(st.just("prune"), st.integers(0, 20)),
    st.tuples(st.just("open"), st.lists(st.tuples(st.integers(0, 30), st.sampled_from(USERS)), max_size=4)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(op, max_size=12))
def test_the_kept_store_is_always_what_a_full_read_gives(tmp_path_factory, ops):
    store = UsageStore(tmp_path_factory.mktemp("store"))
    live = LiveStore(store.dir)
    live.wait_s = 60  # each view waits for its refresh here (the test compares right after each change)
    since, until = T0 + timedelta(days=5), T0 + timedelta(days=25)

    async def go():
        for kind, arg in ops:
            if kind == "append":
                store.append_finished([lifetime(f"u{n}", user, day) for n, user, day in arg])
            elif kind == "torn":  # a crash mid-line: the next append continues on the same line
                with store.finished_path.open("a") as f:
                    f.write('{"uid": "torn", "user": "alice", "start": "2026-03-0'[:arg])
            elif kind == "prune":
                store.prune(T0 + timedelta(days=arg))
            else:
                store.save_open({f"u{n}": lifetime(f"u{n}", user, 10, open_=True) for n, user in arg}, T0)
            await live.refresh()
            for user in (*USERS, None):
                got = [lt.uid for lt in live.lifetimes(user, since, until)]
                assert len(got) == len(set(got))  # each lifetime once
                assert set(got) == expected(store, user, since, until), (kind, user)
        live.close()

    asyncio.run(go())


def test_a_view_parses_only_what_the_collector_appended_and_a_prune_reloads(tmp_path, monkeypatch):
    parsed = []
    real = live_mod.parse_lines
    monkeypatch.setattr(live_mod, "parse_lines", lambda data: parsed.append(data.count(b"\n")) or real(data))
    store = UsageStore(tmp_path)
    store.append_finished([lifetime(f"a{i}", USERS[i % 3], i % 20) for i in range(300)])
    live = LiveStore(tmp_path)
    live.wait_s = 60

    async def go():
        await live.refresh()
        assert parsed == [300] and len(live.index) == 300
        await live.refresh()  # nothing changed: nothing parsed
        assert parsed[-1] == 0
        store.append_finished([lifetime("b1", "bob", 3), lifetime("b2", "bob", 4)])
        await live.refresh()
        assert parsed[-1] == 2 and {"b1", "b2"} <= {lt.uid for lt in live.lifetimes("bob", T0, T0)}
        store.prune(T0 + timedelta(days=10))  # a new file by rename: read whole, older lifetimes gone
        await live.refresh()
        assert parsed[-1] == len(store.finished()) and len(live.index) == len(store.finished())
        assert all(lt.end >= T0 + timedelta(days=10) for lt in live.lifetimes("bob", T0, T0))
        live.close()

    asyncio.run(go())


def test_a_users_view_reads_only_that_users_rows(tmp_path):
    store = UsageStore(tmp_path)
    store.append_finished([lifetime(f"x{i}", f"user{i % 100}", i % 30) for i in range(3000)])
    live = LiveStore(tmp_path)

    async def go():
        await live.refresh()
        assert len(live.index.of_user("user7")) == 30  # the rows the view aggregates: its own only
        assert len(live.lifetimes("user7", T0, T0 + timedelta(days=30))) == 30
        # the admins' view over a week reads that week's days only
        week = live.index.ended_since(T0 + timedelta(days=20), T0 + timedelta(days=27))
        assert len(week) == 8 * 100  # days 20..27 (the last day's end is after `until`: aggregate drops it)
        assert all(lt.end >= T0 + timedelta(days=20) for lt in week)
        live.close()

    asyncio.run(go())


def test_no_store_folder_is_an_empty_view_and_creates_nothing(tmp_path):
    missing = tmp_path / "nothing"
    live = LiveStore(missing)
    asyncio.run(live.refresh())
    assert live.lifetimes(None, T0, T0) == [] and not missing.exists()
    os.makedirs(missing)
    UsageStore(missing).append_finished([lifetime("late", "alice", 1)])  # the collector starts later
    asyncio.run(live.refresh())
    assert [lt.uid for lt in live.lifetimes("alice", T0, T0)] == ["late"]
    live.close()


def test_views_keep_the_old_index_while_a_pruned_store_is_read_again(tmp_path):
    store = UsageStore(tmp_path)
    store.append_finished([lifetime(f"x{i}", "alice", i % 30) for i in range(5000)])
    live = LiveStore(tmp_path)

    async def go():
        await live.refresh()  # the first load: waited for (nothing to show before it)
        assert len(live.lifetimes("alice", T0, T0)) == 5000
        store.prune(T0 + timedelta(days=15))
        live.wait_s = 0
        await live.refresh()  # the re-read runs in a thread; this view does not wait for it
        assert len(live.lifetimes("alice", T0, T0)) == 5000
        if live._pending is not None:
            await live._pending
        assert len(live.lifetimes("alice", T0, T0)) == len(store.finished()) < 5000
        live.close()

    asyncio.run(go())
