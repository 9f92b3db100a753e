"""PgVector on a real PostgreSQL: transactions shared with PostgresStorage, metrics, plans, and
semantic recall through Memory end to end."""

from __future__ import annotations

import json
from datetime import timedelta

import numpy as np
import pytest
from conftest import T0
from threadrecall import Memory
from threadrecall.embedders import HashEmbedder
from threadrecall.errors import IndexNotFoundError, InvalidArgumentError

psycopg = pytest.importorskip("psycopg")

from threadrecall.storage import PostgresStorage
from threadrecall.vector import PgVector


@pytest.fixture
def pg(pg_dsn, pg_schema):
    storage = PostgresStorage(pg_dsn, schema=pg_schema)
    yield storage
    storage.close()


@pytest.fixture
def store(pg):
    return PgVector(pg)


def test_writes_join_the_storage_transaction(pg, store):
    store.create_index("docs", 3)
    store.upsert("docs", [[1, 0, 0]], ids=["keep"])
    with pytest.raises(RuntimeError), pg.transaction():
        store.upsert("docs", [[0, 1, 0]], ids=["ghost"])
        store.delete_vectors("docs", ids=["keep"])
        assert [r.id for r in store.query("docs", [0, 1, 0], top_k=5)] == ["ghost"]  # sees its writes
        raise RuntimeError("boom")
    assert [r.id for r in store.query("docs", [0, 1, 0], top_k=5)] == ["keep"]
    with pg.transaction():
        store.upsert("docs", [[0, 1, 0]], ids=["real"])
    assert store.query("docs", [0, 1, 0], top_k=1)[0].id == "real"


def test_an_index_created_inside_a_rolled_back_transaction_stays(pg, store):
    with pytest.raises(RuntimeError), pg.transaction():
        store.create_index("kept", 2)
        store.upsert("kept", [[1, 0]], ids=["a"])
        raise RuntimeError("boom")
    assert store.list_indexes() == ["kept"] and store.describe_index("kept").count == 0
    with pytest.raises(IndexNotFoundError):
        store.query("never", [1, 0])


def test_a_connection_string_and_another_process_dropping_an_index(pg_dsn, pg_schema):
    with PgVector(pg_dsn, schema=pg_schema) as first, PgVector(pg_dsn, schema=pg_schema) as second:
        first.create_index("docs", 2, "dotproduct")
        first.upsert("docs", [[1, 2]], ids=["a"], metadata=[{"k": 1}])
        assert [(r.id, r.score) for r in second.query("docs", [1, 1])] == [("a", pytest.approx(3.0))]
        second.delete_index("docs")
        with pytest.raises(IndexNotFoundError):
            first.query("docs", [1, 1])  # its cached table is gone
        first.create_index("docs", 3)
        assert first.describe_index("docs").dimension == 3


def test_scores_follow_each_metric_as_the_hnsw_store_defines_them(store):
    rng = np.random.default_rng(7)
    data = rng.standard_normal((50, 8)).astype(np.float32)
    q = rng.standard_normal(8).astype(np.float32)
    ids = [f"v{i}" for i in range(50)]
    expected = {
        "cosine": data @ q / np.linalg.norm(data, axis=1) / np.linalg.norm(q),
        "dotproduct": data @ q,
        "euclidean": -np.linalg.norm(data - q, axis=1),
    }
    for metric, scores in expected.items():
        store.create_index(metric, 8, metric)
        store.upsert(metric, data, ids=ids)
        got = store.query(metric, q, top_k=5)
        order = np.argsort(-scores)[:5]
        assert [r.id for r in got] == [ids[i] for i in order]
        np.testing.assert_allclose([r.score for r in got], scores[order], rtol=1e-4, atol=1e-5)


def test_a_zero_vector_scores_zero_under_cosine(store):
    store.create_index("docs", 2)
    store.upsert("docs", [[0, 0], [1, 0]], ids=["zero", "x"])
    assert {r.id: round(r.score, 6) for r in store.query("docs", [0, 1], top_k=5)} == {"zero": 0.0, "x": 0.0}


