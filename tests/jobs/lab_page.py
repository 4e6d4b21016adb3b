"""Opening a notebook in a user's JupyterLab for a browser test, and finding what belongs to it.

JupyterLab keeps the layout of a user's last visit in a workspace file in their home, and homes outlive
servers: a later test for the same user would find earlier notebooks restored in hidden tabs, and page-wide
locators such as `.jp-Cell` would resolve to cells nobody can see. `?reset` starts from an empty workspace,
and every locator here is scoped to the notebook that is on screen."""
from __future__ import annotations

KERNEL_IDLE = "text=Python 3 (ipykernel) | Idle"


def open_notebook(page, hub_url: str, user: str, path: str):
    """Open `path` alone in `user`'s JupyterLab and wait for its kernel; returns the notebook's panel."""
    page.goto(f"{hub_url}/user/{user}/lab/tree/{path}?reset", timeout=180_000)
    page.wait_for_selector(KERNEL_IDLE, timeout=120_000)
    page.keyboard.press("Escape")  # nothing JupyterLab opened on load may sit over what the test clicks
    panel = notebook_on_screen(page)
    panel.locator(".jp-Cell").first.wait_for(timeout=60_000)
    return panel


def notebook_on_screen(page):
    """The notebook panel shown in the main area (hidden tabs excluded)."""
    return page.locator("#jp-main-dock-panel .jp-NotebookPanel:visible").first


def cell_editor(panel, index: int):
    return panel.locator(".jp-Cell .jp-InputArea-editor").nth(index)


def replace_cell_source(page, panel, index: int, text: str) -> None:
    """Type `text` over cell `index`'s source, as a user would (the notebook becomes unsaved)."""
    editor = cell_editor(panel, index)
    editor.scroll_into_view_if_needed(timeout=60_000)
    editor.click(timeout=60_000)
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(text)


def run_cell(page, panel, index: int) -> None:
    editor = cell_editor(panel, index)
    editor.scroll_into_view_if_needed(timeout=60_000)
    editor.click(timeout=60_000)
    page.keyboard.press("Shift+Enter")
