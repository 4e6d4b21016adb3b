"""The picker's markup (pure render of templates/form.html): short accessible names, facts described once,
no block element inside a <label>, theme colours only (the browser checks are in tests/e2e/test_a11y.py)."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from jinja2 import Environment, FileSystemLoader

import jupyterhub_gpu.hub
from jupyterhub_gpu.hub import picker
from jupyterhub_gpu.hub.capacity import ClusterState
from jupyterhub_gpu.model.profiles_file import EXAMPLE_PROFILES, load_profiles

CFG = load_profiles(EXAMPLE_PROFILES)
TEMPLATES = Path(jupyterhub_gpu.hub.__file__).parent / "templates"
BLOCK = {"address", "article", "aside", "blockquote", "details", "div", "dl", "fieldset", "figure", "footer", "form",
         "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section",
         "table", "ul"}


def render(degraded: str | None = None) -> str:
    state = ClusterState(CFG)
    entries = [picker.profile_entry(CFG, p, i == 0, state.profile_capacity(p),
                                    degraded=degraded if p.slug == "t4-shared" else None)
               for i, p in enumerate(CFG.profiles)]
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True)
    return env.get_template("form.html").render(profile_list=entries, user_options={})


class Walk(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.labels, self.ids, self.problems, self.radios = [], {}, set(), [], []
        self.text_in: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if "label" in self.stack and tag in BLOCK:
            self.problems.append(f"<{tag}> inside <label>")
        if tag == "input" and a.get("type") == "radio":
            self.radios.append(a)
        if tag == "label":
            self.text_in = [a.get("for")]
        if tag not in ("input", "br", "img", "meta", "link", "hr"):
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag == "label" and self.text_in:
            self.labels[self.text_in[0]] = re.sub(r"\s+", " ", "".join(self.text_in[1:])).strip()
            self.text_in = []
        while self.stack and self.stack.pop() != tag:
            pass

    def handle_data(self, data):
        if self.text_in:
            self.text_in.append(data)


def test_radios_are_named_by_title_and_price_and_described_once():
    walk = Walk()
    walk.feed(render())
    assert walk.problems == []
    assert len(walk.radios) == len(CFG.profiles)
    for radio in walk.radios:
        name, label = radio["aria-label"], walk.labels[radio["id"]]
        assert len(name) < 60, name  # title and price, not the whole card
        assert name.replace(",", "").split() == label.split(), (name, label)  # the visible label's own words
        (described,) = radio["aria-describedby"].split()
        assert described in walk.ids
    t4 = next(r["aria-label"] for r in walk.radios if r["id"] == "profile-item-t4-shared")
    assert re.fullmatch(r"Shared T4 \(time-sliced\), \$\d+\.\d\d/hour", t4), t4


def test_only_theme_colours_and_a_degraded_pool_is_marked():
    page = render(degraded="degraded: 1 node's GPU is failing its check (of 2); new servers keep off it")
    style = page[page.index("<style>"):page.index("</style>")]
    assert not re.search(r"#[0-9a-fA-F]{3,8}\b|:\s*white\b|rgb\(", style), "hard-coded colour in the picker"
    assert "var(--bs-body-bg)" in style and "var(--bs-success-text-emphasis)" in style
    card = page[page.index('data-profile="t4-shared"'):page.index('data-profile="a100-mig-1g10gb"')]
    assert 'data-degraded="true"' in card and "failing its check" in card
    assert "data-degraded" not in page.replace(card, "")
