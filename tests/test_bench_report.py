"""The speed report runs end to end at its small size and writes every section with sane values.

No timing is asserted: speed is reported, not tested.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

BENCHES = Path(__file__).resolve().parents[1] / "benches"


@pytest.fixture(scope="module")
def report_module():
    spec = importlib.util.spec_from_file_location("bench_report", BENCHES / "report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_report"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report(report_module, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    path = report_module.run("small", out)
    return out, path.read_text("utf-8")


def table(text, heading):
    """The rows (as lists of cells) of the first table after ``heading``."""
    lines = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows[2:]


def number(cell):
    return float(cell.replace(",", "").rstrip("x"))


def test_every_section_is_written(report, report_module):
    _, text = report
    for heading in report_module.SECTIONS:
        assert heading in text
    assert re.search(r"\d+ logical cores; load average", text)
    assert "numpy" in text and "duckdb" in text


def test_recall_values_are_fractions_and_latencies_positive(report):
    _, text = report
    unfiltered = table(text, "## Vector search, unfiltered")
    assert [int(r[0]) for r in unfiltered] == [16, 32, 64, 128, 256]
    for row in unfiltered:
        assert 0.0 <= number(row[1]) <= 1.0
        assert number(row[2]) > 0
    assert number(unfiltered[-1][1]) >= 0.9  # a wide search finds nearly all true neighbours
    filtered = table(text, "## Vector search, filtered")
    assert [r[0] for r in filtered] == ["10%", "1%", "0.1%"]
    for row in filtered:
        assert 0.0 <= number(row[1]) <= 1.0
    history = table(text, "## recall() vs raw DuckDB SQL")
    assert len(history) == 4 and all(number(r[1]) > 0 and number(r[4]) > 0 for r in history)
    semantic = table(text, "## Semantic recall end to end")
    assert {(r[0], r[1]) for r in semantic} == {
        (m, s) for m in ("vector", "lexical", "hybrid") for s in ("thread", "resource")}


def test_plots_are_written_when_matplotlib_is_installed(report):
    out, text = report
    if importlib.util.find_spec("matplotlib") is None:
        assert "plots skipped" in text
    else:
        assert (out / "recall-vs-qps.png").stat().st_size > 0
        assert (out / "latency-percentiles.png").stat().st_size > 0
