"""The culler's warning where the user is: in JupyterLab, as a notification with "Keep my server", which
reports activity at once so the culler does not stop the server. A real hub with the hub-managed culler
(dry run, a cycle a second, warning 8 s before a 10 s GPU idle timeout; tests/culler/fixtures.py) and a
real jupyterhub-singleuser with the JupyterLab extension, in headless Chromium."""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import requests
from culler.fixtures import GPU_IDLE, fresh, hub  # noqa: F401 (fixtures)


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def test_culling_warning_is_a_lab_notification_and_keep_prevents_the_cull(fresh, hub_page, artifacts):
    hub = fresh
    base = f"{hub.url}/services/gpu-culler"
    deadline = time.monotonic() + 60
    while not requests.get(f"{base}/health", timeout=5).ok:
        assert time.monotonic() < deadline, "the culler service did not come up"
        time.sleep(0.5)
    hub.start({"keeper": "t4"})
    token = hub.user_token("keeper")

    def warnings() -> dict:
        return requests.get(f"{base}/warnings/keeper", headers={"Authorization": f"token {token}"}, timeout=10).json()

    # hold the server 4 s idle (inside the 8 s warning window) until the user acts
    holding = threading.Event()
    holding.set()

    def hold():
        while holding.is_set():
            hub.touch("keeper", at=datetime.now(timezone.utc) - timedelta(seconds=4))
            time.sleep(0.5)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        deadline = time.monotonic() + 30
        while not warnings()["warnings"]:
            assert time.monotonic() < deadline, "the culler never warned"
            time.sleep(0.5)
        page = hub_page(hub.url, "keeper", width=1300, height=900)
        page.goto(f"{hub.url}/user/keeper/lab", timeout=120_000)
        toast = page.locator(".jp-toast-message").filter(has_text="will be stopped")
        toast.wait_for(timeout=90_000)
        said = toast.inner_text()
        assert said.startswith("Your server (t4) will be stopped in about 1 min"), said  # the culler's words
        page.screenshot(path=str(artifacts / "lab-culling-warning.png"))
        culled_before = len(warnings()["culled"])
        holding.clear()
        holder.join(5)
        clicked = datetime.now(timezone.utc)
        toast.locator("xpath=..").locator("button:has-text('Keep my server')").click()
        page.locator(".jp-toast-message").filter(has_text="Kept: your server counts as active again.").wait_for(
            timeout=30_000)
    finally:
        holding.clear()
    # the keep is activity the hub recorded, so the culler's idle clock restarted
    last = parse(hub.server("keeper")["last_activity"])
    assert last >= clicked - timedelta(seconds=1), (last, clicked)
    # without it the server (4 s idle at the click) would be culled within ~6 s; with it, not before
    # GPU_IDLE s after the click
    time.sleep(GPU_IDLE - 3)
    body = warnings()
    assert len(body["culled"]) == culled_before, body["culled"]
    assert all(w["cull_in_s"] >= 1 for w in body["warnings"]), body
