"""The admin console's HTML (pure): every value escaped, no script, styles inline (the page's CSP allows only
those), one form per action, each with the XSRF field the handler hands in."""
from __future__ import annotations

import html
import time
from typing import Any, Iterable

from jupyterhub_gpu.services.admin.chart import slots_svg, summary
from jupyterhub_gpu.services.admin.diff import Diff
from jupyterhub_gpu.services.admin.live import LiveState, TeamState

STYLE = ("body{font-family:sans-serif;margin:2em;color:#1a1a1a;background:#fff}table{border-collapse:collapse;"
         "margin:.5em 0 1.5em}td,th{padding:3px 10px;border-bottom:1px solid #ccc;text-align:left;vertical-align:top}"
         "caption{text-align:left;font-weight:bold;padding:4px 0}.bad{color:#a40000}.ok{color:#0b6b0b}"
         "textarea{width:100%;font-family:monospace}pre{white-space:pre-wrap;background:#f4f4f4;padding:8px}"
         ".note{color:#444}")
APPLY = ("Nothing is applied here. To apply a file: check it with `gpuhub validate FILE`, put it where the hub "
         "reads it (z2jh: the `gpuhub-profiles` ConfigMap, e.g. `kubectl -n jhub create configmap gpuhub-profiles "
         "--from-file=profiles.yaml=FILE --dry-run=client -o yaml | kubectl apply -f -`), apply its Kueue objects "
         "with `gpuhub render kueue FILE | kubectl apply --server-side -f -`, and the hub picks the new file up "
         "(restart the hub for its services to read it).")


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _when(t: float | None) -> str:
    return "never" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _n(value: int | None) -> str:
    return "unknown" if value is None else str(value)


def profiles_section(offered: dict[str, dict[str, dict[str, str]]], path: str, checksum: str,
                     loaded_at: float | None) -> str:
    parts = [f"<h2 id='profiles'>Profiles as users see them</h2><p>File <code>{e(path)}</code>, sha256 "
             f"<code>{e(checksum)}</code>, loaded {e(_when(loaded_at))}.</p>"]
    for group, rows in offered.items():
        cells = "".join(
            f"<tr><th scope='row'>{e(slug)}</th><td>{e(r['display_name'])}</td><td>{e(r['pool'])}</td>"
            f"<td>{e(r['gpu'])}</td><td>{e(r['price'])}</td><td>{e(r['idle_timeout'])}</td>"
            f"<td>{e(r['priority_ceiling'])}</td><td>{e(r['options'])}</td></tr>" for slug, r in rows.items())
        if not rows:
            cells = "<tr><td colspan='8'>no profile is offered</td></tr>"
        parts.append(f"<table><caption>Group {e(group)}</caption><tr><th scope='col'>profile</th>"
                     "<th scope='col'>name</th><th scope='col'>pool</th><th scope='col'>GPU</th>"
                     "<th scope='col'>price</th><th scope='col'>idle timeout</th><th scope='col'>priority ceiling"
                     f"</th><th scope='col'>options</th></tr>{cells}</table>")
    return "".join(parts)


def _age(seconds: float) -> str:
    """An observed wait: '40 s', '12 min', '3 h 5 min', '4 d 2 h'."""
    s = int(seconds)
    return (f"{s} s" if s < 120 else f"{s // 60} min" if s < 7200 else f"{s // 3600} h {s % 3600 // 60} min"
            if s < 172800 else f"{s // 86400} d {s % 86400 // 3600} h")


def _quota(t: TeamState) -> str:
    if t.pending is None and not t.quota:
        return "unknown"
    return "; ".join(f"{e(f)} {e(r)}: {_n(u)} / {_n(n)} (borrowed {_n(b)})"
                     for f, r, u, n, b in t.quota) or "no GPU quota"


def _oldest(t: TeamState) -> str:
    return "unknown" if not t.waits_known else "none waiting" if t.oldest_wait is None else _age(t.oldest_wait)


def charts_section(state: LiveState) -> str:
    """Each GPU pool's slots in use over the last day (chart.py), with its summary in words."""
    if not state.history:
        return ""
    now = state.read_at if state.read_at is not None else time.time()
    figures = "".join(
        f"<figure style='margin:.5em 0 1em'>{slots_svg(pool, buckets, now)}<figcaption>{e(pool)}: "
        f"{e(summary(buckets, now))}</figcaption></figure>" for pool, buckets in state.history.items())
    return (f"<h3 id='slots-chart'>GPU slots in use, last 24 h</h3><p class='note'>Since the console started "
            f"({e(_when(state.history_since))}), at most the last 24 h: kept in memory only (a restart begins "
            "again). Each step is the highest count read in its 5 minutes; the line is the pool's slots.</p>"
            + figures)