def test_metadata_jsonb_cannot_hold_writes_nothing(store):
    store.create_index("docs", 2)
    with pytest.raises(InvalidArgumentError, match="JSONB"):
        store.upsert("docs", [[1, 0], [0, 1]], ids=["a", "b"], metadata=[{"x": 1}, {"x": float("nan")}])
    assert store.describe_index("docs").count == 0


def test_scoped_searches_are_exact_and_use_the_scope_index(pg, store):
    rng = np.random.default_rng(3)
    n, dim = 6000, 32
    data = rng.standard_normal((n, dim)).astype(np.float32)
    meta = [{"thread_id": f"t{i % 300}", "resource_id": f"r{i % 30}"} for i in range(n)]
    store.create_index("docs", dim)
    store.upsert("docs", data, ids=[f"v{i}" for i in range(n)], metadata=meta)
    unit = data / np.linalg.norm(data, axis=1, keepdims=True)
    with store._pooled() as conn:  # statistics, and the visibility map an index-only scan reads
        conn.execute(psycopg.sql.SQL("VACUUM ANALYZE {}").format(store._info("docs").table))
    q = rng.standard_normal(dim).astype(np.float32)
    statement, params = store.search_sql("docs", q, top_k=10, filter={"thread_id": "t7"})
    with pg.transaction() as conn:
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + statement, params, prepare=False))
    assert "Seq Scan" not in plan and "thread_id" in plan, plan
    got = [r.id for r in store.query("docs", q, top_k=10, filter={"thread_id": "t7"})]
    members = [i for i in range(n) if meta[i]["thread_id"] == "t7"]
    exact = [f"v{members[j]}" for j in np.argsort(-(unit[members] @ (q / np.linalg.norm(q))))[:10]]
    assert got == exact
    # A resource's search can read the index on resource_key that includes the vectors, which
    # holds all it needs, as an index-only scan (whether the planner takes one, or the heap
    # through the plain btree, depends on how much of the heap VACUUM has marked all-visible,
    # which any open snapshot can delay: the plain btree is dropped here, and rolled back).
    statement, params = store.search_sql("docs", q, top_k=10, filter={"resource_id": "r1"})
    table = store._info("docs").table.as_string().split(".")[1].strip('"')
    with store._pooled() as conn, conn.transaction():
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + statement, params, prepare=False))
        assert "Index Cond: (resource_key = 'r1'::text)" in plan, plan
        conn.execute(f'DROP INDEX "{pg.schema}"."{table}_resource_key_idx"')
        conn.execute("SET LOCAL enable_bitmapscan = off")
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + statement, params, prepare=False))
        raise psycopg.Rollback()
    assert "Index Only Scan using" in plan and "resource_key_id_embedding_idx" in plan, plan
    # its scope is counted on the plain btree, whose tuples hold no vectors
    with pg.transaction() as conn:
        conn.execute("SET LOCAL enable_bitmapscan = off")
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = conn.execute("EXPLAIN (FORMAT JSON) " + statement, params, prepare=False).fetchone()[0]
    (size,) = [p for p in plan[0]["Plan"]["Plans"] if p.get("Subplan Name") == "CTE size"]
    assert f'"Index Name": "{table}_resource_key_idx"' in json.dumps(size), size
    members = [i for i in range(n) if meta[i]["resource_id"] == "r1"]
    exact = [f"v{members[j]}" for j in np.argsort(-(unit[members] @ (q / np.linalg.norm(q))))[:10]]
    assert [r.id for r in store.query("docs", q, top_k=10, filter={"resource_id": "r1"})] == exact


def test_an_id_and_resource_too_long_for_the_resource_index_write_nothing(store):
    store.create_index("docs", 384)
    vectors = np.ones((2, 384), np.float32)
    long = "r" * 1200
    with pytest.raises(InvalidArgumentError, match="room for"):
        store.upsert("docs", vectors, ids=["a", "b" * 200], metadata=[{}, {"resource_id": long}])
    assert store.describe_index("docs").count == 0
    store.upsert("docs", vectors, ids=["a", "b"], metadata=[{}, {"resource_id": long[:900]}])
    assert store.query("docs", vectors[0], top_k=1, filter={"resource_id": long[:900]})[0].id == "b"


