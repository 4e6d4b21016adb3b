"""The picker and the spawn page for everyone, in Chromium on the real hub and dev cluster: axe-core finds no
serious or critical WCAG 2.1 A/AA violation in the hub's light or dark theme, each radio is named by its
title and price alone, and a keyboard alone chooses a profile and starts it."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.cluster

T4_POOL = "kubernetes.azure.com/agentpool=gput4"


def dark(page) -> None:
    """The browser asks for dark: JupyterHub's pages follow it (data-bs-theme)."""
    page.emulate_media(color_scheme="dark")
    page.reload()
    page.wait_for_function("() => document.documentElement.getAttribute('data-bs-theme') === 'dark'")


def focused(page) -> str:
    return page.evaluate("() => { const e = document.activeElement; return e.id || e.tagName + ':' + "
                         "(e.textContent || '').trim() }")


def test_picker_is_readable_named_and_works_from_the_keyboard(hub, hub_page, cluster, axe, artifacts):
    t4 = [n.metadata.name for n in cluster.core.list_node(label_selector=T4_POOL).items]
    page = hub_page(hub.url, "alice")
    try:
        page.wait_for_selector("#gpuhub-picker")
        page.emulate_media(color_scheme="light")
        assert axe(page) == []
        page.screenshot(path=str(artifacts / "picker-light.png"), full_page=True)
        dark(page)
        assert axe(page) == []
        page.screenshot(path=str(artifacts / "picker-dark.png"), full_page=True)

        # each radio's accessible name (what a screen reader says first) is its title and price
        tree = page.locator("#gpuhub-picker").aria_snapshot()
        names = re.findall(r'- radio "([^"]*)"', tree)
        assert len(names) == 3 and re.fullmatch(r"CPU only(, \$\d+\.\d\d/hour)?", names[0]), names
        assert any(re.fullmatch(r"Shared T4 \(time-sliced\), \$\d+\.\d\d/hour", n) for n in names), names
        assert all(len(n) < 60 for n in names), names

        # keyboard only: Tab to the chosen profile, arrows to another, Tab on to Start, Enter
        for n in t4:  # the T4 pool is full: the start waits, and the spawn page stays to be checked
            cluster.core.patch_node(n, {"spec": {"unschedulable": True}})
        page.check("#profile-item-cpu")
        page.locator("body").focus()
        for _ in range(40):
            page.keyboard.press("Tab")
            if focused(page) == "profile-item-cpu":
                break
        assert focused(page) == "profile-item-cpu"
        page.keyboard.press("ArrowDown")
        assert page.is_checked("#profile-item-t4-shared") and focused(page) == "profile-item-t4-shared"
        for _ in range(20):
            page.keyboard.press("Tab")
            if page.evaluate("() => document.activeElement.type === 'submit'"):
                break
        assert page.evaluate("() => document.activeElement.type === 'submit'"), focused(page)
        page.keyboard.press("Enter")
        page.wait_for_url("**/spawn-pending/**", timeout=60_000)
        page.locator("#progress-message").wait_for(timeout=60_000)
        assert axe(page) == []
        page.emulate_media(color_scheme="light")
        page.reload()
        page.locator("#progress-message").wait_for(timeout=60_000)
        assert axe(page) == []
        page.screenshot(path=str(artifacts / "spawn-pending-light.png"), full_page=True)
    finally:
        hub.stop("alice")
        for n in t4:
            cluster.core.patch_node(n, {"spec": {"unschedulable": False}})
