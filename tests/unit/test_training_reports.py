"""A notebook's own progress reports (issue 28, item 4): `gpuhub.report()` in the kernel, the runner's relay into the
job's log, the hostile-input parser gpu-jobs reads them with, and the throughput computed from them."""
from __future__ import annotations

import io
import json
import logging
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuhub
from jupyterhub_gpu.contract import ENV_PROGRESS_FILE, progress_line
from jupyterhub_gpu.model.throughput import throughput
from jupyterhub_gpu.reports import FIELDS, REPORT_MAX_BYTES, encode, parse, report_message, reports_in, validate
from jupyterhub_gpu.runner.main import ReportRelay
from jupyterhub_gpu.singleuser.widgets import throughput_text, view


def line(report: dict, clock: str = "10:00:00") -> str:
    return progress_line(report_message(report), clock) + "\n"


# ------------------------------------------------------------------------------------------------ the parser
def test_a_report_round_trips_through_the_log():
    r = validate({"t": 1700000000.5, "step": 120, "samples": 3840, "total_steps": 1000, "loss": -0.25})
    assert reports_in("noise\n" + line(r) + "more noise\n") == [r]
    assert parse(encode(r)) == r


@pytest.mark.parametrize("bad", [
    '{"t": 1, "step": -1}', '{"t": 1, "step": 1.5}', '{"t": 1, "step": true}', '{"t": 1, "samples": "9"}',
    '{"t": 1, "loss": 1e400}', '{"t": 1, "samples": 1e300}', '{"t": 1, "step": 9007199254740993}',
])
def test_a_bad_field_is_dropped_and_the_rest_kept(bad):
    assert parse(bad) == {"t": 1.0}


@pytest.mark.parametrize("bad", ['[1, 2]', '"t"', '{"step": 3}', '{"t": NaN}', '{"t": -5}', '{"t": Infinity}',
                                 "{" * 400, '{"t": 1, "x": "' + "a" * REPORT_MAX_BYTES + '"}', "", "not json"])
def test_a_malformed_report_is_no_report(bad):
    assert parse(bad) is None


def test_unknown_fields_are_dropped_from_the_file_and_refused_from_the_call():
    assert parse('{"t": 1, "path": "/etc/passwd", "step": 2}') == {"t": 1.0, "step": 2}
    with pytest.raises(ValueError, match="unknown field"):
        validate({"t": 1, "lr": 0.1})
    with pytest.raises(ValueError, match="finite"):
        validate({"t": 1, "loss": math.nan})


def test_only_whole_report_lines_count():
    good = line({"t": 5.0, "step": 1})
    assert reports_in("x " + good) == []  # not at the start of a line
    assert reports_in(good.replace("report", "reports")) == []
    assert reports_in(good.rstrip("\n") + " trailing\n") == []
    assert reports_in(good.replace("10:00:00", "1:00:00")) == []
    long = progress_line("report " + json.dumps({"t": 1, "pad": "a" * REPORT_MAX_BYTES}), "10:00:00")
    assert reports_in(long) == []


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_any_log_text_parses_to_valid_reports_or_none(text):
    for r in reports_in(text) + [r for r in [parse(text)] if r]:
        assert "t" in r and set(r) <= set(FIELDS)
        for k, v in r.items():
            assert math.isfinite(v) and (v >= 0 or k == "loss")


_number = st.one_of(st.integers(-2 ** 60, 2 ** 60), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                    st.none(), st.text(max_size=5), st.lists(st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([*FIELDS, "x", "path"]), _number, max_size=7))
def test_any_json_object_gives_a_report_that_encodes_back_to_itself(raw):
    try:
        text = json.dumps(raw)
    except ValueError:
        return
    r = parse(text)
    if r is not None:
        assert parse(encode(r)) == r and reports_in(line(r)) == [r]
        assert all(isinstance(r[k], int) for k in ("step", "samples", "total_steps") if k in r)


# ------------------------------------------------------------------------------------------------ throughput
def test_rates_step_time_and_eta_from_the_newest_run():
    reports = [{"t": 100.0, "step": 0, "samples": 0, "total_steps": 1000},
               {"t": 110.0, "step": 50, "samples": 1600, "total_steps": 1000, "loss": 1.5},
               {"t": 120.0, "step": 100, "samples": 3200, "total_steps": 1000, "loss": 1.2}]
    assert throughput(reports) == {"step": 100, "total_steps": 1000, "samples": 3200, "loss": 1.2,
                                   "reported_at": 120.0, "samples_per_s": 160.0, "step_s": 0.2, "eta_s": 180.0}


def test_a_resumed_run_counts_from_where_its_counters_went_back_and_old_reports_leave_the_window():
    before = [{"t": 100.0, "step": 500, "samples": 99999}]
    resumed = [{"t": 200.0, "step": 0, "samples": 0}, {"t": 210.0, "step": 10, "samples": 100}]
    assert throughput(before + resumed)["samples_per_s"] == 10.0
    slow_then_fast = [{"t": 0.0, "step": 0}, {"t": 1000.0, "step": 10}, {"t": 1010.0, "step": 110}]
    assert throughput(slow_then_fast, window_s=300)["step_s"] == 0.1


