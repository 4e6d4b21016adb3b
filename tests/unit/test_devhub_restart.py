"""The dev hub (SIMULATOR side) restarted on its state, as the faulted day replay and the fault tests do: it
keeps its loopback ports and its cookie secret, as a z2jh hub keeps its Services and its Secret."""
from __future__ import annotations


def test_a_dev_hub_started_again_on_its_state_answers_on_the_same_ports(tmp_path):
    """Servers and services that outlive a hub's restart keep the hub's API address in their environment, as
    behind z2jh's Services; a kept port something else holds meanwhile is chosen anew."""
    import json
    import socket

    from jupyterhub_gpu_dev.devhub import stable_port

    first = {name: stable_port(tmp_path, name) for name in ("hub-api", "proxy-api", "gpu-jobs")}
    assert len(set(first.values())) == 3
    assert {name: stable_port(tmp_path, name) for name in first} == first
    with socket.socket() as held:
        held.bind(("127.0.0.1", first["gpu-jobs"]))
        held.listen()
        moved = stable_port(tmp_path, "gpu-jobs")
    assert moved != first["gpu-jobs"] and stable_port(tmp_path, "gpu-jobs") == moved
    stable_port(tmp_path / "other", "hub-api")  # another hub: ports of its own, in its own state
    assert set(json.loads((tmp_path / "other" / "ports.json").read_text())) == {"hub-api"}


def test_a_dev_hub_keeps_its_cookie_secret_across_starts(tmp_path):
    from jupyterhub_gpu_dev.devhub import DevHub, HubSettings

    hub = DevHub.__new__(DevHub)  # only the secret's part of start(): no cluster, no process
    hub.settings = HubSettings(state_dir=tmp_path, profiles=tmp_path / "p.yaml", kubeconfig=tmp_path / "k")
    first = hub.cookie_secret()
    assert len(first) == 64 and (tmp_path / "cookie_secret").stat().st_mode & 0o777 == 0o600
    assert hub.cookie_secret() == first
