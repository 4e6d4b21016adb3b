"""Kubernetes label syntax (pure), for what the profiles file puts on nodes and pods: node selectors and taints.

A key or value the API server would refuse must be refused by `gpuhub validate`, not found by the first spawn;
and one that AKS's `--labels`/`--node-taints` would split or drop (a comma, a NUL, a space) must never reach
the rendered node pools, where the shell script and Terraform would disagree about it.
"""
from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"({_DNS_SUBDOMAIN}/)?{_NAME}")
_VALUE = re.compile(rf"{_NAME}?")
_NAME_RULE = "up to 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
KEY_RULE = f"a Kubernetes label key: an optional DNS prefix and '/', then {_NAME_RULE}"
VALUE_RULE = f"a Kubernetes label value: empty, or {_NAME_RULE}"


def label_key(key: str) -> str:
    prefix = key.rpartition("/")[0]
    if not _KEY.fullmatch(key) or len(prefix) > 253:
        raise ValueError(f"{key!r} is not {KEY_RULE}")
    return key


def label_value(value: str) -> str:
    if not _VALUE.fullmatch(value):
        raise ValueError(f"{value!r} is not {VALUE_RULE}")
    return value


LabelKey = Annotated[str, AfterValidator(label_key)]
LabelValue = Annotated[str, AfterValidator(label_value)]