def test_one_report_or_no_progress_has_no_rates():
    assert throughput([]) is None
    one = throughput([{"t": 5.0, "step": 3, "loss": 0.5}])
    assert one["step"] == 3 and one["loss"] == 0.5 and one["samples_per_s"] is one["step_s"] is one["eta_s"] is None
    stuck = throughput([{"t": 5.0, "step": 3, "samples": 10}, {"t": 9.0, "step": 3, "samples": 10}])
    assert stuck["samples_per_s"] == 0.0 and stuck["step_s"] is None  # busy or idle, the user now sees no progress
    close = throughput([{"t": 1.0, "step": 0, "samples": 0}, {"t": 1.0 + 1e-300, "step": 2 ** 53, "samples": 2 ** 53}])
    assert close["samples_per_s"] is close["step_s"] is None  # no rate from reports a moment apart


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries({"t": st.floats(0, 1e9)}, optional={
    "step": st.integers(0, 2 ** 53), "samples": st.integers(0, 2 ** 53), "total_steps": st.integers(0, 2 ** 53),
    "loss": st.floats(-1e18, 1e18)}), max_size=8))
def test_throughput_of_any_valid_reports_is_finite_and_never_negative(reports):
    out = throughput(reports)
    if out is None:
        assert not reports
        return
    for k in ("samples_per_s", "step_s", "eta_s"):
        assert out[k] is None or (math.isfinite(out[k]) and out[k] >= 0)


# ------------------------------------------------------------------------------------------------ the kernel's call
def test_report_outside_a_job_does_nothing_and_inside_writes_the_latest(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_PROGRESS_FILE, raising=False)
    assert gpuhub.report(step=1) is False
    path = tmp_path / "progress.json"
    monkeypatch.setenv(ENV_PROGRESS_FILE, str(path))
    monkeypatch.setattr(gpuhub, "_last_write", 0.0)
    assert gpuhub.report(step=1, samples=32, loss=2.0, total_steps=10) is True
    assert gpuhub.report(step=2, samples=64) is False  # within a second of the last write
    assert gpuhub.report(step=10, samples=320, total_steps=10) is True  # the last step is always written
    written = parse(path.read_text())
    assert written["step"] == 10 and written["samples"] == 320 and "loss" not in written
    with pytest.raises(ValueError, match="samples"):
        gpuhub.report(samples=-1)


def test_the_logging_handler_reports_the_fields_a_record_carries(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv(ENV_PROGRESS_FILE, str(path))
    monkeypatch.setattr(gpuhub, "_last_write", 0.0)
    logger = logging.getLogger("test-training")
    logger.addHandler(gpuhub.ProgressHandler())
    logger.warning("no progress here")
    assert not path.exists()
    logger.warning("step done", extra={"step": 7, "loss": 0.125})
    assert parse(path.read_text())["step"] == 7


# ------------------------------------------------------------------------------------------------ the runner's relay
def test_the_runner_prints_a_changed_report_once_with_its_own_time_when_the_kernels_is_far_off(tmp_path, monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    path = tmp_path / "progress.json"
    relay = ReportRelay(path, interval=5, clock=lambda: 1000.0)
    assert relay.poll() is None  # no file yet
    path.write_text(encode({"t": 999.0, "step": 4}))
    assert relay.poll() == {"t": 999.0, "step": 4} and relay.poll() is None
    path.write_text(encode({"t": 5e8, "step": 5}))  # a forged or skewed time
    assert relay.poll()["t"] == 1000.0
    path.write_text('{"t": 1, "step": 6' + " " * REPORT_MAX_BYTES + "}")  # too long: not read whole
    assert relay.poll() is None
    assert [r["step"] for r in reports_in(out.getvalue())] == [4, 5]


def test_the_relay_prints_the_last_report_when_the_run_ends(tmp_path, monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    path = tmp_path / "progress.json"
    with ReportRelay(path, interval=60):
        path.write_text(encode({"t": __import__("time").time(), "step": 9}))
    assert [r["step"] for r in reports_in(out.getvalue())] == [9]


# ------------------------------------------------------------------------------------------------ what the user sees
def test_the_widget_and_panel_line_says_the_speed_and_when_reports_stopped():
    speed = {"step": 100, "total_steps": 1000, "samples": 3200, "loss": 1.2, "reported_at": 1000.0,
             "samples_per_s": 160.0, "step_s": 0.2, "eta_s": 180.0}
    assert throughput_text(speed, now=1010) == "step 100/1000 · 160 samples/s · 0.2 s/step · ETA ~3 min · loss 1.2"
    assert throughput_text(speed, now=1000 + 600).endswith("last report ~10 min ago")
    assert throughput_text(None) == ""
    running = {"name": "j", "state": "Running", "cell": {"cell": 2, "of": 5, "since": "10:00:00"}, "node": "n1",
               "throughput": {**speed, "samples_per_s": 12345.0}}
    assert view(running, now=1010)["title"] == ("Running (cell 2/5) on n1 · step 100/1000 · 12,345 samples/s · "
                                               "0.2 s/step · ETA ~3 min · loss 1.2")
