"""HnswVectorStore through its public methods, against a numpy exact oracle."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from threadrecall.errors import (
    DimensionMismatchError,
    FilterTypeError,
    IndexNotFoundError,
    InvalidArgumentError,
    InvalidFilterError,
)
from threadrecall.storage.duckdb import Database
from threadrecall.types import IndexStats
from threadrecall.vector import HnswVectorStore, VectorStore


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(params=["duckdb", "postgres", "pgvector"])
def backend(request):
    """A store and the transaction of the database it keeps its rows in: HNSW over an in-memory
    DuckDB, HNSW over a PostgreSQL schema (the index a cache of the rows there), and PgVector."""
    if request.param == "duckdb":
        db = Database(":memory:")
        s = HnswVectorStore(db)
        yield s, db.transaction
        s.close()
        return
    from threadrecall.storage import PostgresStorage
    from threadrecall.vector import PgVector

    pg = PostgresStorage(request.getfixturevalue("pg_dsn"), schema=request.getfixturevalue("pg_schema"))
    s = HnswVectorStore(pg) if request.param == "postgres" else PgVector(pg)
    yield s, pg.transaction
    s.close()
    pg.close()


@pytest.fixture
def store(backend) -> HnswVectorStore:
    return backend[0]


def filled(store, n: int = 300, dim: int = 16, seed: int = 1):
    rng = np.random.default_rng(seed)
    data = unit(rng, n, dim)
    store.create_index("docs", dim)
    ids = [f"v{i}" for i in range(n)]
    meta = [
        {"thread_id": f"t{i % 6}", "resource_id": f"r{i % 2}", "n": i, "tag": ["x"]} for i in range(n)
    ]
    store.upsert("docs", data, ids=ids, metadata=meta)
    return data, ids, meta


def oracle(data, ids, meta, q, k, keep=lambda m: True):
    allowed = [i for i, m in enumerate(meta) if keep(m)]
    sims = data[allowed] @ q
    return [ids[allowed[j]] for j in np.argsort(-sims)[:k]]


def test_satisfies_the_protocol(store):
    assert isinstance(store, VectorStore)


def test_query_matches_the_exact_oracle_with_and_without_filters(store):
    data, ids, meta = filled(store)  # seed 1
    rng = np.random.default_rng(2)
    cases = [
        (None, lambda m: True),
        ({"thread_id": "t3"}, lambda m: m["thread_id"] == "t3"),
        (
            {"$and": [{"resource_id": "r1"}, {"n": {"$gte": 150}}]},
            lambda m: m["resource_id"] == "r1" and m["n"] >= 150,
        ),
        ({"n": {"$in": [1, 2, 3, 200]}}, lambda m: m["n"] in (1, 2, 3, 200)),
        ({"$or": [{"thread_id": "t0"}, {"n": {"$lt": 5}}]}, lambda m: m["thread_id"] == "t0" or m["n"] < 5),
    ]
    for q in unit(rng, 10, 16):
        for flt, keep in cases:
            got = store.query("docs", q, top_k=7, filter=flt)
            assert [r.id for r in got] == oracle(data, ids, meta, q, 7, keep)
            assert all(a.score >= b.score for a, b in zip(got, got[1:]))


def test_results_carry_the_stored_metadata_and_vector(store):
    data, ids, meta = filled(store, n=20)
    (hit,) = store.query("docs", data[4], top_k=1, include_vector=True)
    assert hit.id == "v4" and hit.metadata == meta[4]
    assert hit.score == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(hit.vector, data[4], rtol=1e-6)
    assert store.query("docs", data[4], top_k=1)[0].vector is None


def test_upsert_generates_ids_and_replaces_by_id(store):
    store.create_index("docs", 3)
    ids = store.upsert("docs", [[1, 0, 0], [0, 1, 0]])
    assert len(set(ids)) == 2 and all(len(i) == 36 for i in ids)
    store.upsert("docs", [[0, 0, 1]], ids=[ids[0]], metadata=[{"k": 1}])
    assert store.describe_index("docs") == IndexStats(dimension=3, metric="cosine", count=2)
    (hit,) = store.query("docs", [0, 0, 1], top_k=1)
    assert (hit.id, hit.metadata) == (ids[0], {"k": 1})
    assert store.upsert("docs", []) == []


def test_delete_by_ids_and_by_filter(store):
    data, ids, meta = filled(store, n=60)
    store.delete_vectors("docs", ids=["v0", "v1", "missing"])
    store.delete_vectors("docs", filter={"thread_id": "t2"})
    left = [i for i, m in zip(ids, meta) if i not in ("v0", "v1") and m["thread_id"] != "t2"]
    assert store.describe_index("docs").count == len(left)
    got = {r.id for r in store.query("docs", data[0], top_k=100)}
    assert got == set(left)


def test_index_management(store):
    store.create_index("b", 4, "euclidean")
    store.create_index("a", 4)
    store.create_index("a", 4)  # same dimension: no-op
    with pytest.raises(DimensionMismatchError):
        store.create_index("a", 5)
    assert store.list_indexes() == ["a", "b"]
    assert store.describe_index("b") == IndexStats(4, "euclidean", 0)
    store.upsert("b", [[0, 0, 0, 1]], ids=["x"])
    (hit,) = store.query("b", [0, 0, 3, 1], top_k=1)
    assert hit.score == pytest.approx(-3.0)
    store.delete_index("b")
    assert store.list_indexes() == ["a"]
    with pytest.raises(IndexNotFoundError):
        store.query("b", [0, 0, 0, 1])


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda s: s.query("nope", [1, 0, 0]), IndexNotFoundError),
        (lambda s: s.upsert("nope", [[1, 0, 0]]), IndexNotFoundError),
        (lambda s: s.describe_index("nope"), IndexNotFoundError),
        (lambda s: s.delete_index("nope"), IndexNotFoundError),
        (lambda s: s.query("docs", [1, 0]), DimensionMismatchError),
        (lambda s: s.upsert("docs", [[1, 0, 0, 0]]), DimensionMismatchError),
        (lambda s: s.query("docs", [1, 0, 0], filter=["a"]), FilterTypeError),
        (lambda s: s.query("docs", [1, 0, 0], filter=[]), FilterTypeError),
        (lambda s: s.query("docs", [1, 0, 0], filter={"n": {"$bogus": 1}}), InvalidFilterError),
        (lambda s: s.query("docs", [1, 0, 0], top_k=0), InvalidArgumentError),
        (lambda s: s.query("docs", [1, 0, 0], top_k=-3), InvalidArgumentError),
        (lambda s: s.query("docs", [1, 0, 0], top_k=True), InvalidArgumentError),
        (lambda s: s.query("docs", [1, float("nan"), 0]), InvalidArgumentError),
        (lambda s: s.upsert("docs", [[1, 0, 0]], ids=["a", "b"]), InvalidArgumentError),
        (lambda s: s.upsert("docs", [[1, 0, 0]], ids=[""]), InvalidArgumentError),
        (lambda s: s.upsert("docs", [[1, 0, 0]], metadata=["x"]), InvalidArgumentError),
        (lambda s: s.create_index("docs2", 0), InvalidArgumentError),
        (lambda s: s.create_index("docs2", 3, "manhattan"), InvalidArgumentError),
        (lambda s: s.create_index("bad name!", 3), InvalidArgumentError),
        (lambda s: s.delete_vectors("docs"), InvalidArgumentError),
    ],
)
def test_bad_input_raises_the_api_error(store, call, error):
    store.create_index("docs", 3)
    store.upsert("docs", [[1, 0, 0]], ids=["a"], metadata=[{"n": 1}])
    with pytest.raises(error):
        call(store)
    assert store.describe_index("docs").count == 1


def test_outer_transaction_rollback_leaves_index_and_table_untouched(backend):
    store, transaction = backend
    store.create_index("docs", 3)
    store.upsert("docs", [[1, 0, 0]], ids=["keep"])
    with pytest.raises(RuntimeError):
        with transaction():
            store.upsert("docs", [[0, 1, 0]], ids=["ghost"])
            store.delete_vectors("docs", ids=["keep"])
            raise RuntimeError("boom")
    assert [r.id for r in store.query("docs", [0, 1, 0], top_k=5)] == ["keep"]
    assert store.describe_index("docs").count == 1
    with transaction():
        store.upsert("docs", [[0, 1, 0]], ids=["real"])
        # The HNSW index follows commits; PgVector searches the transaction's own rows.
        seen = "keep" if isinstance(store, HnswVectorStore) else "real"
        assert [r.id for r in store.query("docs", [0, 1, 0], top_k=1)] == [seen]
    assert store.query("docs", [0, 1, 0], top_k=1)[0].id == "real"


def test_async_twins(store):
    async def run():
        await store.acreate_index("docs", 2)
        ids = await store.aupsert("docs", [[1, 0]], ids=["a"])
        hits = await store.aquery("docs", [1, 0], top_k=1)
        await store.adelete_vectors("docs", ids=ids)
        return hits, await store.adescribe_index("docs")

    hits, stats = asyncio.run(run())
    assert hits[0].id == "a" and stats.count == 0


def test_accepts_a_storage_object_with_a_database(tmp_path):
    class Storage:  # the shape of DuckDBStorage: its Database is `.db`
        def __init__(self, db: Database) -> None:
            self.db = db

    db = Database(tmp_path / "m.duckdb")
    store = HnswVectorStore(Storage(db))
    store.create_index("docs", 2)
    store.upsert("docs", [[1, 0]], ids=["a"])
    store.flush()
    assert store.index_path("docs") == tmp_path / "m.duckdb.docs.hnsw"
    assert store.index_path("docs").exists()
    with pytest.raises(InvalidArgumentError):
        HnswVectorStore(object())


def test_an_id_written_twice_in_one_transaction_or_after_a_rollback_is_replaced(backend):
    store, transaction = backend
    store.create_index("docs", 3)
    with transaction():
        store.upsert("docs", [[1, 0, 0]], ids=["a"], metadata=[{"v": 1}])
        store.upsert("docs", [[0, 1, 0]], ids=["a"], metadata=[{"v": 2}])
    (hit,) = store.query("docs", [0, 1, 0], top_k=5)
    assert (hit.id, hit.metadata) == ("a", {"v": 2})
    with pytest.raises(RuntimeError):
        with transaction():
            store.upsert("docs", [[0, 0, 1]], ids=["b"])
            raise RuntimeError("boom")
    store.upsert("docs", [[0, 0, 1]], ids=["b"], metadata=[{"v": 3}])
    store.upsert("docs", [[1, 0, 0]], ids=["a"], metadata=[{"v": 4}])
    assert {r.id: r.metadata["v"] for r in store.query("docs", [1, 1, 1], top_k=5)} == {"a": 4, "b": 3}
    assert store.describe_index("docs").count == 2


def test_each_thread_finds_its_own_write_on_its_next_search(store):
    import threading

    store.create_index("docs", 16)
    rng = np.random.default_rng(5)
    data = unit(rng, 400, 16)
    misses, errors = [], []

    def work(start):
        try:
            for i in range(start, 400, 4):
                store.upsert("docs", data[i : i + 1], ids=[f"v{i}"], metadata=[{"n": i}])
                if [h[0] for h in store.search_ids("docs", data[i], top_k=1)] != [f"v{i}"]:
                    misses.append(i)
        except Exception as exc:  # reported below, with the thread's other results
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and misses == []
    assert store.describe_index("docs").count == 400
