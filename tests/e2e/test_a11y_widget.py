"""The `%gpu_submit` status widget in real JupyterLab (Light and Dark), checked by axe-core in Chromium: every
text readable (WCAG AA contrast), errors announced, Cancel asking first. A real hub with local-process
servers (tests/culler/fixtures.py: no dev cluster needed); the widget shows job statuses as the gpu-jobs
service answers them (a queued job with Kueue's reason, a running one with its log)."""
from __future__ import annotations

import json

from culler.fixtures import fresh, hub  # noqa: F401 (fixtures)
from jobs.lab_page import open_notebook

USER = "widgetreader"
DEMO = '''
from IPython.display import HTML, display
from jupyterhub_gpu.singleuser.widgets import StatusWidget, note_html

QUEUED = {"name": "gpu-widgetreader-a-1", "state": "Queued", "queue": "data-science", "position": 1,
          "queue_length": 2, "eta_p50_s": 1200, "eta_p90_s": 2700, "preempted": 0, "profile": "t4-shared",
          "priority": "normal", "notebook": "train.ipynb",
          "message": "your team's 8 T4 slots are in use; starts when one finishes — 1 of 2 waiting",
          "kueue_message": "couldn't assign flavors to pod set main: insufficient unused quota for "
                           "nvidia.com/gpu in flavor gput4, 1 more needed", "kueue_reason": "Pending"}
RUNNING = {"name": "gpu-widgetreader-b-2", "state": "Running", "queue": "data-science", "preempted": 0,
           "profile": "t4-shared", "priority": "normal", "notebook": "train.ipynb", "node": "aks-gput4-1",
           "cell": {"cell": 2, "of": 3, "since": "10:05:09"}, "message": "cell 2 of 3"}


class Service:
    """What the gpu-jobs service answered for these jobs."""

    def job(self, name):
        return RUNNING

    def logs(self, name, tail):
        return "[gpuhub-runner] 10:05:09 cell 2/3 running\\nepoch 1 loss 0.52\\nepoch 2 loss 0.31\\n"


queued = StatusWidget(Service(), QUEUED["name"], QUEUED, autostart=False)
running = StatusWidget(Service(), RUNNING["name"], RUNNING, autostart=False)
running.poll_once()
display(queued)
display(running)
display(HTML(note_html("the gpu-jobs service refused: profile 'h100-full' is not available to you", error=True)))
'''
#: One short cell, so the widgets sit on screen (axe checks the contrast of what is rendered; JupyterLab
#: skips rendering cells far below the fold).
NOTEBOOK = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                       "source": "%run widgets_demo.py"}],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def set_theme(page, hub_url: str, theme: str) -> None:
    """JupyterLab's theme setting, through its settings API (what Settings → Theme writes)."""
    xsrf = next(c["value"] for c in page.context.cookies() if c["name"] == "_xsrf")
    r = page.request.put(f"{hub_url}/user/{USER}/lab/api/settings/@jupyterlab/apputils-extension:themes",
                         data=json.dumps({"raw": json.dumps({"theme": theme})}),
                         headers={"X-XSRFToken": xsrf, "Content-Type": "application/json"})
    assert r.ok, r.text()


def show_widgets(page, hub_url: str):
    """Open the notebook, run it, and wait for the widgets; returns its output area."""
    panel = open_notebook(page, hub_url, USER, "widget.ipynb")
    page.click("text=Run >> nth=0")
    page.click("text=Run All Cells")
    panel.locator(".gpuhub-job-status[data-state='Queued']").wait_for(timeout=90_000)
    panel.locator(".gpuhub-job-log").wait_for(timeout=30_000)
    outputs = panel.locator(".jp-Cell").first.locator(".jp-OutputArea")
    outputs.scroll_into_view_if_needed()
    # JupyterLab's shell is absolutely positioned over a <body> of height 0 with overflow hidden; axe would
    # count every element as clipped by it and check no text at all. A body as tall as the window changes
    # nothing on screen and lets axe see what is.
    page.add_style_tag(content="body { height: 100vh; }")
    assert page.evaluate("() => document.querySelector('.gpuhub-job-status').getBoundingClientRect().bottom") \
        <= page.evaluate("() => document.body.getBoundingClientRect().bottom")
    return outputs


def test_the_job_widget_is_readable_in_jupyterlab_light_and_dark(fresh, hub_page, axe, artifacts):
    hub = fresh
    home = hub.state / "homes" / USER
    home.mkdir(parents=True, exist_ok=True)
    (home / "widget.ipynb").write_text(json.dumps(NOTEBOOK))
    (home / "widgets_demo.py").write_text(DEMO)
    hub.start({USER: "cpu"})
    page = hub_page(hub.url, USER, width=1300, height=1000)
    outputs = show_widgets(page, hub.url)
    queued = page.locator(".gpuhub-job-status[data-state='Queued']")
    assert "your team's 8 T4 slots are in use" in queued.inner_text()
    assert not queued.locator("details").evaluate("d => d.open")  # Kueue's own words only under details
    assert outputs.locator("[role=alert]").count() == 1  # the error line is announced
    assert axe(page, [".jp-OutputArea"]) == []
    page.screenshot(path=str(artifacts / "widget-light.png"))

    # Cancel asks first; the question is announced and its buttons are reachable
    live = outputs.locator(".widget-vbox").filter(has=page.locator(".gpuhub-job-status[data-state='Running']"))
    live.get_by_role("button", name="Cancel", exact=True).click()
    live.get_by_role("button", name="Yes, cancel it").wait_for(timeout=30_000)
    assert "checkpoints stay" in live.locator("[role=alert]").inner_text()
    assert axe(page, [".jp-OutputArea"]) == []

    set_theme(page, hub.url, "JupyterLab Dark")
    try:
        show_widgets(page, hub.url)
        assert page.evaluate("() => document.body.dataset.jpThemeLight") == "false"
        assert axe(page, [".jp-OutputArea"]) == []
        page.screenshot(path=str(artifacts / "widget-dark.png"))
    finally:
        set_theme(page, hub.url, "JupyterLab Light")
        hub.stop_all()
