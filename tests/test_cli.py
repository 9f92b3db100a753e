"""The command line: demo, import and recall, run in-process through ``main``."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from threadrecall import __version__
from threadrecall.cli import build_parser, main


def test_demo_runs_every_recall_kind(tmp_path, capsys):
    assert main(["demo", "--db", str(tmp_path / "demo" / "d.duckdb")]) == 0
    out = capsys.readouterr().out
    for heading in ("Last 4 messages", "page before them", "Between 09:10 and 09:20",
                    'kind == "tip"', "either side", "Semantic recall"):
        assert heading in out
    assert "Stored 26 messages in 3 threads" in out


def test_import_then_recall_as_json(tmp_path, capsys):
    rows = [{"id": f"m{i}", "thread_id": "t", "resource_id": "r", "role": "user", "content": f"hello {i}",
             "created_at": f"2024-01-01T00:00:0{i}Z", "metadata": {"even": i % 2 == 0}} for i in range(6)]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    db = str(tmp_path / "m.duckdb")
    assert main(["import", str(source), "--db", db]) == 0
    capsys.readouterr()
    assert main(["recall", "t", "--db", db, "--all", "--metadata", '{"even": true}']) == 0
    result = json.loads(capsys.readouterr().out)
    assert [m["id"] for m in result["messages"]] == ["m0", "m2", "m4"] and result["total"] == 3


def _imported(tmp_path) -> str:
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"id": "m1", "thread_id": "t", "resource_id": "r", "role": "user",
                                  "content": "hello"}) + "\n")
    db = str(tmp_path / "x.duckdb")
    assert main(["import", str(source), "--db", db]) == 0
    return db


def test_errors_are_reported_not_raised(tmp_path, capsys):
    db = _imported(tmp_path)
    capsys.readouterr()
    assert main(["recall", "t", "--db", db, "--metadata", '{"a-b": 1}']) == 2
    assert 'Invalid metadata filter key "a-b".' in capsys.readouterr().err


def run(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "threadrecall.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def mistakes(tmp_path):
    (tmp_path / "notes.jsonl").write_text('{"note": 1}\n')
    (tmp_path / "binary.dat").write_bytes(bytes(range(256)))
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    return [
        (["import", "missing.jsonl", "--db", "m.duckdb"], "cannot read missing.jsonl"),
        (["import", "binary.dat", "--db", "m.duckdb"], "not UTF-8 text"),
        (["import", "list.jsonl", "--db", "m.duckdb"], "line 1: not a JSON object"),
        (["import", "in.jsonl", "--db", "notes.jsonl"], "notes.jsonl exists and is not a DuckDB database"),
        (["import", "in.jsonl", "--db", "."], "is a directory"),
        (["recall", "t", "--db", "x.duckdb", "--metadata", "{kind: tip}"], "--metadata is not JSON"),
        (["recall", "t", "--db", "x.duckb"], "no database at x.duckb"),
        (["recall", "nope", "--db", "x.duckdb"], "no thread nope in x.duckdb"),
        (["recall", "t", "--db", "notes.jsonl"], "not a DuckDB database"),
        (["recall", "t", "--db", "x.duckdb", "--per-page", "ten"], "not a whole number: 'ten'"),
        (["recall", "t", "--db", "x.duckdb", "--resource-id", "other"], "is for resource with id r"),
        (["eval", "locomo", "in.jsonl", "--modes", "lexical"], "in.jsonl is not a LoCoMo file"),
        (["eval", "locomo", "binary.dat", "--modes", "lexical"], "binary.dat is not a LoCoMo JSON file"),
        (["eval", "locomo", "missing.json", "--modes", "lexical"], "missing.json"),
        (["eval", "locomo", "in.jsonl", "--k", "five"], "not a whole number: 'five'"),
        (["bogus"], "invalid choice"),
    ]


def test_each_mistake_is_one_line_and_a_non_zero_exit(tmp_path):
    _imported(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    for args, cause in mistakes(tmp_path):
        result = run(*args, cwd=tmp_path)
        assert result.returncode != 0, args
        assert result.stdout == "", args
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and cause in lines[0], (args, result.stderr)
    after = sorted(p.name for p in tmp_path.iterdir())
    assert [n for n in after if n not in before] == ["binary.dat", "list.jsonl", "notes.jsonl"]
    assert (tmp_path / "notes.jsonl").read_text() == '{"note": 1}\n'


def test_output_cut_short_by_the_reader_is_quiet(tmp_path):
    db = _imported(tmp_path)
    shell = f"{sys.executable} -m threadrecall.cli recall t --db {db} --all | head -c 1"
    result = subprocess.run(["bash", "-o", "pipefail", "-c", shell], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout == "{" and result.stderr == ""


def test_version_and_help_for_every_argument(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"threadrecall {__version__}"
    undocumented = []
    parsers = [build_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
            elif not action.help:
                undocumented.append(f"{parser.prog} {action.dest}")
    assert undocumented == []
