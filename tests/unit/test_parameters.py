"""One rule reads `name=value` parameters everywhere (`%gpu_submit`, its form, `gpuhub render job`):
a Python literal when it is one, else the text itself."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.parameters import format_value, parse_assignment, parse_assignments, parse_value, split_assignments

# JSON values: what a parameter may be (the service refuses anything else)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


@pytest.mark.parametrize("text, value", [
    ("10", 10), ("0.1", 0.1), ("-3", -3), ("True", True), ("None", None), ("[1, 2]", [1, 2]),
    ("{'a': 1}", {"a": 1}), ("'a b'", "a b"), ('"3"', "3"),
    ("yes", "yes"), ("fast", "fast"), ("run 1", "run 1"), ("true", "true"), ("", ""), ("1e", "1e"),
    ("[1,", "[1,"), ("__import__('os')", "__import__('os')"), ("1+", "1+"),
])
def test_a_literal_else_the_text(text, value):
    assert parse_value(text) == value and type(parse_value(text)) is type(value)


def test_hostile_text_is_a_string_not_a_crash():
    deep = "[" * 100_000 + "]" * 100_000
    assert parse_value(deep) == deep
    assert parse_value("\x00") == "\x00"


@given(json_values)
def test_round_trip_of_every_json_value(value):
    assert parse_value(format_value(value)) == value


@given(st.text())
def test_any_text_parses_without_raising(text):
    parse_value(text)


@given(st.from_regex(r"[a-z][a-z0-9 _/:@-]{0,20}", fullmatch=True))
def test_plain_words_stay_strings(text):
    assert parse_value(text) == text


def test_assignments():
    assert parse_assignment(" lr = 0.01 ") == ("lr", 0.01)
    assert parse_assignment("expr=a=b") == ("expr", "a=b")  # only the first = separates
    assert parse_assignments(["x=yes", "y=True", "x=2"]) == {"x": 2, "y": True}
    for bad in ("epochs", "=3", " =3"):
        with pytest.raises(ValueError, match="write name=value"):
            parse_assignment(bad)


def test_form_text_splits_on_commas_outside_brackets_and_quotes():
    assert split_assignments("a=1, b='x'\nc=[1, 2], d={'k': (1, 2)}\n\n e='p, q', f=\"it's\"") == [
        "a=1", " b='x'", "c=[1, 2]", " d={'k': (1, 2)}", " e='p, q'", ' f="it\'s"']
    assert split_assignments(r"s='a\', b', t=1") == [r"s='a\', b'", " t=1"]


@given(st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), json_values, max_size=5))
def test_form_round_trip(params):
    """What the form shows for a previous submission's parameters reads back as the same parameters."""
    text = "\n".join(f"{k}={format_value(v)}" for k, v in params.items())
    assert parse_assignments(split_assignments(text)) == params
    assert parse_assignments(split_assignments(", ".join(f"{k}={format_value(v)}" for k, v in params.items()))) \
        == params


def test_cli_and_magic_read_parameters_alike():
    from jupyterhub_gpu.singleuser.magic import parse_submit_args
    from jupyterhub_gpu.singleuser.widgets import parse_params
    from jupyterhub_gpu.tools.cli import parse_params as cli_params

    items = ["flag=yes", "n=3", "on=True", "tags=[1, 2]", "name='run 1'", "empty="]
    want = {"flag": "yes", "n": 3, "on": True, "tags": [1, 2], "name": "run 1", "empty": ""}
    magic = parse_submit_args(" ".join(f'--param "{i}"' for i in items))["parameters"]
    assert cli_params(items) == magic == parse_params("\n".join(items)) == want
