"""The admin console (`/services/gpu-admin/`, started by configure(c)) in Chromium on a real dev hub and the dev
cluster: an admin sees the profiles per group and the cluster's live state (the teams' oldest waits read from
their Workloads, each GPU pool's chart of slots in use), axe-core finds no serious or critical
WCAG 2.1 A/AA violation, a pasted file's dry run goes through the hub's OAuth and the XSRF check and shows the
profile it removes, the real `gpuhub doctor` runs from the page; a user gets 403. Screenshots go to artifacts/
(the admin guide's docs/images/admin-console.png was taken from this test's admin-console.png; a test never
writes into the checkout)."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu_dev.devhub import DevHub, HubSettings, free_port

pytestmark = [pytest.mark.cluster, pytest.mark.browser]

GROUPS = {"alice": ["data-science"], "admin": ["data-science", "ml-research"]}


@pytest.fixture(scope="module")
def admin_hub(cluster, tmp_path_factory):
    """A dev hub without a node agent (no server runs here), its console on a free port."""
    state = tmp_path_factory.mktemp("adminhub")
    extra = ("for _s in c.JupyterHub.services:\n"
             "    if _s['name'] == 'gpu-admin':\n"
             f"        _s['url'] = 'http://127.0.0.1:{free_port()}'\n")
    dev = DevHub(HubSettings(state_dir=state, profiles=cluster.profiles, kubeconfig=cluster.kubeconfig,
                             port=free_port(), groups=GROUPS, extra=extra))
    dev.start()
    try:
        yield dev
    finally:
        dev.stop()


def login(browser, url: str, user: str):
    page = browser.new_page(viewport={"width": 1200, "height": 1100}, bypass_csp=True)  # axe is a script
    page.goto(f"{url}/hub/login")
    page.fill("input[name=username]", user)
    page.click("#login_submit")
    page.wait_for_url("**/hub/**")
    return page


def test_an_admin_sees_the_console_and_a_user_gets_403(admin_hub, browser, axe, artifacts):
    url = admin_hub.settings.url
    page = login(browser, url, "admin")
    try:
        deadline = time.monotonic() + 90
        while True:  # the service starts beside the hub; its first cluster read follows
            r = page.goto(f"{url}/services/gpu-admin/")
            if r.status == 200 and "Read never" not in page.content():
                break
            assert time.monotonic() < deadline, (r.status, page.content()[:2000], admin_hub.log_tail())
            time.sleep(2)
        assert page.locator("h1").inner_text() == "GPU hub admin console"
        assert page.locator("caption", has_text="Group ml-research").count() == 1
        pools = page.locator("table", has=page.locator("caption", has_text="Pools")).inner_text()
        assert "gput4" in pools and "unknown" not in pools and "nodes starting" in pools, pools
        teams = page.locator("table", has=page.locator("caption", has_text="Teams (Kueue)"))
        waits = teams.locator("tr td:last-child").all_inner_texts()  # the oldest wait: the Workloads were read
        assert len(waits) == 2 and "unknown" not in waits, teams.inner_text()
        chart = page.locator("figure", has_text="gput4:")
        assert chart.locator("svg[role=img]").count() == 1 and "kept in memory only" in page.content()
        assert re.search(r"gput4: (peak \d+ of \d+|none in use); latest \d+ of \d+ at", chart.inner_text())
        assert axe(page) == []
        page.screenshot(path=str(artifacts / "admin-console.png"), full_page=False)
        page.screenshot(path=str(artifacts / "admin-console-full.png"), full_page=True)

        data = yaml.safe_load(Path(admin_hub.settings.profiles).read_text())
        data["profiles"] = [p for p in data["profiles"] if p["slug"] != "h100-full"]
        page.fill("#new-profiles", yaml.safe_dump(data, sort_keys=False))
        page.click("text=Compare with the loaded file")
        page.wait_for_selector("#dry-run-result")
        result = page.locator("#dry-run-result").inner_text()
        assert "removed: h100-full" in result and "No running server's profile would disappear" in result, result
        assert axe(page) == []
        page.screenshot(path=str(artifacts / "admin-console-dry-run.png"), full_page=True)

        page.click("text=Run gpuhub doctor")  # the real `gpuhub doctor`, as a child process of the service
        page.wait_for_selector("text=Last run", timeout=120_000)
        doctor = page.locator("main").inner_text()
        assert re.search(r"Last run .*: \d+ checks: \d+ ✓, \d+ ✗", doctor), doctor[-3000:]
        assert "at most once a minute" in doctor  # no second run for a minute
        assert axe(page) == []
    finally:
        page.close()

    user = login(browser, url, "alice")
    try:
        assert user.goto(f"{url}/services/gpu-admin/").status == 403
    finally:
        user.close()
