"""What a person sees, in headless Chromium (Debian's, driven by Playwright): log in, the picker, start a
GPU profile with the keyboard, JupyterLab opens. Screenshots are kept in artifacts/."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.cluster


def test_login_pick_a_gpu_and_reach_jupyterlab(hub, hub_page, artifacts):
    page = hub_page(hub.url, "alice")
    try:
        page.wait_for_selector("#gpuhub-picker")
        legend = page.inner_text("#gpuhub-picker legend")
        assert legend == "Choose where your server runs"
        labels = page.locator(".gpuhub-card .gpuhub-name").all_inner_texts()
        assert labels == ["CPU only", "Shared T4 (time-sliced)", "A100 MIG 1g.10gb"]
        assert "A100 80GB MIG 1g.10gb slices free" in page.inner_text("[data-profile=a100-mig-1g10gb]")
        page.screenshot(path=str(artifacts / "picker.png"), full_page=True)
        # keyboard only: focus the checked radio, arrow down twice to the MIG profile, submit with Enter
        page.check("#profile-item-cpu")  # alice's last choice may be preselected: start from the first profile
        page.focus("input[name=profile]:checked")
        page.keyboard.press("ArrowDown")
        page.keyboard.press("ArrowDown")
        assert page.is_checked("#profile-item-a100-mig-1g10gb")
        page.keyboard.press("Enter")
        page.wait_for_url("**/user/alice/lab**", timeout=150_000)
        page.wait_for_selector("#jp-main-dock-panel", timeout=120_000)
        page.screenshot(path=str(artifacts / "jupyterlab.png"))
        assert "JupyterLab" in page.title()
    finally:
        hub.stop("alice")
