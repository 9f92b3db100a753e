"""The index file is a cache: reopen, catch-up, rebuild, and crashes lose nothing acknowledged."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from conftest import kill_after_acks
from threadrecall import _core
from threadrecall.storage.duckdb import Database
from threadrecall.vector import HnswVectorStore
from threadrecall.vector.rows_duckdb import MIGRATIONS

DIM = 8


def unit(seed: int, n: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def answers(store: HnswVectorStore, queries: np.ndarray) -> list:
    out = []
    for q in queries:
        out.append([(r.id, round(r.score, 5)) for r in store.query("docs", q, top_k=5)])
        out.append([r.id for r in store.query("docs", q, top_k=5, filter={"thread_id": "t1"})])
    return out


def build(path, n=500, seed=3) -> tuple[list, np.ndarray]:
    queries = unit(seed + 100, 8)
    with HnswVectorStore(path) as store:
        store.create_index("docs", DIM)
        data = unit(seed, n)
        for start in range(0, n, 100):
            store.upsert(
                "docs",
                data[start : start + 100],
                ids=[f"v{i}" for i in range(start, start + 100)],
                metadata=[{"thread_id": f"t{i % 3}"} for i in range(start, start + 100)],
            )
        store.delete_vectors("docs", ids=["v7", "v8"])
        before = answers(store, queries)
    return before, queries


def test_reopen_loads_the_saved_file(tmp_path):
    db = tmp_path / "m.duckdb"
    before, queries = build(db)
    assert (tmp_path / "m.duckdb.docs.hnsw").exists()
    with HnswVectorStore(db) as store:
        assert answers(store, queries) == before


def test_deleted_file_is_rebuilt_with_identical_results(tmp_path):
    db = tmp_path / "m.duckdb"
    before, queries = build(db)
    (tmp_path / "m.duckdb.docs.hnsw").unlink()
    with HnswVectorStore(db) as store:
        assert answers(store, queries) == before
    assert (tmp_path / "m.duckdb.docs.hnsw").exists()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_file_is_rebuilt(tmp_path, damage):
    db = tmp_path / "m.duckdb"
    before, queries = build(db)
    f = tmp_path / "m.duckdb.docs.hnsw"
    raw = f.read_bytes()
    f.write_bytes({"truncate": raw[: len(raw) // 3], "garbage": b"\x00junk" * 50, "empty": b""}[damage])
    with HnswVectorStore(db) as store:
        assert answers(store, queries) == before


def test_lagging_file_is_caught_up(tmp_path):
    db = tmp_path / "m.duckdb"
    build(db)
    stale = (tmp_path / "m.duckdb.docs.hnsw").read_bytes()
    extra = unit(9, 5)
    with HnswVectorStore(db) as store:
        store.upsert("docs", extra, ids=[f"new{i}" for i in range(5)], metadata=[{"thread_id": "t1"}] * 5)
        store.delete_vectors("docs", ids=["v10"])
        store.delete_vectors("docs", filter={"thread_id": "t2"})
        want = answers(store, unit(103, 8))
        (tmp_path / "m.duckdb.docs.hnsw").write_bytes(stale)  # as if the last save never ran
        store._loaded.clear()  # noqa: SLF001 - simulate a fresh process without closing
    with HnswVectorStore(db) as store:
        assert answers(store, unit(103, 8)) == want
        assert store.query("docs", extra[2], top_k=1)[0].id == "new2"


def fill(path, prefix: str, seed: int) -> list:
    """One index of 300 vectors written in three upserts (generation 3), and its answers."""
    with HnswVectorStore(path) as store:
        store.create_index("docs", DIM)
        data = unit(seed, 300)
        for start in range(0, 300, 100):
            store.upsert("docs", data[start:start + 100], ids=[f"{prefix}{i}" for i in range(start, start + 100)],
                         metadata=[{"thread_id": f"t{i % 3}"} for i in range(start, start + 100)])
        assert store.describe_index("docs").count == 300
        return answers(store, unit(103, 8))


def test_an_index_file_of_another_database_is_rebuilt_not_trusted(tmp_path):
    theirs, ours = tmp_path / "theirs.duckdb", tmp_path / "ours.duckdb"
    fill(theirs, "a", seed=1)
    want = fill(ours, "b", seed=2)
    # Same index name, same generation: only the file's origin tells them apart.
    (tmp_path / "ours.duckdb.docs.hnsw").write_bytes((tmp_path / "theirs.duckdb.docs.hnsw").read_bytes())
    with HnswVectorStore(ours) as store:
        assert answers(store, unit(103, 8)) == want


def test_the_file_of_an_earlier_index_of_the_same_name_is_not_trusted(tmp_path):
    db = tmp_path / "m.duckdb"
    fill(db, "a", seed=1)
    earlier = (tmp_path / "m.duckdb.docs.hnsw").read_bytes()
    with HnswVectorStore(db) as store:
        store.delete_index("docs")
    want = fill(db, "b", seed=2)
    (tmp_path / "m.duckdb.docs.hnsw").write_bytes(earlier)
    with HnswVectorStore(db) as store:
        assert answers(store, unit(103, 8)) == want


@pytest.mark.parametrize("file_from", ["before the deletions", "between deletion and re-adding"])
def test_a_lagging_file_catches_up_ids_deleted_and_added_again(tmp_path, file_from):
    db = tmp_path / "m.duckdb"
    build(db)
    index_file = tmp_path / "m.duckdb.docs.hnsw"
    again = unit(11, 3)
    with HnswVectorStore(db) as store:
        stale = index_file.read_bytes()
        store.delete_vectors("docs", ids=["v20", "v21", "v22"])
        if file_from != "before the deletions":
            store.flush()
            stale = index_file.read_bytes()
        store.upsert("docs", again, ids=["v20", "v21", "v22"], metadata=[{"thread_id": "t1"}] * 3)
        store.delete_vectors("docs", ids=["v22"])  # deleted, added, deleted
        want = answers(store, unit(103, 8))
        index_file.write_bytes(stale)  # as if the later saves never ran
        store._loaded.clear()  # noqa: SLF001 - simulate a fresh process without closing
    with HnswVectorStore(db) as store:
        assert answers(store, unit(103, 8)) == want
        for i in (0, 1):
            hit = store.query("docs", again[i], top_k=1, filter={"thread_id": "t1"})[0]
            assert hit.id == f"v2{i}" and hit.score == pytest.approx(1.0)
        assert "v22" not in {r.id for r in store.query("docs", again[2], top_k=20)}
        assert store.describe_index("docs").count == 500 - 2 - 1


CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    from threadrecall.vector import HnswVectorStore

    store = HnswVectorStore(sys.argv[1])
    store.create_index("docs", {dim})
    rng = np.random.default_rng(5)  # seed 5
    batch = 0
    while True:
        vecs = rng.standard_normal((10, {dim})).astype(np.float32)
        ids = [f"b{{batch}}-{{j}}" for j in range(10)]
        store.upsert("docs", vecs, ids=ids, metadata=[{{"batch": batch}}] * 10)
        np.save(f"{{sys.argv[1]}}.{{batch}}.npy", vecs)
        print(batch, flush=True)
        if batch == 5:
            store.flush()  # an index file that will lag behind the database
        batch += 1
    """
).format(dim=DIM)