def test_tables_of_the_first_schema_are_migrated(pg_dsn, pg_schema):
    """An index table made before resource_key existed gets the column and its index."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
        conn.execute(f'CREATE TABLE "{pg_schema}".schema_version (component TEXT PRIMARY KEY, version INTEGER NOT NULL)')
        conn.execute(f"INSERT INTO \"{pg_schema}\".schema_version VALUES ('pgvector', 1)")
        conn.execute(f'CREATE TABLE "{pg_schema}".pgvector_indexes (name TEXT PRIMARY KEY, dimension INTEGER NOT NULL, '
                     "metric TEXT NOT NULL, n SERIAL UNIQUE)")
        conn.execute(f"INSERT INTO \"{pg_schema}\".pgvector_indexes (name, dimension, metric) VALUES ('docs', 2, 'cosine')")
        conn.execute(f'CREATE TABLE "{pg_schema}".pgvector_1 (id TEXT PRIMARY KEY, embedding vector(2) NOT NULL, '
                     "metadata JSONB NOT NULL)")
        conn.execute(f"INSERT INTO \"{pg_schema}\".pgvector_1 VALUES ('a', '[1,0]', '{{\"resource_id\": \"r1\"}}'), "
                     "('b', '[0,1]', '{\"resource_id\": 2}')")
    with PgVector(pg_dsn, schema=pg_schema) as store:
        assert [r.id for r in store.query("docs", [0, 1], filter={"resource_id": "r1"})] == ["a"]
        assert [r.id for r in store.query("docs", [1, 0], filter={"resource_id": 2})] == ["b"]
        with store._pooled() as conn:
            definitions = sorted(r[0].split(" USING btree ")[1] for r in conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexdef LIKE '%%(resource_key)%%'",
                [pg_schema]))
    assert definitions == ["(resource_key)", "(resource_key) INCLUDE (id, embedding)"]


# ---- semantic recall through Memory (the shared semantic suite runs on PgVector too; these
# are what it does not cover: a deleted thread's vectors, one transaction for both) ----

WEATHER = [
    ("user", "What is the weather like in Paris today?"),
    ("assistant", "Paris weather today is sunny and warm with a light breeze."),
    ("user", "Can you recommend a good pasta recipe?"),
    ("assistant", "Try spaghetti carbonara with eggs, pecorino and guanciale."),
    ("user", "How do I change a flat bicycle tyre?"),
    ("assistant", "Remove the wheel, lever the tyre off and patch the inner tube."),
]


def memory_on(pg, **options):
    config = {"last_messages": 0, "semantic_recall": {"top_k": 1, "message_range": 1, **options}}
    return Memory(storage=pg, vector=PgVector(pg), embedder=HashEmbedder(dim=64), options=config)


def save(memory, thread_id, rows, *, resource_id="r1"):
    if memory.get_thread_by_id(thread_id) is None:
        memory.create_thread(resource_id, thread_id=thread_id)
    return memory.save_messages([
        {"id": f"{thread_id}-{i}", "thread_id": thread_id, "role": role, "content": text,
         "created_at": T0 + timedelta(minutes=i)}
        for i, (role, text) in enumerate(rows)])


def test_deleted_and_updated_messages_follow_in_the_vectors(pg):
    memory = memory_on(pg, scope="thread", message_range=0)
    save(memory, "t1", WEATHER)
    memory.delete_messages(["t1-1"])
    assert "t1-1" not in [m.id for m in memory.recall("t1", vector_search_string=WEATHER[1][1]).messages]
    memory.update_messages([{"id": "t1-4", "content": "Paris weather today is sunny and warm with a light breeze."}])
    assert [m.id for m in memory.recall("t1", vector_search_string=WEATHER[1][1]).messages] == ["t1-4"]
    memory.delete_thread("t1")
    assert memory.vector.describe_index(memory.index.name).count == 0


def test_messages_and_vectors_commit_together(pg):
    memory = memory_on(pg, scope="thread", message_range=0)
    memory.create_thread("r1", thread_id="t1")
    with pytest.raises(RuntimeError), memory.transaction():
        save(memory, "t1", WEATHER)
        raise RuntimeError("boom")
    assert memory.vector.describe_index(memory.index.name).count == 0
    save(memory, "t1", WEATHER)
    assert memory.vector.describe_index(memory.index.name).count == len(WEATHER)


def test_a_large_scope_takes_the_graph_branch_and_finds_the_exact_top(monkeypatch, store):
    from threadrecall.vector import pgvector

    monkeypatch.setattr(pgvector, "EXACT_SCOPE", 10)  # every scope here is "large"
    rng = np.random.default_rng(5)
    data = rng.standard_normal((400, 16)).astype(np.float32)
    meta = [{"thread_id": f"t{i % 4}", "n": i} for i in range(400)]
    store.create_index("docs", 16)
    store.upsert("docs", data, ids=[f"v{i}" for i in range(400)], metadata=meta)
    statement, _ = store.search_sql("docs", data[0], top_k=5, filter={"thread_id": "t1"})
    assert "UNION ALL" in statement  # the exact branch and the graph branch, gated by the count
    unit = data / np.linalg.norm(data, axis=1, keepdims=True)
    for q in rng.standard_normal((5, 16)).astype(np.float32):
        members = [i for i in range(400) if meta[i]["thread_id"] == "t1" and meta[i]["n"] >= 100]
        order = np.argsort(-(unit[members] @ (q / np.linalg.norm(q))))[:5]
        flt = {"$and": [{"thread_id": "t1"}, {"n": {"$gte": 100}}]}
        assert [r.id for r in store.query("docs", q, top_k=5, filter=flt)] == [f"v{members[j]}" for j in order]
    # a resource's scope, counted on its own btree, takes the graph branch too
    meta = [{"resource_id": f"r{i % 3}"} for i in range(400)]
    store.upsert("docs", data, ids=[f"v{i}" for i in range(400)], metadata=meta)
    for q in rng.standard_normal((5, 16)).astype(np.float32):
        members = [i for i in range(400) if i % 3 == 2]
        order = np.argsort(-(unit[members] @ (q / np.linalg.norm(q))))[:5]
        found = store.search_ids("docs", q, top_k=5, filter={"resource_id": "r2"})
        assert [i for i, _ in found] == [f"v{members[j]}" for j in order]


def test_a_resource_counted_small_is_then_scanned_without_being_counted(monkeypatch, store):
    from threadrecall.vector import pgvector

    rng = np.random.default_rng(8)
    data = rng.standard_normal((300, 16)).astype(np.float32)
    unit = data / np.linalg.norm(data, axis=1, keepdims=True)
    store.create_index("docs", 16)
    store.upsert("docs", data, ids=[f"v{i}" for i in range(300)],
                 metadata=[{"resource_id": f"r{i % 3}"} for i in range(300)])
    members = [i for i in range(300) if i % 3 == 1]

    def exact(q):
        return [f"v{members[j]}" for j in np.argsort(-(unit[members] @ (q / np.linalg.norm(q))))[:5]]

    def search(q):
        return [i for i, _ in store.search_ids("docs", q, top_k=5, filter={"resource_id": "r1"})]

    def statement(q):
        return store.search_sql("docs", q, top_k=5, filter={"resource_id": "r1"})[0]

    queries = rng.standard_normal((4, 16)).astype(np.float32)
    assert "count(*)" in statement(queries[0])  # not counted yet
    assert search(queries[0]) == exact(queries[0])
    assert "count(*)" not in statement(queries[0]) and "UNION" not in statement(queries[0])
    assert all(search(q) == exact(q) for q in queries)
    # the resource grows past the threshold meanwhile: still scanned exactly, the same answer
    monkeypatch.setattr(pgvector, "EXACT_SCOPE", 10)
    assert "UNION" not in statement(queries[1]) and search(queries[1]) == exact(queries[1])
    # once the count expires it is counted again; a count at or over the threshold is not remembered
    later = pgvector._now() + pgvector.SMALL_SCOPE_SECONDS + 1
    monkeypatch.setattr(pgvector, "_now", lambda: later)
    assert "UNION" in statement(queries[2]) and search(queries[2]) == exact(queries[2])
    assert "UNION" in statement(queries[3]), "a large count is not remembered"
