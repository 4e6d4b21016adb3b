"""The one duration parser (model/durations.py): what admins and users write is read as before, and no text,
however hostile, takes more than a few milliseconds, at every place the product reads a duration."""
from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.builders.jobs import JobRequestError
from jupyterhub_gpu.model import durations
from jupyterhub_gpu.model.profiles import duration_seconds
from jupyterhub_gpu.services.jobs.submission import parse_timeout
from jupyterhub_gpu.services.usage.__main__ import retention_of
from jupyterhub_gpu.tools.report import ReportError, since_of


@pytest.mark.parametrize("text,seconds", [
    ("90", 90), ("1.5", 1.5), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("1h 30m", 5400), (" 2h ", 7200),
    ("1 day 2 hours", 93600), ("1.5h", 5400), ("7d", 604800), ("400d", 400 * 86400), ("1w2d", 9 * 86400),
    ("12s", 12), ("36h", 129600), ("10 minutes", 600), ("1H", 3600), ("2 hrs 5 mins 3 secs", 7503),
])
def test_what_people_write_is_read(text, seconds):
    assert durations.parse(text) == seconds


@pytest.mark.parametrize("text,needle", [
    ("30 minutes please", "not a duration"), ("", "not a duration"), ("   ", "not a duration"),
    ("h", "not a duration"), ("1x", "not a duration"), ("-1h", "longer than zero"), ("1e3", "not a duration"),
    ("٣h", "not a duration"),  # a digit, but not 0-9: int() would take it, we do not
    ("1.h", "not a duration"), ("0x10", "not a duration"), ("1h1h", "each unit once"),
    ("30m2h", "the largest first"), ("1" * 10 + "s", "not a duration"), ("1d" + " " * 70 + "x", "at most 64"),
])
def test_what_is_not_a_duration_is_refused_saying_what_to_write(text, needle):
    with pytest.raises(ValueError, match=None) as e:
        durations.parse(text)
    assert needle in str(e.value)


HOSTILE = ["1d" + " " * n + "x" for n in (60, 10_000)] + ["1" + "h" * 50_000, "1 " * 30_000,
                                                         "1d" + "\t" * 5000 + "1", "9" * 100_000]


def _entry_points():
    """Every place the product reads a duration a user or an admin wrote."""
    now = datetime.now(timezone.utc)
    return {"job timeout (POST /jobs)": lambda t: parse_timeout(t), "profiles / gpu-jobs options": duration_seconds,
            "gpuhub report --since": lambda t: since_of(t, now), "collector --retention": retention_of}


@pytest.mark.timeout(20)  # pytimeparse2 took ~2 s on the first input and hours on the second
@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: f"{t[:6]!r}x{len(t)}")
def test_hostile_durations_are_refused_in_linear_time_everywhere(text):
    for where, read in _entry_points().items():
        start = time.thread_time()  # CPU time: a busy machine descheduling the test is not the parser
        try:
            got = read(text)
        except (ValueError, JobRequestError, ReportError):
            got = None
        took = time.thread_time() - start
        assert got is None, where
        assert took < 0.02, f"{where}: {took * 1000:.0f} ms on {text[:12]!r}... ({len(text)} characters)"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=" \t0123456789.hmsdwinourecakHMSD:,-", max_size=200))
def test_any_text_of_duration_characters_is_a_number_or_a_clear_refusal_fast(text):
    start = time.thread_time()
    try:
        got = durations.parse(text)
    except ValueError as e:
        assert "duration" in str(e) or "unit" in str(e) or "longer than zero" in str(e)
    else:
        assert got >= 0 and len(text) <= durations.MAX_CHARS
    assert time.thread_time() - start < 0.01


@given(st.lists(st.sampled_from(sorted(set(durations._UNITS.values()), reverse=True)), unique=True, min_size=1),
       st.data())
def test_parts_largest_first_add_up(units, data):
    units = sorted(units, reverse=True)
    amounts = [data.draw(st.integers(0, 999)) for _ in units]
    names = {v: k for k, v in durations._UNITS.items()}  # one spelling per unit is enough here
    text = " ".join(f"{a}{names[u]}" for a, u in zip(amounts, units))
    assert durations.parse(text) == sum(a * u for a, u in zip(amounts, units))


def test_non_text_durations():
    assert duration_seconds(90) == 90 and duration_seconds(1.5) == 1
    for bad in (True, float("nan"), float("inf"), [1], {"h": 1}, None):
        with pytest.raises(ValueError, match="not a duration"):
            duration_seconds(bad)
