"""bench/hub_seed.py: a seeded database holds what the hub's start needs to keep a server running (a
Spawner row with a Server, its state and OAuth client, the user with the `user` role)."""
from __future__ import annotations

from datetime import datetime, timedelta

from jupyterhub import orm

from bench.hub_seed import SeededServer, seed


def test_seeded_servers_are_running_rows_with_their_times_and_options(tmp_path):
    url = f"sqlite:///{tmp_path}/jupyterhub.sqlite"
    now = datetime(2026, 1, 1, 12)
    servers = [SeededServer("ann", now - timedelta(hours=2), now - timedelta(hours=3), {"profile": "t4"}),
               SeededServer("bob@x", now, now - timedelta(hours=3), {"profile": "cpu"})]
    assert seed(url, servers, "http://127.0.0.1:4321") == 2

    db = orm.new_session_factory(url)()
    try:
        ann, bob = orm.User.find(db, "ann"), orm.User.find(db, "bob@x")
        assert [r.name for r in ann.roles] == ["user"]
        spawner = ann.orm_spawners[""]
        assert spawner.server_id is not None and spawner.state == {}
        server = spawner.server
        assert (server.proto, server.ip, server.port, server.base_url) == ("http", "127.0.0.1", 4321, "/user/ann/")
        assert (spawner.last_activity, spawner.started) == (now - timedelta(hours=2), now - timedelta(hours=3))
        assert spawner.user_options == {"profile": "t4"}
        assert spawner.oauth_client.identifier == "jupyterhub-user-ann"
        assert bob.orm_spawners[""].server.base_url == "/user/bob@x/"
        assert bob.last_activity == now
    finally:
        db.close()