def test_sigkill_mid_upsert_loses_no_acknowledged_vector(tmp_path):
    db = tmp_path / "crash.duckdb"
    acked = kill_after_acks(CHILD, db, 40)
    with HnswVectorStore(db) as store:
        count = store.describe_index("docs").count
        assert count % 10 == 0, "a batch landed half-written"
        assert count >= 10 * (acked + 1)
        for batch in range(acked + 1):
            vecs = np.load(f"{db}.{batch}.npy")
            for j, v in enumerate(vecs):
                (hit,) = store.query("docs", v, top_k=1)
                assert hit.id == f"b{batch}-{j}"
                assert hit.metadata == {"batch": batch}
        per_batch = [len(store.query("docs", vecs[0], top_k=100, filter={"batch": b})) for b in range(count // 10)]
        assert set(per_batch) == {10}


def write_float_list_store(path, data: np.ndarray, ids: list, metadata: list, batch: int) -> None:
    """A database as the store wrote it while vectors were ``FLOAT[]`` lists: the first three
    schema steps, one generation per batch of ``batch`` rows."""
    db = Database(path)
    db.migrate("vector", MIGRATIONS[:3])
    with db.transaction() as tx:
        tx.execute("INSERT INTO vector_indexes VALUES ('docs', ?, 'cosine', ?)", [DIM, len(ids) // batch])
        tx.executemany(
            "INSERT INTO vector_rows VALUES ('docs', ?, ?, ?, ?, ?)",
            [(i, [float(x) for x in v], json.dumps(m), k // batch + 1, k % batch)
             for k, (i, v, m) in enumerate(zip(ids, data, metadata))],
        )
    db.close()


@pytest.mark.parametrize("file_at", [None, 2])
def test_store_of_float_list_vectors_opens_with_the_same_answers(tmp_path, file_at):
    """Vectors stored as lists are converted on open; the index is rebuilt from them, or an
    index file of generation 2 is caught up with them, and answers as a new store does."""
    data, queries = unit(5, 300), unit(105, 8)
    ids = [f"v{i}" for i in range(300)]
    metadata = [{"thread_id": f"t{i % 3}"} for i in range(300)]
    with HnswVectorStore(tmp_path / "new.duckdb") as store:
        store.create_index("docs", DIM)
        for start in range(0, 300, 100):
            store.upsert("docs", data[start:start + 100], ids=ids[start:start + 100],
                         metadata=metadata[start:start + 100])
        want = answers(store, queries)
    old = tmp_path / "old.duckdb"
    write_float_list_store(old, data, ids, metadata, batch=100)
    if file_at is not None:
        index = _core.VectorIndex(DIM, "cosine", m=16, ef_construction=200)
        index.add(ids[:200], data[:200], metadata[:200])
        index.save(f"{old}.docs.hnsw", file_at, "")
    with HnswVectorStore(old) as store:
        assert answers(store, queries) == want
        assert store.describe_index("docs").count == 300
        (hit,) = store.query("docs", data[42], top_k=1, include_vector=True)
        assert hit.id == "v42" and np.array_equal(hit.vector, data[42])
        store.upsert("docs", data[:1], ids=["v7"], metadata=[{"thread_id": "t9"}])
    with HnswVectorStore(old) as store:
        assert store.describe_index("docs").count == 300
        assert [r.id for r in store.query("docs", data[0], top_k=1, filter={"thread_id": "t9"})] == ["v7"]


METADATA = [{"z": i, "a": [1, {"b": None}], "big": 2**70, "f": 0.1, "s": f"é{i}"} for i in range(60)]


def written_store(db) -> np.ndarray:
    data = unit(11, len(METADATA))
    with HnswVectorStore(db) as store:
        store.create_index("docs", DIM)
        store.upsert("docs", data, ids=[f"v{i}" for i in range(len(data))], metadata=METADATA)
    return data


def queried_without_reading_rows(store: HnswVectorStore, data: np.ndarray, monkeypatch) -> None:
    """Every hit's metadata equals what was written, key order included, and no row is read."""
    reads = []
    monkeypatch.setattr(store.rows, "fetch", lambda *a, **k: reads.append(a) or [])
    for i, q in enumerate(data[:20]):
        hits = store.query("docs", q, top_k=3)
        assert hits[0].id == f"v{i}"
        for h in hits:
            want = METADATA[int(h.id[1:])]
            assert h.metadata == want and list(h.metadata) == list(want)
    assert reads == []


def test_a_reopened_store_hands_out_metadata_as_written_without_reading_the_database(
        tmp_path, monkeypatch):
    db = tmp_path / "m.duckdb"
    data = written_store(db)
    with HnswVectorStore(db) as store:
        queried_without_reading_rows(store, data, monkeypatch)


def test_an_index_file_without_metadata_texts_gets_them_from_the_database_once(
        tmp_path, monkeypatch):
    db = tmp_path / "m.duckdb"
    data = written_store(db)
    # The file as the previous format left it: vectors whose texts it does not hold.
    path = str(tmp_path / "m.duckdb.docs.hnsw")
    index, generation, origin = _core.VectorIndex.load(path)
    index.add([f"v{i}" for i in range(len(data))], data, METADATA)
    assert index.texts_missing == len(data)
    index.save(path, generation, origin)
    with HnswVectorStore(db) as store:
        queried_without_reading_rows(store, data, monkeypatch)
        assert store._loaded["docs"].index.texts_missing == 0
