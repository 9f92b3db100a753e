"""The vector rows of ``HnswVectorStore`` over PostgreSQL: what a bulk write stores is what a
cache rebuilt from the rows in another process holds, vector for vector and id for id."""

from __future__ import annotations

import threading

import numpy as np
import psycopg
from psycopg import sql

from threadrecall.storage import PostgresStorage
from threadrecall.vector import HnswVectorStore
from threadrecall.vector.linker import Linker


def stored(dsn: str, schema: str) -> dict[str, tuple[bytes, str]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(sql.SQL("SELECT id, vector, metadata FROM {}.hnsw_rows").format(
            sql.Identifier(schema))).fetchall()
    return {r[0]: (bytes(r[1]), r[2]) for r in rows}


def test_a_bulk_write_stores_each_vector_under_its_own_id(pg_dsn, pg_schema):
    rng = np.random.default_rng(7)
    ids = [f"m{i}" + "é" * (i % 5) + "#0" * (i % 3) for i in range(1500)]  # ids of varied lengths
    vectors = rng.standard_normal((len(ids), 24)).astype(np.float32)
    metadata = [{"thread_id": f"t{i % 7}", "n": i, "note": "ü" * (i % 4)} for i in range(len(ids))]
    writer_storage = PostgresStorage(pg_dsn, schema=pg_schema)
    writer = HnswVectorStore(writer_storage)
    writer.create_index("docs", 24, metric="euclidean")
    writer.upsert("docs", vectors, ids=ids, metadata=metadata)
    replaced = list(range(0, len(ids), 3))  # a second bulk write replaces every third row
    again = rng.standard_normal((len(replaced), 24)).astype(np.float32)
    writer.upsert("docs", again, ids=[ids[k] for k in replaced], metadata=[{"thread_id": "moved"}] * len(replaced))
    expected = vectors.copy()
    expected[replaced] = again

    rows = stored(pg_dsn, pg_schema)
    assert len(rows) == len(ids)
    for k, i in enumerate(ids):
        vector, text = rows[i]
        assert np.frombuffer(vector, dtype="<f4").tobytes() == expected[k].astype("<f4").tobytes()
        assert ('"moved"' in text) == (k % 3 == 0)
    assert dict(writer.rows.texts("docs")) == {i: text for i, (_, text) in rows.items()}

    reader_storage = PostgresStorage(pg_dsn, schema=pg_schema)  # another process's cache: rebuilt from the rows
    reader = HnswVectorStore(reader_storage)
    for k in (0, 1, 2, 700, 1499):
        (hit,) = reader.query("docs", expected[k], top_k=1, include_vector=True)
        assert hit.id == ids[k] and hit.score == 0.0
        assert np.array_equal(hit.vector, expected[k])
        assert hit.metadata == ({"thread_id": "moved"} if k % 3 == 0 else metadata[k])
    hits = reader.search_ids("docs", expected[4], top_k=3, filter={"thread_id": "t4"})
    assert hits[0] == (ids[4], 0.0)
    writer.delete_vectors("docs", ids=[ids[1], ids[2]])
    assert set(stored(pg_dsn, pg_schema)).isdisjoint({ids[1], ids[2]})
    assert reader.query("docs", expected[1], top_k=1)[0].id != ids[1]  # the delete reaches the cache
    reader.close()
    writer.close()
    reader_storage.close()
    writer_storage.close()


def written(dsn: str, schema: str, n: int, seed: int) -> np.ndarray:
    """``n`` unit vectors of 16 dimensions written by a store of their own, ids ``v<i>``,
    thread ``t<i % 10>``."""
    x = np.random.default_rng(seed).standard_normal((n, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    storage = PostgresStorage(dsn, schema=schema)
    with HnswVectorStore(storage) as writer:
        writer.create_index("docs", 16)
        writer.upsert("docs", x, ids=[f"v{i}" for i in range(n)], metadata=[{"thread_id": f"t{i % 10}"} for i in range(n)])
    storage.close()
    return x


def test_a_rebuilt_cache_answers_before_its_backlog_is_linked(pg_dsn, pg_schema, monkeypatch):
    vectors = written(pg_dsn, pg_schema, 3000, seed=51)  # seed 51
    handed = []
    monkeypatch.setattr(Linker, "link_backlog", lambda self, index, threads: handed.append(index.pending))
    storage = PostgresStorage(pg_dsn, schema=pg_schema)
    with HnswVectorStore(storage) as reader:
        for k in (0, 7, 2999):
            hits = reader.search_ids("docs", vectors[k], top_k=10, filter={"thread_id": f"t{k % 10}"})
            scope = np.arange(k % 10, 3000, 10)
            best = scope[np.argsort(-(vectors[scope] @ vectors[k]))[:10]]
            assert [h[0] for h in hits] == [f"v{i}" for i in best]  # exact over the waiting vectors
        assert handed == [3000]  # handed to the background whole, not linked by the search
    storage.close()


def test_a_rebuilt_cache_is_linked_in_the_background(pg_dsn, pg_schema):
    vectors = written(pg_dsn, pg_schema, 3000, seed=52)  # seed 52
    storage = PostgresStorage(pg_dsn, schema=pg_schema)
    with HnswVectorStore(storage) as reader:
        assert reader.search_ids("docs", vectors[5], top_k=1)[0][0] == "v5"
        index = reader._loaded["docs"].index  # noqa: SLF001
        for _ in range(6000):  # wait for the linking thread, not on the clock
            if index.pending == 0:
                break
            threading.Event().wait(0.01)
        assert index.pending == 0
        found = sum(reader.search_ids("docs", vectors[k], top_k=1)[0][0] == f"v{k}" for k in range(0, 3000, 30))
        assert found == 100
    storage.close()


def test_closing_a_store_stops_its_background_linking_and_a_reopen_links_the_rest(pg_dsn, pg_schema):
    vectors = written(pg_dsn, pg_schema, 20_000, seed=53)  # seed 53
    storage = PostgresStorage(pg_dsn, schema=pg_schema)
    reader = HnswVectorStore(storage)
    assert reader.search_ids("docs", vectors[5], top_k=1)[0][0] == "v5"  # the rebuild hands its backlog over
    index = reader._loaded["docs"].index  # noqa: SLF001
    reader.close()
    # close() returned after the batch in hand: no linking thread is left, and the vectors it
    # had not reached still wait.
    assert not [t for t in threading.enumerate() if t.name == "threadrecall-bulk-linker"]
    left = index.pending
    assert left > 0
    threading.Event().wait(0.2)
    assert index.pending == left  # nothing links it any more
    with HnswVectorStore(storage) as again:
        found = sum(again.search_ids("docs", vectors[k], top_k=1)[0][0] == f"v{k}" for k in range(0, 20_000, 200))
        assert found == 100
    storage.close()
