"""The JupyterLab extension in a real JupyterLab (served by the dev agent under a real hub, with the dev
cluster's Kueue): "Run on GPU queue" saves the edited notebook and submits it through the server's gpuhub
routes; the GPU jobs panel follows the job to Succeeded; a notification says so and opens the output;
`%gpu_submit` asks the extension to save first."""
from __future__ import annotations

import json

import pytest
import requests

from .lab_page import open_notebook, replace_cell_source, run_cell
from .test_service_cluster import RUN_NB, SLOW_NB, clean_teams, jobs_hub, jobs_profiles  # noqa: F401 (fixtures)

pytestmark = pytest.mark.cluster

LAB_NB = {**RUN_NB, "cells": [
    RUN_NB["cells"][0],
    {"cell_type": "code", "id": "r", "metadata": {}, "outputs": [], "execution_count": None,
     "source": "print('saved version', steps)"},
    {"cell_type": "code", "id": "m", "metadata": {}, "outputs": [], "execution_count": None,
     "source": "%gpu_submit --profile t4-shared --param steps=2"}]}  # in the job itself it does nothing


def start_server(jobs_hub, user: str) -> None:
    jobs_hub.token(user)  # logs the user in once, so the DevAuthenticator gives them groups
    r = requests.post(f"{jobs_hub.url}/hub/api/users/{user}/server", headers=jobs_hub.auth(jobs_hub.admin_token),
                      json={"profile": "cpu"}, timeout=60)
    assert r.status_code in (201, 202), r.text


def stop_server(jobs_hub, user: str) -> None:
    requests.delete(f"{jobs_hub.url}/hub/api/users/{user}/server", headers=jobs_hub.auth(jobs_hub.admin_token),
                    timeout=60)


def submit_from_the_toolbar(page, path: str, profile: str, parameters: str = "") -> None:
    page.click(".gpuhub-run-button")
    dialog = page.locator(".jp-Dialog")
    dialog.locator(f"text=Run {path} on the GPU queue").wait_for(timeout=60_000)
    dialog.locator("select[name=profile]").select_option(profile)
    dialog.locator("textarea[name=parameters]").fill(parameters)
    dialog.locator("button:has-text('Submit')").click()


def test_run_on_gpu_queue_saves_submits_and_the_panel_follows_the_job(cluster, jobs_hub, clean_teams, hub_page,
                                                                      artifacts):
    home = jobs_hub.process.share / "alice"
    home.mkdir(parents=True, exist_ok=True)
    nb_file = home / "lab.ipynb"
    nb_file.write_text(json.dumps(LAB_NB))
    start_server(jobs_hub, "alice")
    page = hub_page(jobs_hub.url, "alice", width=1400, height=1000)
    try:
        panel = open_notebook(page, jobs_hub.url, "alice", "lab.ipynb")
        # edited in the browser, not saved
        replace_cell_source(page, panel, 1, "print('edited in the browser', steps * 7)")
        assert "edited in the browser" not in nb_file.read_text()
        assert page.locator(".jp-mod-dirty").count() >= 1  # JupyterLab marks the tab unsaved
        page.click(".gpuhub-run-button")
        dialog = page.locator(".jp-Dialog")
        dialog.locator("text=Run lab.ipynb on the GPU queue").wait_for(timeout=60_000)
        # saved before the form even opened
        assert "edited in the browser" in nb_file.read_text()
        dialog.locator("select[name=profile]").select_option("t4-shared")
        dialog.locator("textarea[name=parameters]").fill("steps=6")
        page.screenshot(path=str(artifacts / "lab-run-on-gpu-queue-form.png"))
        dialog.locator("button:has-text('Submit')").click()
        # the panel: open it from the left sidebar
        page.click(".lm-TabBar-tab[title='GPU jobs']")
        row = page.locator(".gpuhub-job").filter(has_text="lab.ipynb").first
        row.wait_for(timeout=60_000)
        name = row.get_attribute("data-job")
        assert name.startswith("gpu-alice-lab-"), name
        page.locator(f".gpuhub-job[data-job='{name}'][data-state='Succeeded']").wait_for(timeout=240_000)
        note = page.locator(".jp-toast-message").filter(has_text=f"GPU job {name} succeeded")
        note.wait_for(timeout=30_000)
        page.screenshot(path=str(artifacts / "lab-gpu-jobs-panel-succeeded.png"))
        out = json.loads((home / "gpu-jobs" / name / "lab.ipynb").read_text())
        text = json.dumps(out["cells"])
        assert "edited in the browser 42" in text, text[-2000:]  # the edited cell, with steps=6 from the form
        assert "saved version" not in text
        # the panel's log button shows the runner's log
        page.locator(f".gpuhub-job[data-job='{name}'] button:has-text('Logs')").click()
        page.locator(".jp-Dialog .gpuhub-log").filter(has_text="[gpuhub-runner]").wait_for(timeout=30_000)
        page.keyboard.press("Escape")
        page.locator(".jp-Dialog").wait_for(state="detached", timeout=10_000)

        # %gpu_submit in an edited, unsaved notebook: the magic asks JupyterLab to save first
        replace_cell_source(page, panel, 1, "print('second edit', steps + 40)")
        assert "second edit" not in nb_file.read_text()
        run_cell(page, panel, 2)
        said = panel.locator(".jp-OutputArea-output").filter(has_text="JupyterLab saved lab.ipynb; submitting it.")
        said.wait_for(timeout=120_000)
        assert "second edit" in nb_file.read_text()
        second = said.inner_text().split("Job ", 1)[1].split(" submitted")[0]
        assert second.startswith("gpu-alice-lab-") and second != name, said.inner_text()
        page.locator(f".gpuhub-job[data-job='{second}'][data-state='Succeeded']").wait_for(timeout=240_000)
        page.locator(".jp-toast-message").filter(has_text=f"GPU job {second} succeeded").wait_for(timeout=30_000)
        text = json.dumps(json.loads((home / "gpu-jobs" / second / "lab.ipynb").read_text())["cells"])
        assert "second edit 42" in text, text[-2000:]

        # the notification's action opens the output notebook in JupyterLab
        page.locator(".jp-toast-message").filter(has_text=f"GPU job {name} succeeded").locator(
            "xpath=..").locator("button:has-text('Open output')").click()
        page.locator(f".lm-DockPanel-tabBar .lm-TabBar-tab[title*='gpu-jobs/{name}/lab.ipynb']").wait_for(
            timeout=60_000)
        page.screenshot(path=str(artifacts / "lab-output-opened.png"))
    finally:
        stop_server(jobs_hub, "alice")


