"""How every benchmark reports: one JSON line on stdout, kept in bench/results/<name>.json (ignored by
git; docs/benchmarks.md records the figures with the command that produced them)."""
from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def write_result(name: str, result: dict) -> int:
    line = json.dumps(result)
    print(line)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(line + "\n")
    return 0
