"""The float vectors live in a file beside the index file, not in memory: resident memory,
exact scores, a vectors file that cannot be trusted, and saves that append what changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from threadrecall.errors import ConfigurationError, InvalidArgumentError
from threadrecall.vector import HnswVectorStore


def unit(seed: int, n: int, dim: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def fill(path: Path, n: int, dim: int, seed: int = 1) -> np.ndarray:
    data = unit(seed, n, dim)
    with HnswVectorStore(path) as store:
        store.create_index("docs", dim)
        store.upsert("docs", data, ids=[f"v{i}" for i in range(n)],
                     metadata=[{"thread_id": f"t{i % 7}"} for i in range(n)])
        store.link("docs")
    return data


def answers(store: HnswVectorStore, queries: np.ndarray) -> list:
    out = []
    for q in queries:
        out.append([(r.id, r.score) for r in store.query("docs", q, top_k=5)])
        out.append([r.id for r in store.query("docs", q, top_k=5, filter={"thread_id": "t1"})])
    return out


RSS_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    from threadrecall.vector import HnswVectorStore

    def rss():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024

    dim = int(sys.argv[2])
    # The code that opens and searches an index file, paged in once on a tiny store.
    warm = HnswVectorStore(sys.argv[3])
    warm.search_ids("docs", np.ones(dim, dtype=np.float32), top_k=1)
    queries = np.random.default_rng(5).standard_normal((300, dim)).astype(np.float32)
    store = HnswVectorStore(sys.argv[1])
    store.describe_index("docs")  # the database is open; the index is not loaded yet
    before = rss()
    for q in queries:
        store.search_ids("docs", q, top_k=10)
    print(json.dumps({"added": rss() - before}))
""")


def test_a_fresh_process_holds_the_index_in_under_half_the_raw_vector_bytes(tmp_path):
    # seed 1, 20,000 x 384: the float vectors alone are 30.7 MB.
    n, dim = 20_000, 384
    db = tmp_path / "m.duckdb"
    fill(db, n, dim)
    tiny = tmp_path / "tiny.duckdb"
    fill(tiny, 10, dim)
    out = subprocess.run([sys.executable, "-c", RSS_CHILD, str(db), str(dim), str(tiny)], check=True,
                         capture_output=True, text=True)
    added = json.loads(out.stdout.strip().splitlines()[-1])["added"]
    raw = n * dim * 4
    assert added < 0.5 * raw, f"the index added {added / 2**20:.1f} MiB, {added / raw:.2f} x the raw vectors"


def test_scores_are_the_float32_scores_of_the_stored_vectors(tmp_path):
    # seed 2 for data, 3 for queries; reopened, so every float vector is read from the file.
    n, dim = 3_000, 96
    db = tmp_path / "m.duckdb"
    data = fill(db, n, dim, seed=2)
    queries = unit(3, 20, dim)
    with HnswVectorStore(db) as store:
        for q in queries:
            hits = store.search_ids("docs", q, top_k=10)
            sims = data @ q
            want = np.argsort(-sims)[:10]
            assert [h[0] for h in hits] == [f"v{i}" for i in want]
            got = np.array([h[1] for h in hits], dtype=np.float32)
            # The int8 codes are off by about 1e-3; the float vectors agree to float32 rounding.
            assert np.abs(got - sims[want]).max() < 2e-6


def other_vectors_file(tmp_path: Path, dim: int) -> bytes:
    other = tmp_path / "other" / "m.duckdb"
    other.parent.mkdir()
    fill(other, 500, dim, seed=9)
    return Path(f"{other}.docs.vectors").read_bytes()


