"""Notebook parameters written as `name=value` text: one rule for `%gpu_submit --param`, its form, and
`gpuhub render job --param` (stdlib only: the kernel imports this).

The rule: the value is a Python literal when `ast.literal_eval` reads it (`3`, `0.01`, `True`, `None`,
`[1, 2]`, `{'a': 1}`, `'text'`), else the text itself (`fast`, `yes`, `run 1`). So `x=yes` is the string
"yes" and `x=True` the boolean. `format_value` writes a value back so that this rule reads it unchanged.
"""
from __future__ import annotations

import ast
from typing import Any, Iterable


def parse_value(text: str) -> Any:
    """`10` → 10, `0.1` → 0.1, `[1,2]` → list, `True` → True, `'a'` → 'a', anything else → the string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text


def format_value(value: Any) -> str:
    """The text `parse_value` reads back as `value` (a Python literal, e.g. for a form's default)."""
    return repr(value)


def parse_assignment(item: str) -> tuple[str, Any]:
    """`name=value` → (name, parsed value); the name and value are stripped of surrounding blanks.
    ValueError when there is no `=` or no name."""
    name, sep, value = item.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"{item.strip()!r}: write name=value")
    return name.strip(), parse_value(value.strip())


def parse_assignments(items: Iterable[str]) -> dict[str, Any]:
    """Each `name=value` item into one dict (a later name wins)."""
    return dict(parse_assignment(item) for item in items)


def split_assignments(text: str) -> list[str]:
    """A form's text → `name=value` items: one per line, or several on a line separated by commas that are
    outside brackets and quotes (so `tags=[1, 2], name='a, b'` is two items)."""
    items: list[str] = []
    for line in text.splitlines():
        depth, quote, escaped, start = 0, "", False, 0
        for i, ch in enumerate(line):
            if quote:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth = max(depth - 1, 0)
            elif ch == "," and depth == 0:
                items.append(line[start:i])
                start = i + 1
        items.append(line[start:])
    return [item for item in items if item.strip()]
