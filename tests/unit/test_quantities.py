"""Kubernetes quantities read and written one way (model/quantities.py)."""
from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyterhub_gpu.model.quantities import GI, MI, cpu, human_bytes, memory, parse, parse_or_none


@pytest.mark.parametrize("text, value", [("500m", Decimal("0.5")), ("2", 2), (2, 2), ("8Gi", 8 * GI),
                                         ("512Mi", 512 * MI), ("1G", 10**9), ("1.5", Decimal("1.5"))])
def test_parse(text, value):
    assert parse(text) == value and parse_or_none(text) == value


@pytest.mark.parametrize("bad", ["lots", "", "1Gb", True, False, None, [1], {"a": 1}, "1e400000", "inf",
                                 "-Infinity", "NaN", "9Ei"])
def test_not_quantities(bad):
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        parse(bad)
    assert parse_or_none(bad) is None


@pytest.mark.parametrize("cores, text", [(Decimal("0.5"), "500m"), (2, "2"), (Decimal("2.000"), "2"), (0.25, "250m"),
                                         (Decimal("47.3205"), "47320m")])
def test_cpu(cores, text):
    assert cpu(cores) == text


@pytest.mark.parametrize("num, text, human", [(8 * GI, "8Gi", "8 GiB"), (8.5 * GI, "8704Mi", "8.5 GiB"),
                                              (512 * MI, "512Mi", "512 MiB"), (80 * GI, "80Gi", "80 GiB"),
                                              (Decimal("30814718976"), "29387Mi", "28.7 GiB"), (0, "0Mi", "0 MiB"),
                                              (MI + 1, "1Mi", "1 MiB")])
def test_memory_and_human_bytes(num, text, human):
    assert memory(num) == text and human_bytes(num) == human


@given(st.integers(min_value=0, max_value=2**50))
def test_memory_is_a_quantity_of_the_bytes_rounded_down_to_mib(num):
    assert parse(memory(num)) == num - num % MI


@given(st.decimals(min_value=0, max_value=10**6, places=4, allow_nan=False))
def test_cpu_is_a_quantity_of_the_cores_rounded_down_to_millicores(cores):
    assert parse(cpu(cores)) == int(cores * 1000) / Decimal(1000)


@given(st.integers(min_value=GI, max_value=2**50))
def test_human_bytes_is_within_a_twentieth_of_a_gib(num):
    value, unit = human_bytes(num).split()
    assert unit == "GiB" and abs(Decimal(value) * GI - num) <= GI / 20
