"""The showback page as a real hub service in headless Chromium: a user sees their own GPU usage (a
server-drawn SVG chart, no script), another user's page is a 403, an admin sees everyone's; screenshots in
artifacts/. Data: a usage store with known lifetimes (2 GPUs x 3 h for alice, 1 slice x 4 h for bob)."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from culler.fixtures import _stop, _wait_http
from devcluster.devhub import free_port, proxy_command
from gpu_spawner.services.usage.accounting import Lifetime
from gpu_spawner.services.usage.store import UsageStore

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def usage_hub(tmp_path_factory):
    state = tmp_path_factory.mktemp("usagehub")
    now = datetime.now(timezone.utc)
    store = UsageStore(state / "usage")
    store.append_finished([
        Lifetime("a1", "server", "jhub", "jupyter-alice", "alice", "", "a100x2", "", 2, 7.345,
                 now - timedelta(hours=5), now - timedelta(hours=2)),
        Lifetime("b1", "job", "team-v", "x-1", "bob", "vision", "mig", "x", 1, 0.524,
                 now - timedelta(hours=6), now - timedelta(hours=2))])
    port, svc_port = free_port(), free_port()
    svc = {"name": "gpu-usage", "url": f"http://127.0.0.1:{svc_port}", "oauth_no_confirm": True,
           "api_token": secrets.token_hex(16),
           "command": [sys.executable, "-m", "gpu_spawner.services.usage.web", f"--store={state / 'usage'}"]}
    config = state / "jupyterhub_config.py"
    config.write_text(f"""c = get_config()  # noqa: F821
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {free_port()}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
c.ConfigurableHTTPProxy.command = [{proxy_command()!r}]
c.JupyterHub.db_url = "sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret = bytes.fromhex({secrets.token_hex(32)!r})
c.JupyterHub.pid_file = {str(state / 'jupyterhub.pid')!r}
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
        yield url
    finally:
        _stop(proc)


def test_own_usage_others_403_admin_all(usage_hub, hub_page, artifacts):
    alice = hub_page(usage_hub, "alice")
    r = alice.goto(f"{usage_hub}/services/gpu-usage/")
    assert r.status == 200, alice.content()[:2000]
    assert alice.locator("h1").inner_text() == "GPU usage of alice"
    assert alice.locator("svg rect.bar").count() == 1
    text = alice.locator("table").inner_text()
    assert "a100x2" in text and "6.00" in text and "22.04" in text and "bob" not in alice.content()
    alice.screenshot(path=str(artifacts / "usage-page-user.png"), full_page=True)
    assert alice.goto(f"{usage_hub}/services/gpu-usage/users/bob").status == 403
    assert alice.goto(f"{usage_hub}/services/gpu-usage/users/alice").status == 200

    boss = hub_page(usage_hub, "boss")
    assert boss.goto(f"{usage_hub}/services/gpu-usage/").status == 200
    assert boss.locator("h1").inner_text() == "GPU usage by user"
    assert boss.locator("svg rect.bar").count() == 2
    rows = boss.locator("table").inner_text()
    assert "alice" in rows and "bob" in rows and "4.00" in rows and "2.10" in rows
    boss.screenshot(path=str(artifacts / "usage-page-admin.png"), full_page=True)
    assert boss.goto(f"{usage_hub}/services/gpu-usage/users/bob").status == 200
    assert boss.locator("h1").inner_text() == "GPU usage of bob"
