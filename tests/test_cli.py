"""The command line: demo, import and recall, run in-process through ``main``."""

from __future__ import annotations

import json

from threadrecall.cli import main


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


def test_errors_are_reported_not_raised(tmp_path, capsys):
    assert main(["recall", "t", "--db", str(tmp_path / "x.duckdb"), "--metadata", '{"a-b": 1}']) == 2
    assert 'Invalid metadata filter key "a-b".' in capsys.readouterr().err
