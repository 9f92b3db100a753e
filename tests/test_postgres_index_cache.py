"""``HnswVectorStore(pg, cache_dir=...)``: index files in a local folder, one set per process
at a time, loaded and caught up by the next process instead of a rebuild from the rows, and
never trusted beyond what the database says."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from threadrecall import _core
from threadrecall.errors import ConfigurationError
from threadrecall.storage import PostgresStorage
from threadrecall.vector import HnswVectorStore, hnsw, rows_postgres

DIM = 16


def unit(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def ids(n: int, start: int = 0) -> list[str]:
    return [f"v{i}" for i in range(start, start + n)]


def meta(n: int, start: int = 0) -> list[dict]:
    return [{"thread_id": f"t{i % 10}", "n": i} for i in range(start, start + n)]


@pytest.fixture
def open_store(pg_dsn, pg_schema):
    """Opens stores on the test's schema, each over a storage of its own (as another process
    would), and closes what is left open at the end."""
    opened = []

    def open_(**settings) -> HnswVectorStore:
        storage = PostgresStorage(pg_dsn, schema=pg_schema)
        store = HnswVectorStore(storage, **settings)
        opened.append((store, storage))
        return store

    yield open_
    for store, storage in opened:
        if store._opens > 0:  # not closed by the test itself
            store.close()
        storage.close()


@pytest.fixture
def rebuilds(monkeypatch):
    """Counts the index builds from every row of the database (the cost the cache saves)."""
    counted = []
    snapshot = rows_postgres.PostgresRows._snapshot

    def counting(self, name, dim):
        counted.append(name)
        return snapshot(self, name, dim)

    monkeypatch.setattr(rows_postgres.PostgresRows, "_snapshot", counting)
    return counted


def top(store: HnswVectorStore, q: np.ndarray, **kw) -> list[tuple[str, float]]:
    return store.search_ids("docs", q, top_k=5, **kw)


def test_a_new_process_loads_the_saved_index_and_catches_up_with_later_writes(open_store, tmp_path, rebuilds):
    x = unit(3000, seed=1)
    first = open_store(cache_dir=tmp_path)
    first.create_index("docs", DIM)
    first.upsert("docs", x, ids=ids(3000), metadata=meta(3000))
    first.search_ids("docs", x[0], top_k=1)  # a process's index is built when it first searches
    first.link("docs")
    first.close()  # saves its set of files
    (path,) = tmp_path.glob("*.docs.hnsw")
    assert rebuilds == ["docs"]
    rebuilds.clear()

    writer = open_store()  # another process, no cache: writes after the save
    y = unit(50, seed=2)
    writer.upsert("docs", y, ids=ids(50, start=3000), metadata=meta(50, start=3000))
    writer.delete_vectors("docs", ids=["v7", "v8"])
    writer.upsert("docs", x[9:10], ids=["v9"], metadata=[{"thread_id": "moved"}])

    second = open_store(cache_dir=tmp_path)
    assert second.index_path("docs") == path  # the set the first process left, now free
    assert top(second, y[3])[0] == ("v3003", pytest.approx(1.0, abs=1e-6))
    assert [h[0] for h in top(second, x[7])][0] != "v7"
    assert top(second, x[9], filter={"thread_id": "moved"}) == [("v9", pytest.approx(1.0, abs=1e-6))]
    assert second.describe_index("docs").count == 3048
    assert rebuilds == []  # loaded and caught up: no row read but the changes
    assert second._current("docs").index.pending < 1000  # the graph came linked from the file

    reference = open_store()  # rebuilt from the rows: the same answers
    for q in unit(20, seed=3):
        assert [h[0] for h in top(second, q, filter={"thread_id": "t3"})] == \
               [h[0] for h in top(reference, q, filter={"thread_id": "t3"})]
    assert rebuilds == ["docs"]


def test_processes_at_once_each_hold_a_set_of_their_own(open_store, tmp_path):
    x = unit(1200, seed=4)
    a = open_store(cache_dir=tmp_path)
    a.create_index("docs", DIM)
    a.upsert("docs", x[:600], ids=ids(600), metadata=meta(600))
    a.search_ids("docs", x[0], top_k=1)
    b = open_store(cache_dir=tmp_path)
    assert b.search_ids("docs", x[5], top_k=1)[0][0] == "v5"
    b.upsert("docs", x[600:], ids=ids(600, start=600), metadata=meta(600, start=600))
    for store in (a, b):  # each catches up with b's write at its next search
        assert store.search_ids("docs", x[700], top_k=1)[0][0] == "v700"
    a.flush()
    b.flush()
    assert a.index_path("docs") != b.index_path("docs")
    for store in (a, b):  # each file holds what its process held
        index, generation, _ = _core.VectorIndex.load(str(store.index_path("docs")))
        assert len(index) == 1200
        assert generation == store._current("docs").generation


def test_a_file_of_an_index_deleted_and_created_again_is_rebuilt(open_store, tmp_path, rebuilds):
    x = unit(300, seed=5)
    first = open_store(cache_dir=tmp_path)
    first.create_index("docs", DIM)
    first.upsert("docs", x, ids=ids(300), metadata=meta(300))
    first.search_ids("docs", x[0], top_k=1)
    first.close()
    other = open_store()
    other.delete_index("docs")
    other.create_index("docs", DIM)
    other.upsert("docs", x[:10], ids=ids(10, start=500), metadata=meta(10))

    rebuilds.clear()
    second = open_store(cache_dir=tmp_path)
    assert second.describe_index("docs").count == 10
    assert top(second, x[3])[0] == ("v503", pytest.approx(1.0, abs=1e-6))
    assert {h[0] for h in second.search_ids("docs", x[100], top_k=20)} == set(ids(10, start=500))
    assert rebuilds == ["docs"]


def test_a_file_whose_changes_are_pruned_is_rebuilt(open_store, tmp_path, rebuilds, monkeypatch):
    monkeypatch.setattr(rows_postgres, "PRUNE_EVERY", 4)
    monkeypatch.setattr(rows_postgres, "PRUNE_KEEP", 6)
    x = unit(40, seed=6)
    first = open_store(cache_dir=tmp_path)
    first.create_index("docs", DIM)
    first.upsert("docs", x[:20], ids=ids(20), metadata=meta(20))
    first.search_ids("docs", x[0], top_k=1)
    first.close()
    writer = open_store()
    for i in range(20, 40):  # twenty generations: the file's changes are pruned
        writer.upsert("docs", x[i:i + 1], ids=[f"v{i}"], metadata=[{"thread_id": "late"}])
    writer.delete_vectors("docs", ids=["v0"])

    rebuilds.clear()
    second = open_store(cache_dir=tmp_path)
    assert second.describe_index("docs").count == 39
    assert top(second, x[0])[0][0] != "v0"
    assert {h[0] for h in second.search_ids("docs", x[25], top_k=20, filter={"thread_id": "late"})} == \
        {f"v{i}" for i in range(20, 40)}
    assert rebuilds == ["docs"]


def test_a_backlog_read_from_the_database_is_saved_once_linked(open_store, tmp_path, monkeypatch):
    monkeypatch.setattr(hnsw, "SAVE_AFTER_CHANGES", 2000)  # so that 3,000 vectors are due
    x = unit(3000, seed=7)
    writer = open_store()
    writer.create_index("docs", DIM)
    writer.upsert("docs", x, ids=ids(3000), metadata=meta(3000))

    reader = open_store(cache_dir=tmp_path)
    reader.search_ids("docs", x[0], top_k=1)  # rebuilt: answers at once, its backlog waiting
    path = reader.index_path("docs")
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the background linker saves once it is idle
        if path.exists():
            index, _, _ = _core.VectorIndex.load(str(path))
            seen.append(index.pending)
            if index.pending == 0:
                break
        time.sleep(0.05)
    assert seen and seen[-1] == 0 and len(index) == 3000
    assert max(seen) < hnsw.BULK_LINK_FROM  # never written while the backlog waited


def test_cache_dir_is_refused_over_duckdb_and_the_database_it_opened_is_closed(tmp_path):
    path = tmp_path / "m.duckdb"
    with pytest.raises(ConfigurationError, match="cache_dir is for a store over PostgreSQL"):
        HnswVectorStore(str(path), cache_dir=tmp_path / "cache")
    opened = subprocess.run(  # another process may open the file: the refused store let it go
        [sys.executable, "-c", f"from threadrecall.storage import DuckDBStorage; DuckDBStorage({str(path)!r}).close()"],
        capture_output=True, text=True)
    assert opened.returncode == 0, opened.stderr
