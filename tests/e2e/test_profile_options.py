"""Options inside GPU profiles on the real hub and dev cluster: the picker offers each user their groups'
choices next to the capacity line, a forged or unlisted choice is a 403 before any pod exists, and a chosen
image reaches the pod together with the admin's own KubeSpawner settings (the dev hub's labels, env, image)."""
from __future__ import annotations

import html
import re
import time
from urllib.parse import parse_qsl

import pytest

pytestmark = pytest.mark.cluster

MIG = "a100-mig-1g10gb"
FIELD = f"profile-option-{MIG}--image"
MINE = "myregistry.azurecr.io/ml-research/rita-experiments:7"


def card(page: str, slug: str) -> str:
    m = re.search(rf'data-profile="{slug}"(.*?)(?=<div class="gpuhub-card"|</fieldset>)', page, re.S)
    assert m, f"no card for {slug}"
    return m.group(1)


def no_pod(cluster, user: str) -> bool:
    return not cluster.core.list_namespaced_pod("jhub", label_selector=f"hub.jupyter.org/username={user}").items


def test_picker_offers_each_user_their_groups_choices_with_the_capacity_line(hub):
    alice = card(hub.login("alice").get(f"{hub.url}/hub/spawn", timeout=30).text, MIG)
    assert f'name="{FIELD}"' in alice and ">PyTorch (CUDA 12)</option>" in alice
    assert 'value="nightly"' not in alice and "--unlisted-choice" not in alice  # ml-research only
    assert "gpuhub-cap" in alice and "slices free" in alice  # options sit on the card with the live numbers
    rita = card(hub.login("rita").get(f"{hub.url}/hub/spawn", timeout=30).text, MIG)
    assert 'value="nightly"' in rita and f'name="{FIELD}--unlisted-choice"' in rita
    assert 'value="pytorch" selected' in rita


def test_forged_or_unlisted_choices_get_403_and_no_pod(hub, cluster):
    session = hub.login("alice")
    page = session.get(f"{hub.url}/hub/spawn", timeout=30).text
    r = session.post(f"{hub.url}/hub/spawn", data={"profile": MIG, FIELD: "nightly", "_xsrf": hub.xsrf(session, page)},
                     timeout=60, allow_redirects=False)
    assert r.status_code == 403
    assert "'nightly' is for members of ml-research, not alice" in html.unescape(r.text)
    r = hub.api("POST", "/users/alice/server", json={"profile": MIG, "image--unlisted-choice": MINE})
    assert r.status_code == 403 and "typed values are for members of ml-research" in r.text
    hub.login("rita")
    r = hub.api("POST", "/users/rita/server", json={"profile": MIG, "image--unlisted-choice": "docker.io/evil/miner:1"})
    assert r.status_code == 403 and "an image in myregistry.azurecr.io, with a tag" in r.text
    r = hub.api("POST", "/users/rita/server", json={"profile": MIG, "image": "pytorch", "gpus": 8})
    assert r.status_code == 403 and "Unknown server option(s) 'gpus'" in r.text
    assert no_pod(cluster, "alice") and no_pod(cluster, "rita")
    assert hub.server("alice") is None and hub.server("rita") is None


def test_typed_image_and_admin_settings_reach_the_pod(hub, cluster):
    hub.login("rita")
    r = hub.api("POST", "/users/rita/server", json={"profile": MIG, "image--unlisted-choice": MINE})
    assert r.status_code in (201, 202), r.text
    try:
        cluster.wait_bound("jhub", "jupyter-rita", timeout=60)
        pod = cluster.core.read_namespaced_pod("jupyter-rita", "jhub")
        (c,) = pod.spec.containers
        env = {e.name: e.value for e in c.env}
        assert c.image == MINE
        assert dict(parse_qsl(env["GPUHUB_PROFILE_OPTIONS"])) == {"image--unlisted-choice": MINE}
        assert env["GPUHUB_PROFILE"] == MIG and env.get("GPUHUB_JOBS_URL")  # the profile's and the admin's env
        assert pod.metadata.labels["gpuhub.io/dev-agent"] == "run"  # the admin's extra_labels, merged
        assert pod.metadata.labels["gpuhub.io/profile"] == MIG
        assert c.resources.requests["nvidia.com/mig-1g.10gb"] == "1"
        deadline = time.monotonic() + 150
        while not (hub.server("rita") or {}).get("ready"):  # the dev agent ran it: the admin's label survived
            assert time.monotonic() < deadline, "rita's server never became ready"
            time.sleep(1)
    finally:
        hub.stop("rita")


def test_a_profile_without_image_runs_the_admins_image(hub, cluster):
    hub.login("bob")
    r = hub.api("POST", "/users/bob/server", json={"profile": "t4-shared"})
    assert r.status_code in (201, 202), r.text
    try:
        cluster.wait_bound("jhub", "jupyter-bob", timeout=60)
        (c,) = cluster.core.read_namespaced_pod("jupyter-bob", "jhub").spec.containers
        assert c.image == "jupyterhub-gpu/singleuser:dev-simulated"  # c.GPUSpawner.image of the dev hub
        assert "GPUHUB_PROFILE_OPTIONS" not in {e.name for e in c.env}
    finally:
        hub.stop("bob")


def test_in_chromium_choosing_a_typed_image_chooses_its_profile_and_starts_it(hub, hub_page, cluster, artifacts):
    page = hub_page(hub.url, "rita")
    try:
        page.wait_for_selector("#gpuhub-picker")
        page.check("#profile-item-cpu")  # rita's last choice may be preselected: start from another profile
        assert not page.is_checked(f"#profile-item-{MIG}")
        page.select_option(f"#{FIELD}", "unlisted-choice")
        assert page.is_checked(f"#profile-item-{MIG}")  # choosing an option chooses its profile
        page.fill(f"#{FIELD}--unlisted-choice", MINE)
        page.screenshot(path=str(artifacts / "picker-options.png"), full_page=True)
        page.press(f"#{FIELD}--unlisted-choice", "Enter")
        cluster.wait_bound("jhub", "jupyter-rita", timeout=90)
        (c,) = cluster.core.read_namespaced_pod("jupyter-rita", "jhub").spec.containers
        assert c.image == MINE
    finally:
        hub.stop("rita")
