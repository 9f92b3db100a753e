"""The vector rows of ``HnswVectorStore`` over PostgreSQL: what a bulk write stores is what a
cache rebuilt from the rows in another process holds, vector for vector and id for id."""

from __future__ import annotations

import numpy as np
import psycopg
from psycopg import sql

from threadrecall.storage import PostgresStorage
from threadrecall.vector import HnswVectorStore


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
