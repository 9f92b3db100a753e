"""What lies on disk: paths that are not databases, failed writes, leftovers of cut-short saves,
and the write-ahead log after a clean close."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from threadrecall import Memory
from threadrecall.embedders import HashEmbedder
from threadrecall.errors import ConfigurationError, StorageError
from threadrecall.storage import DuckDBStorage


def run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=120)


def test_an_existing_file_that_is_not_a_database_is_refused(tmp_path):
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"id": "m1"}\n')
    with pytest.raises(ConfigurationError, match="is not a DuckDB database"):
        DuckDBStorage(notes)
    assert notes.read_text() == '{"id": "m1"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.jsonl"]


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(ConfigurationError, match="is a directory"):
        DuckDBStorage(tmp_path)


def test_a_folder_that_cannot_be_made_is_a_storage_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError, match="File exists|Not a directory"):
        DuckDBStorage(tmp_path / "file" / "m.duckdb")


def test_a_new_path_with_any_suffix_is_a_real_database(tmp_path):
    path = tmp_path / "notes.jsonl"
    with Memory(storage=DuckDBStorage(path)) as memory:
        memory.save_messages([{"thread_id": "t", "resource_id": "r", "role": "user", "content": "hi"}])
    with Memory(storage=DuckDBStorage(path)) as memory:
        assert [m.text for m in memory.recall("t").messages] == ["hi"]


def test_a_full_disk_is_a_storage_error_carrying_the_os_error(tmp_path):
    """The file-size limit makes the operating system refuse writes past a size, as a full
    disk does (EFBIG instead of ENOSPC)."""
    result = run("""
        import os, resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        from threadrecall import Memory
        from threadrecall.errors import StorageError
        from threadrecall.storage import DuckDBStorage
        memory = Memory(storage=DuckDBStorage(sys.argv[1]))
        memory.create_thread("r", thread_id="t")
        limit = os.path.getsize(sys.argv[1]) + 300_000
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        try:
            for i in range(100):
                memory.save_messages([{"thread_id": "t", "role": "user", "content": "x" * 100_000}])
        except StorageError as exc:
            print("StorageError", exc)
    """, str(tmp_path / "m.duckdb"))
    assert result.stdout.startswith("StorageError"), result.stderr
    assert "File too large" in result.stdout and "rollback" not in result.stdout


def test_a_directory_where_the_index_file_goes_is_a_storage_error(tmp_path):
    path = tmp_path / "m.duckdb"
    memory = Memory(storage=DuckDBStorage(path), embedder=HashEmbedder(dim=16),
                    options={"semantic_recall": True})
    (tmp_path / f"m.duckdb.{memory.index.name}.hnsw").mkdir()
    with pytest.raises(StorageError, match="directory"):
        memory.save_messages([{"thread_id": "t", "resource_id": "r", "role": "user", "content": "hi"}])
    cur = memory.storage.db.cursor()
    assert cur.execute("SELECT count(*) FROM messages").fetchone() == (0,)
    assert cur.execute("SELECT count(*) FROM threads").fetchone() == (0,)


def test_leftovers_of_cut_short_index_saves_are_removed_at_open(tmp_path):
    path = tmp_path / "m.duckdb"
    with Memory(storage=DuckDBStorage(path), embedder=HashEmbedder(dim=16),
                options={"semantic_recall": True}) as memory:
        memory.save_messages([{"thread_id": "t", "resource_id": "r", "role": "user", "content": "hi"}])
        name = memory.index.name
    index_file = tmp_path / f"m.duckdb.{name}.hnsw"
    assert index_file.exists()
    leftovers = [tmp_path / f"m.duckdb.{name}.hnsw.{tag}" for tag in (
        "999999-1.part.tmp", "999999-2.part", "140234.part.tmp")]
    for leftover in leftovers:
        leftover.write_bytes(b"\0" * 1000)
    unrelated = tmp_path / "m.duckdb.notes.txt"
    unrelated.write_text("mine")
    with Memory(storage=DuckDBStorage(path), embedder=HashEmbedder(dim=16),
                options={"semantic_recall": True}) as memory:
        assert not any(p.exists() for p in leftovers)
        assert memory.recall("t", resource_id="r", vector_search_string="hi").total == 1
    assert unrelated.exists() and index_file.exists()


def test_a_clean_close_merges_the_write_ahead_log(tmp_path):
    path = tmp_path / "m.duckdb"
    wal = tmp_path / "m.duckdb.wal"
    killed = run("""
        import os, sys
        from threadrecall import Memory
        from threadrecall.storage import DuckDBStorage
        memory = Memory(storage=DuckDBStorage(sys.argv[1]))
        memory.save_messages([{"thread_id": "t", "resource_id": "r", "role": "user", "content": str(i)}
                              for i in range(2000)])
        os._exit(0)  # killed: no close
    """, str(path))
    assert killed.returncode == 0, killed.stderr
    assert wal.exists() and wal.stat().st_size > 0
    with Memory(storage=DuckDBStorage(path)) as memory:  # a session that only reads
        assert memory.recall("t", per_page=False).total == 2000
    assert not wal.exists() or wal.stat().st_size == 0
