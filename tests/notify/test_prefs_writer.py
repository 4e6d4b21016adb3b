"""Preference writes never stall gpu-jobs' event loop (issue 50 item 5): saving, confirming or deleting
notification preferences wrote SQLite on the loop and waited behind the outbox's transactions (184 ms behind 2,000
cull warnings, 434 ms behind 20,000 job statuses), so every user's request waited. They run in the store's one
writer thread now; the handlers await them."""
from __future__ import annotations

import asyncio
import sqlite3

from security.stalls import loop_stall

from jupyterhub_gpu.services.notify.prefs import PreferenceStore

PREFS = {"channels": {"team-slack": ["failed"]}, "email": "alice@example.org"}


async def test_writes_wait_behind_another_writer_in_their_thread_not_on_the_loop(tmp_path):
    path = tmp_path / "notify.sqlite"
    store = PreferenceStore(str(path))
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        async def save_behind_the_lock():
            other.execute("BEGIN IMMEDIATE")  # the outbox's transaction, say, holds the write lock
            save = asyncio.create_task(store.put_async("alice", PREFS, ["data-science"]))
            await asyncio.sleep(0.5)
            assert not save.done()  # waiting for the lock, in the writer thread
            other.execute("COMMIT")
            saved = await asyncio.wait_for(save, 10)
            code = await store.new_confirmation_async("alice", "alice@example.org")
            assert await store.confirm_async(code, "alice")
            assert store.get("alice")["email_confirmed"] == "alice@example.org"
            await store.delete_async("alice")
            assert saved["groups"] == ["data-science"] and store.get("alice") is None

        stall = await loop_stall(save_behind_the_lock)
        assert stall < 0.25, f"the loop stalled {stall * 1e3:.0f} ms while a write waited"  # 0.5 s on it before
    finally:
        other.close()
        store.close()


async def test_one_writer_keeps_a_users_saves_in_order(tmp_path):
    store = PreferenceStore(str(tmp_path / "notify.sqlite"))
    try:
        await asyncio.gather(*(store.put_async("alice", {**PREFS, "channels": {"team-slack": [str(i)]}}, [])
                               for i in range(50)))
        assert store.get("alice")["channels"] == {"team-slack": ["49"]}
        reopened = PreferenceStore(store.path)
        assert reopened.get("alice")["channels"] == {"team-slack": ["49"]}
        reopened.close()
    finally:
        store.close()
