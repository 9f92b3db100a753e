"""recall() paths against the same queries in raw DuckDB SQL, on one store.

Run: ``pytest benches/bench_recall.py --benchmark-only [--bench-size 1m]``. The store has
``size`` messages over ``size/100`` threads in arrival order (so a thread's rows are scattered,
as in a live service), on a DuckDB file.
"""

from __future__ import annotations

import random

import pytest

from threadrecall import Memory
from threadrecall.cli import import_messages
from threadrecall.storage import DuckDBStorage

from conftest import conversation, cycle


@pytest.fixture(scope="module")
def store(bench_size, tmp_path_factory):
    path = tmp_path_factory.mktemp("recall") / "bench.duckdb"
    memory = Memory(storage=DuckDBStorage(path))
    import_messages(memory, conversation(bench_size), total=bench_size, batch=10_000)
    yield memory, max(1, bench_size // 100)
    memory.storage.close()


def _threads(count, n=1000, seed=1):
    rng = random.Random(seed)
    return [f"t{rng.randrange(count)}" for _ in range(n)]



LAST_20 = """SELECT id, thread_id, resource_id, role, type, content, metadata, created_at FROM messages
             WHERE thread_id = ? ORDER BY created_at DESC, seq DESC LIMIT 20"""
PAGE = """SELECT id, thread_id, resource_id, role, type, content, metadata, created_at FROM messages
          WHERE thread_id = ? ORDER BY created_at DESC, seq DESC LIMIT 50 OFFSET 50"""
BY_META = """SELECT id, thread_id, resource_id, role, type, content, metadata, created_at FROM messages
             WHERE thread_id = ? AND json_extract_string(metadata, '$.topic') = 'billing'
               AND json_type(metadata, '$.topic') = 'VARCHAR'
             ORDER BY created_at DESC, seq DESC LIMIT 20"""
WINDOW = """SELECT * FROM (SELECT id, thread_id, resource_id, role, type, content, metadata, created_at, seq
              FROM messages WHERE thread_id = (SELECT thread_id FROM messages WHERE id = $1)
                AND (created_at, seq) <= (SELECT (created_at, seq) FROM messages WHERE id = $1)
              ORDER BY created_at DESC, seq DESC LIMIT 3)
            UNION ALL
            SELECT * FROM (SELECT id, thread_id, resource_id, role, type, content, metadata, created_at, seq
              FROM messages WHERE thread_id = (SELECT thread_id FROM messages WHERE id = $1)
                AND (created_at, seq) > (SELECT (created_at, seq) FROM messages WHERE id = $1)
              ORDER BY created_at, seq LIMIT 2)"""


@pytest.mark.benchmark(group="last-20")
def test_last_20_threadrecall(benchmark, store):
    memory, threads = store
    nxt = cycle(_threads(threads))
    result = benchmark(lambda: memory.recall(nxt(), per_page=20))
    assert len(result.messages) == min(20, 100)


@pytest.mark.benchmark(group="last-20")
def test_last_20_duckdb_sql(benchmark, store):
    memory, threads = store
    nxt = cycle(_threads(threads))
    cur = memory.storage.db.cursor()
    rows = benchmark(lambda: cur.execute(LAST_20, [nxt()]).fetchall())
    assert len(rows) == 20


@pytest.mark.benchmark(group="page-50")
def test_page_threadrecall(benchmark, store):
    memory, threads = store
    nxt = cycle(_threads(threads))
    result = benchmark(lambda: memory.recall(nxt(), per_page=50, page=1))
    assert len(result.messages) == 50


@pytest.mark.benchmark(group="page-50")
def test_page_duckdb_sql(benchmark, store):
    memory, threads = store
    nxt = cycle(_threads(threads))
    cur = memory.storage.db.cursor()
    assert len(benchmark(lambda: cur.execute(PAGE, [nxt()]).fetchall())) == 50


@pytest.mark.benchmark(group="metadata-filter")
def test_metadata_filter_threadrecall(benchmark, store):
    memory, threads = store
    nxt = cycle(_threads(threads))
    flt = {"metadata": {"topic": "billing"}}
    result = benchmark(lambda: memory.recall(nxt(), per_page=20, filter=flt))
    assert all(m.metadata["topic"] == "billing" for m in result.messages)


@pytest.mark.benchmark(group="metadata-filter")
def test_metadata_filter_duckdb_sql(benchmark, store):
    memory, threads = store
    nxt = cycle(_threads(threads))
    cur = memory.storage.db.cursor()
    benchmark(lambda: cur.execute(BY_META, [nxt()]).fetchall())


def _include_sets(size, n=200, seed=3):
    rng = random.Random(seed)
    return [[f"m{rng.randrange(size)}" for _ in range(5)] for _ in range(n)]


@pytest.mark.benchmark(group="5-includes-pm2")
def test_includes_threadrecall(benchmark, store, bench_size):
    memory, threads = store
    nxt = cycle(_include_sets(bench_size))
    result = benchmark(lambda: memory.recall("t0", per_page=0, include=[
        {"id": i, "with_previous_messages": 2, "with_next_messages": 2} for i in nxt()]))
    assert 5 <= len(result.messages) <= 25


@pytest.mark.benchmark(group="5-includes-pm2")
def test_includes_duckdb_sql(benchmark, store, bench_size):
    memory, threads = store
    nxt = cycle(_include_sets(bench_size))
    cur = memory.storage.db.cursor()
    benchmark(lambda: [cur.execute(WINDOW, [i]).fetchall() for i in nxt()])
