"""The showback page as a real hub service in headless Chromium: a user sees their own GPU usage (a
server-drawn SVG chart, no script) and right-sizing hints from the real Prometheus, another user's page is
a 403, an admin sees everyone's; screenshots in artifacts/. Data: a usage store with known lifetimes (2 GPUs
x 3 h and three 1 h H100 sessions for alice, 1 slice x 4 h for bob) and DCGM series for alice's H100
sessions (7 GB, 5 % busy: a 1g.10gb slice would do)."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from culler.fixtures import SCRAPE, _stop, _wait_http, exporter, prometheus  # noqa: F401 (fixtures)

from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES
from jupyterhub_gpu.services.usage import collect
from jupyterhub_gpu.services.usage.accounting import Lifetime
from jupyterhub_gpu.services.usage.store import UsageStore
from jupyterhub_gpu_dev.devhub import free_port, loopback_lines

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def usage_hub(tmp_path_factory, prometheus, exporter):
    state = tmp_path_factory.mktemp("usagehub")
    now = datetime.now(timezone.utc)
    store = UsageStore(state / "usage")
    before = set(exporter.series)
    sessions = [f"jupyter-alice-h{i}" for i in range(3)]
    for i, pod in enumerate(sessions):
        exporter.set_gpu(pod, activity=0.05)
        labels = exporter.series[f"{pod}/0/None/prof"][1]
        exporter.series[f"{pod}/mem"] = ("DCGM_FI_DEV_FB_USED", labels, 7 * 1024.0)
    store.append_finished([Lifetime(f"h{i}", "server", "jhub", pod, "alice", "", "h100-full", "", 1, 6.98,
                                    now - timedelta(hours=5 + i), now - timedelta(hours=4 + i))
                           for i, pod in enumerate(sessions)])
    store.append_finished([
        Lifetime("a1", "server", "jhub", "jupyter-alice", "alice", "", "a100x2", "", 2, 7.345,
                 now - timedelta(hours=5), now - timedelta(hours=2)),
        Lifetime("b1", "job", "team-v", "x-1", "bob", "vision", "mig", "x", 1, 0.524,
                 now - timedelta(hours=6), now - timedelta(hours=2))])
    port, svc_port = free_port(), free_port()
    svc = {"name": "gpu-usage", "url": f"http://127.0.0.1:{svc_port}", "oauth_no_confirm": True,
           "api_token": secrets.token_hex(16),
           "command": [sys.executable, "-m", "jupyterhub_gpu.services.usage.web", f"--store={state / 'usage'}",
                       f"--profiles-file={EXAMPLE_PROFILES}", f"--prometheus-url={prometheus}",
                       f"--scrape-interval={SCRAPE}"]}
    config = state / "jupyterhub_config.py"
    config.write_text(f"""c = get_config()  # noqa: F821
{loopback_lines(state, port)}
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {{"boss"}}
c.JupyterHub.services = [{svc!r}]
c.JupyterHub.load_roles = [{{"name": "user", "scopes": ["self", "access:services!service=gpu-usage"]}}]
""")
    log = (state / "jupyterhub.log").open("wb")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=state, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/hub/api/", 90, proc, f"jupyterhub (log {state / 'jupyterhub.log'})")
        deadline = time.monotonic() + 30  # every session's memory series scraped
        while len(collect.prometheus_query(prometheus, "DCGM_FI_DEV_FB_USED", datetime.now(timezone.utc))) < 3:
            assert time.monotonic() < deadline, "Prometheus did not scrape the sessions' series"
            time.sleep(0.5)
        yield url
    finally:
        _stop(proc)
        with exporter.lock:
            for key in set(exporter.series) - before:
                del exporter.series[key]


HINT = ("alice: the last 3 sessions on h100-full peaked at 7 GB GPU memory and were at most 0 % busy → "
        "a100-mig-1g10gb (for groups data-science, ml-research) would do, $6.46/h cheaper")


def test_own_usage_others_403_admin_all(usage_hub, hub_page, artifacts):
    alice = hub_page(usage_hub, "alice")
    r = alice.goto(f"{usage_hub}/services/gpu-usage/")
    assert r.status == 200, alice.content()[:2000]
    assert alice.locator("h1").inner_text() == "GPU usage of alice"
    assert alice.locator("svg rect.bar").count() == 2
    text = alice.locator("table").inner_text()
    assert "a100x2" in text and "6.00" in text and "22.04" in text and "bob" not in alice.content()
    assert "h100-full" in text and "3.00" in text and "20.94" in text
    assert alice.locator("ul.hints li").all_inner_texts() == [HINT]
    alice.screenshot(path=str(artifacts / "usage-page-user.png"), full_page=True)
    assert alice.goto(f"{usage_hub}/services/gpu-usage/users/bob").status == 403
    assert alice.goto(f"{usage_hub}/services/gpu-usage/users/alice").status == 200

    boss = hub_page(usage_hub, "boss")
    assert boss.goto(f"{usage_hub}/services/gpu-usage/").status == 200
    assert boss.locator("h1").inner_text() == "GPU usage by user"
    assert boss.locator("svg rect.bar").count() == 2
    rows = boss.locator("table").inner_text()
    assert "alice" in rows and "9.00" in rows and "bob" in rows and "4.00" in rows and "2.10" in rows
    boss.screenshot(path=str(artifacts / "usage-page-admin.png"), full_page=True)
    assert boss.goto(f"{usage_hub}/services/gpu-usage/users/bob").status == 200
    assert boss.locator("h1").inner_text() == "GPU usage of bob" and boss.locator("ul.hints").count() == 0
