"""devcluster/jupyterhub_gpu_dev/z2jh_dev.py, the pure parts of `gpuhub dev --z2jh`: the explained dev overlay on
deploy/values.yaml, the hub database's static volume, and the image names the deploy files pull (no cluster, no
helm)."""
from __future__ import annotations

import copy
import re

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu_dev import z2jh, z2jh_dev
from jupyterhub_gpu_dev.simulator_keys import DEV_AGENT_LABEL

USERS = {"alice": ["data-science"], "bob": ["ml-research", "data-science"], "carol": []}


def values() -> dict:
    return yaml.safe_load(z2jh.VALUES.read_text())


def merge(base, over):
    """Helm's merge of a values file over another: maps merge key by key, anything else replaces."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = copy.deepcopy(base)
        for k, v in over.items():
            out[k] = merge(base.get(k), v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def merged(users=USERS, password="s3cret") -> dict:
    return merge(values(), yaml.safe_load(z2jh_dev.overlay(users, password)))


# ------------------------------------------------------------------------------------------------ overlay
def test_overlay_parses_and_only_touches_known_sections():
    over = yaml.safe_load(z2jh_dev.overlay(USERS, "pw"))
    assert set(over) == {"proxy", "prePuller", "scheduling", "singleuser", "hub"}
    assert set(over) <= set(values())  # each merges onto a section deploy/values.yaml has


def test_overlay_proxy_is_a_node_port():
    m = merged()
    assert m["proxy"]["service"]["type"] == "NodePort"
    assert m["proxy"]["service"]["nodePorts"]["http"] == z2jh_dev.NODE_PORT
    assert 30000 <= z2jh_dev.NODE_PORT <= 32767  # the API server's default NodePort range
    assert m["proxy"]["chp"] == values()["proxy"]["chp"]  # the values file's proxy policy is kept


def test_overlay_turns_off_pullers_and_the_user_scheduler():
    m = merged()
    assert m["prePuller"]["hook"]["enabled"] is False
    assert m["prePuller"]["continuous"]["enabled"] is False
    assert m["scheduling"]["userScheduler"]["enabled"] is False
    assert m["scheduling"]["userPlaceholder"]["enabled"] is False


def test_overlay_keeps_the_values_files_hub():
    base, m = values(), merged()
    for key in ("image", "extraVolumes", "extraVolumeMounts", "extraEnv", "extraConfig", "service", "networkPolicy"):
        assert m["hub"][key] == base["hub"][key], key
    assert {k: v for k, v in m["singleuser"].items() if k != "extraLabels"} == base["singleuser"]
    assert m["singleuser"]["extraLabels"] == {DEV_AGENT_LABEL: "run"}  # for the KWOK pools' servers (dev agent)
    assert m["cull"] == base["cull"]


def test_overlay_dummy_login_with_groups():
    config = merged(USERS, "s3cret")["hub"]["config"]
    assert config["JupyterHub"]["authenticator_class"] == "dummy"
    assert config["JupyterHub"]["load_groups"] == {
        "data-science": {"users": ["alice", "bob"]},
        "ml-research": {"users": ["bob"]},
    }
    assert config["DummyAuthenticator"]["password"] == "s3cret"
    assert config["Authenticator"]["allowed_users"] == ["alice", "bob", "carol"]
    assert config["Authenticator"]["admin_users"] == ["alice"]  # no admin group: the first user


def test_overlay_admins_are_the_admin_group():
    users = {"zed": ["admin"], "amy": [], "yan": ["admin", "ml-research"]}
    auth = merged(users)["hub"]["config"]["Authenticator"]
    assert auth["admin_users"] == ["yan", "zed"]
    assert auth["allowed_users"] == ["amy", "yan", "zed"]


def test_overlay_group_members_are_sorted():
    users = {"zoe": ["g"], "adam": ["g"], "mia": ["g"]}
    groups = merged(users)["hub"]["config"]["JupyterHub"]["load_groups"]
    assert groups == {"g": {"users": ["adam", "mia", "zoe"]}}


def test_overlay_explains_itself():
    text = z2jh_dev.overlay(USERS, "pw")
    assert text.splitlines()[0].startswith("#")  # what the file is
    blocks = re.split(r"^(?=[A-Za-z])", text, flags=re.M)
    top = [b for b in blocks if b and not b.startswith("#")]
    assert [b.split(":", 1)[0] for b in top] == ["proxy", "prePuller", "scheduling", "singleuser", "hub"]
    for block in top:
        assert "#" in block, f"the top-level block {block.splitlines()[0]!r} has no comment"
    # every top-level line is a comment or a key of the overlay
    for line in text.splitlines():
        if line and not line[0].isspace():
            assert line.startswith("#") or re.fullmatch(r"[A-Za-z]+:", line), line


HOSTILE = ["a: b", "- x", "'quoted'", '"dq"', "#hash", "&anchor", "*alias", "!tag", "{flow}", "[seq]", "yes", "null",
           "~", "0123", "1e3", "@at", "`tick`", "%pct", "a #b", " lead", "trail ", "multi\nline", "tab\there", "é ü",
           "back\\slash", "|", ">", "? q", "---", "...", "<<"]


def roundtrip(users: dict[str, list[str]], password: str) -> dict:
    return yaml.safe_load(z2jh_dev.overlay(users, password))["hub"]["config"]


def expected_groups(users):
    groups: dict[str, set] = {}
    for u, gs in users.items():
        for g in gs:
            groups.setdefault(g, set()).add(u)
    return {g: {"users": sorted(us)} for g, us in groups.items()}


def test_hostile_names_survive_the_yaml_round_trip():
    users = {name: [HOSTILE[(i + 1) % len(HOSTILE)], "admin" if i % 3 == 0 else "x"] for i, name in enumerate(HOSTILE)}
    config = roundtrip(users, "a: b # c")
    assert config["Authenticator"]["allowed_users"] == sorted(users)
    assert config["Authenticator"]["admin_users"] == sorted(u for u, g in users.items() if "admin" in g)
    assert config["JupyterHub"]["load_groups"] == expected_groups(users)
    assert config["DummyAuthenticator"]["password"] == "a: b # c"
    assert config["JupyterHub"]["authenticator_class"] == "dummy"


names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)


@settings(max_examples=50)
@given(users=st.dictionaries(names, st.lists(names, max_size=3, unique=True), min_size=1, max_size=5),
       password=st.text(st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_any_names_survive_the_yaml_round_trip(users, password):
    config = roundtrip(users, password)
    assert config["Authenticator"]["allowed_users"] == sorted(users)
    admins = sorted(u for u, g in users.items() if "admin" in g) or sorted(users)[:1]
    assert config["Authenticator"]["admin_users"] == admins
    assert config["JupyterHub"]["load_groups"] == expected_groups(users)
    assert config["DummyAuthenticator"]["password"] == password
    over = yaml.safe_load(z2jh_dev.overlay(users, password))
    assert set(over) == {"proxy", "prePuller", "scheduling", "singleuser", "hub"} and set(over["hub"]) == {"config"}


# ------------------------------------------------------------------------------------------------ hub database
def test_hub_db_volume(tmp_path):
    pv = z2jh_dev.hub_db_volume(tmp_path / "hub-db")
    assert pv["kind"] == "PersistentVolume"
    assert pv["spec"]["claimRef"] == {"namespace": "jhub", "name": "hub-db-dir"}
    assert z2jh.NAMESPACE == "jhub" and z2jh_dev.HUB_DB_CLAIM == "hub-db-dir"
    assert pv["spec"]["hostPath"] == {"path": str(tmp_path / "hub-db"), "type": "Directory"}
    assert pv["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"  # the hub's users outlive an uninstall


# ------------------------------------------------------------------------------------------------ image names
REPO_ROOT = z2jh.VALUES.parents[1]
PROFILES_TEXT = EXAMPLE_PROFILES.read_text()
GPU_JOBS_YAML = (REPO_ROOT / "deploy" / "gpu-jobs.yaml").read_text()


@pytest.fixture
def fake_chart(tmp_path, monkeypatch):
    """A chart folder with only the proxy image in its values (the real chart is not needed for the rest)."""
    (tmp_path / "Chart.yaml").write_text("name: jupyterhub\nversion: 4.4.0\n")
    (tmp_path / "values.yaml").write_text(
        "proxy:\n  chp:\n    image:\n      name: quay.io/jupyterhub/configurable-http-proxy\n      tag: \"9.9.9\"\n")
    monkeypatch.setattr(z2jh, "chart_dir", lambda: tmp_path)
    return tmp_path


def test_product_image_names_from_the_deploy_files(fake_chart):
    names = z2jh_dev.product_image_names(PROFILES_TEXT, GPU_JOBS_YAML)
    v = values()
    assert names["hub"] == [f"{v['hub']['image']['name']}:{v['hub']['image']['tag']}"]
    assert names["hub"] == ["myregistry.azurecr.io/jupyterhub-gpu/hub:0.1.0"]
    assert names["singleuser-cuda"] == [f"{v['singleuser']['image']['name']}:{v['singleuser']['image']['tag']}"]
    assert names["singleuser-cuda"] == ["myregistry.azurecr.io/jupyterhub-gpu/singleuser:0.1.0-cuda"]
    runner = re.search(r"--runner-image=(\S+)", GPU_JOBS_YAML).group(1)
    assert names["runner-cuda"] == [runner] == ["myregistry.azurecr.io/jupyterhub-gpu/runner:0.1.0-cuda"]
    assert names["singleuser-cpu"] == ["myregistry.azurecr.io/jupyterhub-gpu/singleuser:0.1.0-cpu"]
    assert names["chp"] == ["quay.io/jupyterhub/configurable-http-proxy:9.9.9"]
    assert set(names) == set(z2jh_dev.NODE_IMAGES)
    # the gpu-jobs Deployment runs the hub image
    assert f"image: {names['hub'][0]}" in GPU_JOBS_YAML


def test_product_image_names_without_a_runner_or_cpu_image(fake_chart):
    names = z2jh_dev.product_image_names("profiles: []\n", "kind: Deployment\n")
    assert names["runner-cuda"] == [] and names["singleuser-cpu"] == []


def test_product_image_names_chp_from_the_chart():
    try:
        chart = z2jh.chart_dir()
    except z2jh.ChartMissing as e:
        pytest.skip(f"the z2jh chart is not here, so the chart's proxy image cannot be read: {e}")
    names = z2jh_dev.product_image_names(PROFILES_TEXT, GPU_JOBS_YAML)
    image = yaml.safe_load((chart / "values.yaml").read_text())["proxy"]["chp"]["image"]
    assert names["chp"] == [f"{image['name']}:{image['tag']}"]
    assert names["chp"][0].startswith(z2jh_dev.CHP_IMAGE_NAME + ":")


class _Health:
    """A real HTTP server whose /hub/health answers the given statuses in turn (then the last one)."""

    def __init__(self, statuses: list[int]):
        import http.server
        import threading

        answers, asked = list(statuses), []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                asked.append(self.path)
                status = answers.pop(0) if len(answers) > 1 else answers[0]
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.asked = asked
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_install_waits_until_proxy_public_answers_health_three_times_running():
    """A 503 between answers (kube-proxy not yet routing the hub Service) starts the count again."""
    health = _Health([503, 200, 200, 503, 200, 200, 200])
    try:
        z2jh_dev.wait_answering(health.url, timeout=30)
    finally:
        health.close()
    assert health.asked == ["/hub/health"] * 7


def test_install_names_what_it_waited_for_when_the_hub_never_answers():
    health = _Health([503])
    try:
        with pytest.raises(TimeoutError, match="proxy-public to answer the hub's /hub/health"):
            z2jh_dev.wait_answering(health.url, timeout=2)
    finally:
        health.close()
    assert len(health.asked) >= 2


def test_fit_profiles_lowers_what_a_2_cpu_machines_real_node_cannot_hold(tmp_path):
    """Issue 50 item 14: the example's CPU profile asks 2 CPUs, the real system node of a 2-core machine reports 2
    and the hub's own pods hold part of them; fitted, every profile on a real node's pool can start there."""
    from decimal import Decimal

    from jupyterhub_gpu.model.profiles_file import load_profiles
    from jupyterhub_gpu.model.quantities import parse

    text = open(EXAMPLE_PROFILES).read()
    room = {"system": (Decimal(2) * z2jh_dev.REAL_NODE_SHARE, Decimal(24 * 2**30) * z2jh_dev.REAL_NODE_SHARE),
            "gput4": (Decimal("1.5"), Decimal(18 * 2**30))}
    fitted, said = z2jh_dev.fit_profiles(text, room)
    assert said == ["profile 'cpu' asks 2 CPUs; the real system node here has room for 1500m: its servers here ask "
                    "that"]
    tmp = yaml.safe_load(fitted)
    before = {p["slug"]: p for p in yaml.safe_load(text)["profiles"]}
    for p in tmp["profiles"]:
        if p["pool"] in room:
            assert parse(p["cpu"]) <= room[p["pool"]][0], p
        if p["slug"] != "cpu":
            assert p == before[p["slug"]]  # the rest of the file as written
    (path := tmp_path / "profiles.yaml").write_text(fitted)
    assert load_profiles(path).profile("cpu").cpu == parse("1.5")  # still a valid profiles file
    assert z2jh_dev.fit_profiles(text, {"system": (Decimal(8), Decimal(64 * 2**30))}) == (text, [])