def test_a_queued_job_moves_to_succeeded_in_the_panel_once_the_blocker_is_cancelled_there(
        cluster, jobs_hub, clean_teams, hub_page, artifacts):
    """tina's team has one T4 slot: her long job holds it, the one she submits from JupyterLab waits in the
    queue (the panel says where), she cancels the long one from the panel, and the queued one runs."""
    home = jobs_hub.process.share / "tina"
    home.mkdir(parents=True, exist_ok=True)
    (home / "quick.ipynb").write_text(json.dumps({**LAB_NB, "cells": LAB_NB["cells"][:2]}))
    r = jobs_hub.submit("tina", profile="t4-shared", notebook=SLOW_NB, parameters={"steps": 600})
    assert r.status_code == 201, r.text
    blocker = r.json()["name"]
    cluster.wait_until(lambda: jobs_hub.status("tina", blocker)["state"] != "Queued", 60, "the long job to start")
    start_server(jobs_hub, "tina")
    try:
        page = hub_page(jobs_hub.url, "tina", width=1400, height=1000)
        open_notebook(page, jobs_hub.url, "tina", "quick.ipynb")
        submit_from_the_toolbar(page, "quick.ipynb", "t4-shared")
        page.click(".lm-TabBar-tab[title='GPU jobs']")
        row = page.locator(".gpuhub-job").filter(has_text="quick.ipynb").first
        row.wait_for(timeout=60_000)
        name = row.get_attribute("data-job")
        queued = page.locator(f".gpuhub-job[data-job='{name}'][data-state='Queued']")
        queued.filter(has_text="Queued in tiny · position 1 of 1").wait_for(timeout=60_000)
        page.screenshot(path=str(artifacts / "lab-gpu-jobs-panel-queued.png"))
        page.locator(f".gpuhub-job[data-job='{blocker}'] button:has-text('Cancel')").click()
        page.locator(".jp-Dialog button:has-text('Cancel job')").click()
        page.locator(f".gpuhub-job[data-job='{blocker}']").wait_for(state="detached", timeout=60_000)
        page.locator(f".gpuhub-job[data-job='{name}'][data-state='Succeeded']").wait_for(timeout=240_000)
        page.locator(".jp-toast-message").filter(has_text=f"GPU job {name} succeeded").wait_for(timeout=30_000)
        assert "saved version 1" in (home / "gpu-jobs" / name / "quick.ipynb").read_text()
        cluster.wait_until(lambda: blocker not in {j.metadata.name for j in cluster.batch.list_namespaced_job(
            "team-tiny").items}, 30, "the cancelled Job to go")
    finally:
        stop_server(jobs_hub, "tina")