def live_section(state: LiveState) -> str:
    def known(value: int | None, p) -> str:  # a CPU pool's slots: not applicable once its nodes are read
        return "—" if value is None and p.slots_total is None and p.ready is not None else _n(value)
    pools = "".join(
        f"<tr><th scope='row'>{e(name)}</th><td>{_n(p.ready)}</td><td>{_n(p.cordoned)}</td><td>{_n(p.starting)}"
        f"</td><td>{_n(p.waiting)}</td><td>{known(p.slots_total, p)}</td><td>{known(p.slots_used, p)}</td></tr>"
        for name, p in state.pools.items())
    teams = "".join(
        f"<tr><th scope='row'>{e(name)}</th><td>{e(t.queue)}</td><td>{_quota(t)}</td><td>{_n(t.pending)}</td>"
        f"<td>{_oldest(t)}</td></tr>" for name, t in state.teams.items())
    errors = "".join(f"<li>{e(x)}</li>" for x in state.errors)
    return ("<h2 id='live'>Live state</h2>"
            f"<p class='note'>Read {e(_when(state.read_at))}; refreshed in the background every 30 s.</p>"
            + (f"<p>Could not read (shown as unknown):</p><ul class='bad'>{errors}</ul>" if errors else "")
            + "<table><caption>Pools</caption><tr><th scope='col'>pool</th><th scope='col'>nodes ready</th>"
            "<th scope='col'>nodes cordoned</th><th scope='col'>nodes starting (not Ready)</th>"
            "<th scope='col'>pods waiting for a node</th><th scope='col'>GPU slots</th>"
            f"<th scope='col'>GPU slots in use</th></tr>{pools}</table>"
            "<table><caption>Teams (Kueue)</caption><tr><th scope='col'>team</th><th scope='col'>ClusterQueue</th>"
            "<th scope='col'>GPU quota used / nominal (borrowed)</th><th scope='col'>pending Workloads</th>"
            f"<th scope='col'>oldest wait</th></tr>{teams}</table>" + charts_section(state))


def doctor_section(xsrf: str, result: dict | None, wait: float, running: bool = False) -> str:
    form = ("<p class='note'>A run is in progress.</p>" if running else
            f"<form method='post' action='doctor'>{xsrf}<button type='submit'>Run gpuhub doctor</button></form>"
            if wait <= 0 else f"<p class='note'>The doctor runs at most once a minute: again in {int(wait) + 1} s."
                              "</p>")
    out = ["<h2 id='doctor'>Doctor</h2>", form]
    if result is not None:
        failed = "".join(f"<li><span class='bad'>{e(row)}</span>" + (f"<br>fix: <code>{e(fix)}</code>" if fix else "")
                         + "</li>" for row, fix in result["failed"])
        out.append(f"<p>Last run {e(_when(result['at']))}: {e(result['summary'])}</p>")
        if failed:
            out.append(f"<ul>{failed}</ul>")
        out.append(f"<details><summary>Whole output</summary><pre>{e(result['output'])}</pre></details>")
    return "".join(out)


def _list(items: Iterable[str]) -> str:
    return "".join(f"<li>{e(x)}</li>" for x in items)


def dry_run_section(xsrf: str, text: str = "", result: dict | None = None) -> str:
    out = ["<h2 id='dry-run'>Dry run of a new profiles file</h2>",
           f"<form method='post' action='dry-run'>{xsrf}<label for='new-profiles'>Profiles file (YAML, at most 256 KiB)"
           f"</label><textarea id='new-profiles' name='profiles' rows='14'>{e(text)}</textarea>"
           "<button type='submit'>Compare with the loaded file</button></form>"]
    if result is not None:
        out.append("<div id='dry-run-result'>")
        if result.get("error"):
            out.append(f"<p class='bad'>{e(result['error'])}</p>")
        elif result.get("problems"):
            out.append(f"<p class='bad'>{len(result['problems'])} problem(s), as <code>gpuhub validate</code> lists "
                       f"them:</p><ul class='problems'>{_list(result['problems'])}</ul>")
        else:
            out.append(diff_html(result["diff"], result.get("servers"), result.get("servers_note", "")))
        out.append(f"<p class='note'>{e(APPLY)}</p></div>")
    return "".join(out)


def diff_html(d: Diff, servers: list[str] | None, servers_note: str = "") -> str:
    if d.empty:
        out = ["<p class='ok'>No difference from the loaded file: the same profiles for every group and the same "
               "Kueue objects.</p>"]
    else:
        out = []
        for group, g in d.groups.items():
            rows = [f"added: {s}" for s in g.added] + [f"removed: {s}" for s in g.removed] + \
                [f"changed: {s}: {'; '.join(c)}" for s, c in g.changed.items()]
            out.append(f"<h3>Group {e(group)}</h3><ul class='group-diff'>{_list(rows)}</ul>")
        kueue = [f"created: {k}" for k in d.kueue_added] + [f"deleted: {k}" for k in d.kueue_removed] + \
            [f"changed: {k}" for k in d.kueue_changed]
        out.append("<h3>Kueue objects</h3>" + (f"<ul class='kueue-diff'>{_list(kueue)}</ul>" if kueue else
                                              "<p>none would change</p>"))
    if servers is None:
        out.append(f"<p class='note'>Servers whose profile would disappear: unknown ({e(servers_note)}).</p>")
    elif servers:
        out.append(f"<h3>Servers whose profile would disappear</h3><ul class='servers'>{_list(servers)}</ul>")
    else:
        out.append("<p>No running server's profile would disappear.</p>")
    return "".join(out)


def page(*sections: str) -> str:
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>GPU hub admin console</title>"
            f"<style>{STYLE}</style></head><body><main><h1>GPU hub admin console</h1>"
            "<nav aria-label='sections'><a href='#profiles'>Profiles</a> · <a href='#live'>Live state</a> · "
            "<a href='#doctor'>Doctor</a> · <a href='#dry-run'>Dry run</a></nav>"
            + "".join(sections) + "</main></body></html>")
