"""`gpuhub dev` without a cluster: users for any profiles file, a strict `--users` file, the start summary,
the DevAuthenticator's loopback-only guard, and the signal rules of a stop that always completes."""
from __future__ import annotations

import os
import signal

import pytest
from jupyterhub.app import JupyterHub

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles
from jupyterhub_gpu.model.validation import parse_profiles_text
from jupyterhub_gpu.tools.cli import main as gpuhub
from jupyterhub_gpu_dev import devsetup, stopping
from jupyterhub_gpu_dev.devauth import DevAuthenticator, NotLoopbackError

OWN_FILE = """
pools:
  cpu: {node_selector: {agentpool: cpu}}
  t4: {node_selector: {agentpool: t4}, taints: [{key: sku, value: gpu}], gpu: {model: T4},
       sharing: {strategy: time-slicing, replicas: 2}}
profiles:
  - {slug: small, display_name: Small, pool: cpu}
  - {slug: t4, display_name: T4, pool: t4, gpu: {kind: time-sliced}, groups: [Vision Lab, research]}
  - {slug: t4-private, display_name: T4 private, pool: t4, gpu: {kind: time-sliced}, groups: [research]}
teams:
  research: {namespace: team-research, cohort: gpu, quota: {t4: 4}, borrowing_limit: 1}
"""


def test_demo_users_one_per_team_and_group_of_the_file_and_admin_in_all():
    cfg = parse_profiles_text(OWN_FILE, source="own.yaml")
    users = devsetup.demo_users(cfg)
    assert users == {"research-user": ["research"], "vision-lab-user": ["Vision Lab"],
                     "admin": ["research", "Vision Lab"]}
    assert devsetup.login_lines(users)[0] == "log in as `research-user` (groups: research)"
    assert devsetup.login_lines(users)[-1].endswith("(groups: research, Vision Lab; hub admin)")


def test_demo_user_names_never_collide():
    cfg = parse_profiles_text(OWN_FILE.replace("[Vision Lab, research]", "[vision lab, Vision-Lab, admin]"),
                              source="own.yaml")
    users = devsetup.demo_users(cfg)
    assert users["vision-lab-user"] == ["vision lab"] and users["vision-lab-2-user"] == ["Vision-Lab"]
    assert users["admin-user"] == ["admin"] and "admin" in users["admin"]


def test_users_file_is_checked_entry_by_entry():
    assert devsetup.parse_users("ana: [research]\nbo: []\ncy:\n") == {"ana": ["research"], "bo": [], "cy": []}
    with pytest.raises(devsetup.UsersError) as e:
        devsetup.parse_users("Ana: [x]\n'../etc': [x]\nbo: research\ncy: [1]\nok: [fine]\n", "users.yaml")
    msg = str(e.value)
    assert msg.startswith("users.yaml:")
    for bad in ("'Ana'", "'../etc'", "'bo'", "'cy'"):
        assert f"user {bad}" in msg
    assert "'ok'" not in msg
    for text in ("", "- a\n- b\n", "a: [", "{}"):
        with pytest.raises(devsetup.UsersError):
            devsetup.parse_users(text)
    with pytest.raises(devsetup.UsersError, match="at most"):
        devsetup.parse_users("\n".join(f"u{i}: []" for i in range(devsetup.MAX_USERS + 1)))


def test_unknown_groups_are_named():
    cfg = parse_profiles_text(OWN_FILE, source="own.yaml")
    assert devsetup.unknown_groups({"a": ["research", "reserch"]}, cfg) == ["reserch"]


def test_bad_users_file_exits_2_before_anything_starts(tmp_path, capsys):
    bad = tmp_path / "users.yaml"
    bad.write_text("Robert'); DROP: [x]\n")
    assert gpuhub(["dev", "--users", str(bad)]) == 2
    assert "users.yaml" in capsys.readouterr().err
    assert gpuhub(["dev", "--users", str(tmp_path / "missing.yaml")]) == 2
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"a: [b]\n" * 60000)
    assert gpuhub(["dev", "--users", str(huge)]) == 2
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00a: [b]")
    assert gpuhub(["dev", "--users", str(binary)]) == 2
    assert gpuhub(["dev", "--port", "70000"]) == 2