@pytest.mark.parametrize("damage", ["foreign", "truncated", "damaged header", "damaged rows", "missing"])
def test_a_vectors_file_that_cannot_be_trusted_is_rebuilt(tmp_path, damage):
    dim = 16
    db = tmp_path / "m.duckdb"
    fill(db, 500, dim)
    queries = unit(4, 6, dim)
    with HnswVectorStore(db) as store:
        want = answers(store, queries)
    vectors = Path(f"{db}.docs.vectors")
    raw = vectors.read_bytes()
    header = 4096
    if damage == "foreign":
        vectors.write_bytes(other_vectors_file(tmp_path, dim))
    elif damage == "truncated":
        vectors.write_bytes(raw[: header + (len(raw) - header) // 2])
    elif damage == "damaged header":
        vectors.write_bytes(raw[:20] + bytes([raw[20] ^ 1]) + raw[21:])
    elif damage == "damaged rows":  # the rows of the last save are all checked
        at = len(raw) - 9
        vectors.write_bytes(raw[:at] + bytes([raw[at] ^ 0x40]) + raw[at + 1:])
    else:
        vectors.unlink()
    with HnswVectorStore(db) as store:
        assert answers(store, queries) == want
    assert vectors.exists()  # written again by the rebuild
    with HnswVectorStore(db) as store:  # the rebuilt files are trusted next time
        assert answers(store, queries) == want


def test_a_small_change_appends_about_its_size_and_reopens_equal(tmp_path):
    # seed 1 for the base, 6 for the change
    n, dim = 20_000, 32
    db = tmp_path / "m.duckdb"
    fill(db, n, dim)
    index, vectors = Path(f"{db}.docs.hnsw"), Path(f"{db}.docs.vectors")
    sizes = index.stat().st_size, vectors.stat().st_size
    queries = unit(7, 10, dim)
    change = unit(6, 40, dim)
    with HnswVectorStore(db) as store:
        store.upsert("docs", change[:30], ids=[f"new{i}" for i in range(30)],
                     metadata=[{"thread_id": "t1"}] * 30)
        store.upsert("docs", change[30:], ids=[f"v{i}" for i in range(10)],  # overwrites
                     metadata=[{"thread_id": "t9"}] * 10)
        store.delete_vectors("docs", ids=["v100", "v101", "new0"])
        store.link("docs")
        before = answers(store, np.vstack([queries, change]))
    grown = index.stat().st_size - sizes[0], vectors.stat().st_size - sizes[1]
    assert grown[1] == 40 * dim * 4, "the vectors file grows by the 40 new rows"
    assert 0 < grown[0] < sizes[0] / 20, f"the index file grew by {grown[0]} bytes of {sizes[0]}"
    with HnswVectorStore(db) as store:
        assert answers(store, np.vstack([queries, change])) == before
        found = store.search_ids("docs", change[30], top_k=1)
        assert found[0][0] == "v0" and abs(found[0][1] - 1.0) < 1e-6
        assert not {"v100", "v101", "new0"} & {h[0] for q in change for h in store.search_ids("docs", q, top_k=20)}
        assert store.query("docs", change[35], top_k=1, filter={"thread_id": "t9"})[0].id == "v5"
        assert store.describe_index("docs").count == n + 30 - 3


def test_an_in_memory_store_keeps_its_float_vectors_in_an_unlinked_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    dim = 384
    data = unit(8, 6_000, dim)  # 9 MB of float vectors: more than the in-memory tail holds
    store = HnswVectorStore()
    store.create_index("docs", dim)
    store.upsert("docs", data, ids=[f"v{i}" for i in range(len(data))])
    assert list(tmp_path.iterdir()) == []
    fd_dir = Path("/proc/self/fd")
    open_files = []
    for fd in list(fd_dir.iterdir()):
        try:
            open_files.append(os.readlink(fd))
        except FileNotFoundError:  # the directory listing's own descriptor, closed since
            pass
    assert any(f.startswith(str(tmp_path)) and f.endswith("(deleted)") for f in open_files)
    hits = store.search_ids("docs", data[17], top_k=3)
    assert hits[0][0] == "v17" and abs(hits[0][1] - 1.0) < 1e-6
    store.close()


def zero_rows(db: Path) -> None:
    """Overwrites every row of the index's vectors file with zeros, its header kept."""
    vectors = Path(f"{db}.docs.vectors")
    size = vectors.stat().st_size
    with open(vectors, "r+b") as f:
        f.seek(4096)
        f.write(bytes(size - 4096))


def test_a_store_holding_its_vectors_searches_without_reading_their_file(tmp_path):
    # seed 4, 6,000 x 768: 18.4 MB of float vectors, past what an index holds unasked.
    n, dim = 6_000, 768
    held_db, plain_db = tmp_path / "held" / "m.duckdb", tmp_path / "plain" / "m.duckdb"
    held_db.parent.mkdir()
    data = fill(held_db, n, dim, seed=4)
    shutil.copytree(held_db.parent, plain_db.parent)
    queries = unit(5, 20, dim)
    with HnswVectorStore(plain_db) as plain, HnswVectorStore(held_db, hold_vectors=True) as held:
        first = answers(held, queries)
        assert first == answers(plain, queries)
        for db in (plain_db, held_db):
            zero_rows(db)  # only a store that reads the file now sees other scores
        assert answers(held, queries) == first
        for q in queries:  # the float32 scores of the stored vectors, not of the zeros
            hits = held.search_ids("docs", q, top_k=5)
            want = np.array([data[int(i[1:])] @ q for i, _ in hits])
            assert np.abs(np.array([s for _, s in hits]) - want).max() < 2e-6
        assert answers(plain, queries) != first


def test_hold_vectors_is_a_setting_of_the_open_store(tmp_path):
    db = tmp_path / "m.duckdb"
    with pytest.raises(InvalidArgumentError, match="hold_vectors must be True or False"):
        HnswVectorStore(db, hold_vectors="yes")
    with HnswVectorStore(db):
        with pytest.raises(ConfigurationError, match="hold_vectors"):
            HnswVectorStore(db, hold_vectors=True)
