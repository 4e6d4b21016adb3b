"""`gpuhub report` output (table, CSV, JSON) from a known report, and its refusal of bad input."""
from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.services.usage import accounting as acc
from jupyterhub_gpu.services.usage.collect import report
from jupyterhub_gpu.tools.cli import main
from jupyterhub_gpu.tools.report import ReportError, render, since_of

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)


def rep(used=True):
    lts = [acc.Lifetime("a", "server", "jhub", "jupyter-alice", "alice", "", "a100", "", 2, 7.345,
                        T0, T0 + timedelta(hours=2)),
           acc.Lifetime("b", "job", "team-v", "x-1", "bob", "vision", "mig", "x", 1, 0.524,
                        T0, T0 + timedelta(hours=4))]
    use = {("jhub", "jupyter-alice"): acc.PodUse(1.0, 7000.0)} if used else None
    return report(lts, [], T0, T0 + timedelta(days=1), "user", use, 0.5 if used else None)


def test_table_csv_json():
    table = render(rep(), "table")
    assert "alice" in table and "14.69" in table and "25.0" in table and "reclaimed by the culler: 0.50 GPU-h" in table
    assert "queue wait: no job admitted in the range" in table
    assert "?" in render(rep(used=False), "table").splitlines()[2]  # unknown use is '?', never 0
    rows = list(csv.DictReader(io.StringIO(render(rep(), "csv"))))
    assert [r["key"] for r in rows] == ["alice", "bob", "total"]
    assert float(rows[-1]["cost"]) == pytest.approx(14.69 + 4 * 0.524, abs=0.01)
    data = json.loads(render(rep(), "json"))
    assert data["total"]["gpu_hours_held"] == 8.0 and data["rows"][0]["utilisation_pct"] == 25.0


@pytest.mark.parametrize("text", ["", "x", "-1d", "0s", "401d", "7d; rm -rf /"])
def test_since_refuses_bad_durations(text):
    with pytest.raises(ReportError, match="--since"):
        since_of(text, T0)
    assert since_of("7d", T0) == T0 - timedelta(days=7)


def test_cli_bad_input_exits_2_with_nothing_on_stdout(capsys, tmp_path):
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "jupyterhub_gpu" / "examples" / "profiles.yaml"
    assert main(["report", str(example), "--since", "forever"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "--since" in out.err
    with pytest.raises(SystemExit):
        main(["report", str(example), "--by", "node"])


def test_usage_page_svg_and_html_escape_hostile_names():
    from jupyterhub_gpu.services.usage.web import bar_chart_svg, page

    rows = [{"key": "<script>alert(1)</script>", "gpu_hours_held": 3.0, "cost": 1.0, "pods": 1},
            {"key": "b&b", "gpu_hours_held": 1.5, "cost": 0.5, "pods": 2}]
    svg = bar_chart_svg(rows)
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "b&amp;b" in svg
    assert 'width="420.0"' in svg and 'width="210.0"' in svg  # bars in proportion, the longest full width
    html = page("GPU usage of <x>", rows, T0, T0 + timedelta(days=7))
    assert "<script>" not in html and "GPU usage of &lt;x&gt;" in html
    assert "no GPU usage in this range" in bar_chart_svg([])


def test_usage_page_hints_and_note_are_escaped():
    from jupyterhub_gpu.services.usage.web import page

    html = page("t", [], T0, T0, hints=["a <b> hint"], note="hints unavailable: <x>")
    assert "<ul class='hints'><li>a &lt;b&gt; hint</li></ul>" in html and "hints unavailable: &lt;x&gt;" in html
    assert "Right-sizing" not in page("t", [], T0, T0)


@given(st.text(max_size=300))
def test_user_and_team_names_are_bounded_and_printable(text):
    from jupyterhub_gpu.tools.report import MAX_NAME, name_of

    if 0 < len(text) <= MAX_NAME and text.isprintable():
        assert name_of("--team", text) == text
    else:
        with pytest.raises(ReportError, match="--team"):
            name_of("--team", text)
    assert name_of("--user", None) is None


def test_a_ranged_report_reads_the_stores_rows_of_the_range_user_and_team(tmp_path):
    from jupyterhub_gpu.services.usage.collect import all_lifetimes
    from jupyterhub_gpu.services.usage.live import UsageReader
    from jupyterhub_gpu.services.usage.store import UsageStore

    def lt(uid, user, team, days_ago):
        end = T0 - timedelta(days=days_ago)
        return acc.Lifetime(uid, "job" if team else "server", "ns", uid, user, team, "mig", "j" if team else "",
                            1, 0.524, end - timedelta(hours=1), end)

    UsageStore(tmp_path).append_finished([lt("old", "bob", "vision", 40), lt("b", "bob", "vision", 3),
                                          lt("c", "carol", "nlp", 2), lt("a", "alice", "", 1)])
    live = [lt("b", "bob", "vision", 0), lt("live", "carol", "nlp", 0)]  # live wins for a uid in both
    reader, since = UsageReader(tmp_path), T0 - timedelta(days=30)
    got = {x.uid: x for x in all_lifetimes(live, reader, since, T0, team="vision")}
    assert set(got) == {"b"} and got["b"].end == T0
    assert {x.uid for x in all_lifetimes(live, reader, since, T0, user="carol")} == {"c", "live"}
    assert {x.uid for x in all_lifetimes([], reader, since, T0)} == {"b", "c", "a"}
    assert {x.uid for x in all_lifetimes([], reader)} == {"old", "b", "c", "a"}  # no range: all of it


def test_a_store_not_yet_upgraded_is_named_not_read_as_empty(tmp_path):
    from jupyterhub_gpu.services.usage.live import UsageReader
    from jupyterhub_gpu.services.usage.store import UsageStore

    (tmp_path / "finished.jsonl").write_text("{}\n")
    assert UsageReader(tmp_path).unimported()  # gpuhub report --store says so (exit 2), never "no usage"
    UsageStore(tmp_path)  # the collector's start imports it
    assert not UsageReader(tmp_path).unimported() and not (tmp_path / "finished.jsonl").exists()