def test_summary_shows_pools_as_nodes_and_team_quotas():
    cfg = load_profiles(EXAMPLE_PROFILES)
    nodes = devsetup.node_lines(cfg, 2)
    assert any(ln.strip().startswith("gput4: 2 nodes") and "1× T4 each, time-sliced 4 ways" in ln for ln in nodes)
    assert any(ln.strip().startswith("gpumig:") and "MIG 7× 1g.10gb per GPU" in ln for ln in nodes)
    assert any("spota100" in ln and ln.endswith(", spot") for ln in nodes)
    own = parse_profiles_text(OWN_FILE, source="own.yaml")
    assert devsetup.quota_lines(own) == ["  team research (namespace team-research): t4 4; borrows up to 1"]


@pytest.mark.parametrize("settings", [{"ip": "0.0.0.0"}, {"ip": ""}, {"ip": "127.0.0.1", "hub_ip": "0.0.0.0"},
                                      {"ip": "127.0.0.1", "hub_bind_url": "http://10.1.2.3:8081"},
                                      {"bind_url": "http://hub.example.com:8000"}])
def test_dev_authenticator_refuses_a_hub_beyond_loopback(settings):
    with pytest.raises(NotLoopbackError, match="refuses to run on a hub that listens beyond loopback"):
        DevAuthenticator(parent=JupyterHub(**settings))


def test_dev_authenticator_loads_on_loopback_only_hubs():
    assert DevAuthenticator(parent=JupyterHub(ip="127.0.0.1")).manage_groups
    assert DevAuthenticator(parent=JupyterHub(bind_url="http://localhost:8000"))
    with pytest.raises(NotLoopbackError):
        DevAuthenticator()  # no hub to check: not loaded


@pytest.fixture
def handlers():
    before = {sig: signal.getsignal(sig) for sig in stopping.SIGNALS}
    said: list[str] = []
    saved = stopping.install(said.append)
    yield said
    stopping.restore(saved)
    assert {sig: signal.getsignal(sig) for sig in stopping.SIGNALS} == before
    stopping.stopping.clear()
    stopping.hurry.clear()


def test_first_signal_interrupts_later_ones_only_hurry(handlers):
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)
    assert stopping.stopping.is_set() and not stopping.hurry.is_set()
    os.kill(os.getpid(), signal.SIGINT)  # no exception: the cleanup goes on
    assert stopping.hurry.is_set()
    os.kill(os.getpid(), signal.SIGINT)
    assert handlers[0].startswith("SIGTERM: stopping") and handlers[1].startswith("SIGINT again: stopping faster")
    assert handlers[2].startswith("SIGINT: still stopping") and len(handlers) == 3


def test_a_signal_inside_critical_waits_for_the_block_to_end(handlers):
    done = []
    with pytest.raises(KeyboardInterrupt):
        with stopping.critical():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("spawned and recorded")
    assert done == ["spawned and recorded"]


def test_begin_makes_every_signal_a_hurry(handlers):
    stopping.begin()
    os.kill(os.getpid(), signal.SIGHUP)
    assert stopping.hurry.is_set()


def test_dev_authenticator_gives_groups_to_the_name_the_hub_keeps(tmp_path):
    """JupyterHub lower-cases user names; groups must follow the stored name, not the typed one."""
    import asyncio

    groups = tmp_path / "groups.yaml"
    groups.write_text("alice: [data-science]\n")
    auth = DevAuthenticator(parent=JupyterHub(ip="127.0.0.1"), groups_file=str(groups))
    said = asyncio.run(auth.authenticate(None, {"username": "  Alice "}))
    assert said == {"name": "alice", "groups": ["data-science"]}
    assert asyncio.run(auth.authenticate(None, {"username": "bob"})) == {"name": "bob", "groups": []}
    assert asyncio.run(auth.authenticate(None, {"username": "  "})) is None
