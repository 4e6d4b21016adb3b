"""The console's chart of GPU slots in use (services/admin/chart.py): the history folds reads into 5-minute buckets
and keeps at most a day whatever it is fed; the SVG never fails, stays bounded, is well-formed XML with no script,
no style sheet and nothing fetched, escapes its text and says in words what it shows."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.services.admin.chart import BUCKET_S, MAX_BUCKETS, SPAN_S, Bucket, SlotHistory, slots_svg, summary

NOW = 1_800_000_000.0 - 1_800_000_000.0 % BUCKET_S  # a bucket's start
SVG = "{http://www.w3.org/2000/svg}"
ALLOWED = {"svg", "title", "line", "path", "text"}


def elements(svg: str) -> list[ET.Element]:
    root = ET.fromstring(svg)
    return list(root.iter())


def test_reads_fold_into_five_minute_buckets_with_the_highest_count():
    h = SlotHistory()
    h.record(NOW + 10, {"gput4": (2, 8)})
    h.record(NOW + 40, {"gput4": (5, 8)})
    h.record(NOW + 70, {"gput4": (3, 12)})
    h.record(NOW + BUCKET_S + 5, {"gput4": (1, 8)})
    assert h.snapshot()["gput4"] == (Bucket(NOW, 5, 12), Bucket(NOW + BUCKET_S, 1, 8))


def test_an_unknown_read_is_a_gap_and_a_pool_gone_from_the_file_is_forgotten():
    h = SlotHistory()
    h.record(NOW, {"gput4": (None, None), "gpumig": (3, None)})
    assert h.snapshot() == {"gput4": (), "gpumig": (Bucket(NOW, 3, None),)}
    h.record(NOW + BUCKET_S, {"gput4": (1, 4)})
    assert list(h.snapshot()) == ["gput4"]


def test_a_day_at_most_and_a_clock_that_goes_back_drops_the_later_buckets():
    h = SlotHistory()
    for i in range(3 * MAX_BUCKETS):
        h.record(NOW + i * BUCKET_S, {"p": (i % 7, 8)})
    kept = h.snapshot()["p"]
    assert len(kept) <= MAX_BUCKETS and kept[-1].start - kept[0].start < SPAN_S
    last = kept[-1].start
    h.record(last - 10 * BUCKET_S, {"p": (9, 8)})  # into the bucket it had there; the ten after it dropped
    assert h.snapshot()["p"][-1] == Bucket(last - 10 * BUCKET_S, 9, 8) and len(h.snapshot()["p"]) == len(kept) - 10


def test_the_summary_names_the_peak_and_the_latest_read_in_utc():
    buckets = [Bucket(NOW - 2 * BUCKET_S, 6, 8), Bucket(NOW - BUCKET_S, 3, 8), Bucket(NOW, 3, None)]
    t = __import__("time").strftime("%H:%M", __import__("time").gmtime(NOW - 2 * BUCKET_S))
    assert summary(buckets, NOW).startswith(f"peak 6 of 8 at {t} UTC; latest 3 at ")
    assert summary([], NOW) == "no reading yet"
    assert summary([Bucket(NOW - SPAN_S - 1, 9, 9)], NOW) == "no reading yet"  # older than a day: not shown


def test_the_chart_is_svg_elements_only_named_for_screen_readers():
    svg = slots_svg("gput4", [Bucket(NOW - BUCKET_S, 2, 8), Bucket(NOW, 6, 8)], NOW)
    tags = {el.tag.removeprefix(SVG) for el in elements(svg)}
    assert tags <= ALLOWED and "path" in tags
    root = ET.fromstring(svg)
    assert root.get("role") == "img" and "peak 6 of 8" in root.get("aria-label")
    assert root.find(f"{SVG}title").text == root.get("aria-label")
    assert "href" not in svg and "script" not in svg.lower() and "style" not in svg.lower()


def test_a_pool_name_is_escaped():
    name = "</title><script>alert(1)</script>' onload='x\" &amp;"
    svg = slots_svg(name, [Bucket(NOW, 1, 2)], NOW)
    root = ET.fromstring(svg)  # still one well-formed element
    assert root.find(f"{SVG}title").text.startswith(f"GPU slots in use in pool {name}")
    assert "<script" not in svg and "onload" not in root.attrib


buckets = st.lists(st.builds(Bucket, st.floats(allow_nan=True, allow_infinity=True) | st.floats(NOW - 2 * SPAN_S,
                                                                                                 NOW + BUCKET_S),
                             st.integers(-10**30, 10**30), st.none() | st.integers(-10**30, 10**30)), max_size=400)


@given(buckets, st.text(max_size=40), st.floats(allow_nan=True) | st.just(NOW))
def test_any_series_draws_a_bounded_well_formed_chart(series, pool, now):
    svg = slots_svg(pool, series, now)
    assert {el.tag.removeprefix(SVG) for el in elements(svg)} <= ALLOWED
    assert len(svg) < 20_000 + 4 * len(pool) + 60 * min(len(series), MAX_BUCKETS * 4)
    assert "<script" not in svg.lower()
    assert isinstance(summary(series, now), str)


@given(st.lists(st.tuples(st.floats(NOW - 3 * SPAN_S, NOW + 3 * SPAN_S) | st.floats(allow_nan=True),
                          st.none() | st.integers(-10**30, 10**30), st.none() | st.integers(-10**30, 10**30)),
                max_size=300))
def test_the_history_stays_bounded_for_any_reads(reads):
    h = SlotHistory()
    for at, used, total in reads:
        h.record(at, {"p": (used, total)})
    kept = h.snapshot()["p"] if reads else ()
    assert len(kept) <= MAX_BUCKETS
    assert all(0 <= b.used <= 10**6 and (b.total is None or 0 <= b.total <= 10**6) for b in kept)
    assert [b.start for b in kept] == sorted({b.start for b in kept})
