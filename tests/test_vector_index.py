"""The compiled VectorIndex binding, against numpy exact answers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from threadrecall._core import VectorIndex
from threadrecall.errors import (
    DimensionMismatchError,
    FilterTypeError,
    IndexCorruptError,
    InvalidArgumentError,
    InvalidFilterError,
)


def clustered(seed: int, n: int, dim: int, clusters: int = 20, queries: int = 0) -> np.ndarray:
    """``n`` points of a seeded Gaussian mixture (then ``queries`` more from the same one)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    n += queries
    x = centres[rng.integers(0, clusters, n)] + 0.4 * rng.standard_normal((n, dim)).astype(np.float32)
    return np.ascontiguousarray(x, dtype=np.float32)


def filled(n=6000, dim=24, metric="cosine", seed=7):
    """An index over the first ``n`` points of a mixture; the points after them are queries."""
    data = clustered(seed, n, dim)
    ix = VectorIndex(dim, metric, m=12, ef_construction=100, seed=1)
    meta = [{"thread_id": f"t{i % 40}", "resource_id": f"r{i % 3}", "n": i} for i in range(n)]
    ix.add([f"v{i}" for i in range(n)], data, meta, link=True)
    return ix, data, meta


def exact(data, q, k, allowed=None, metric="cosine"):
    idx = np.arange(len(data)) if allowed is None else np.asarray(allowed)
    x = data[idx]
    if metric == "cosine":
        s = (x / np.linalg.norm(x, axis=1, keepdims=True)) @ (q / np.linalg.norm(q))
    elif metric == "dotproduct":
        s = x @ q
    else:
        s = -np.linalg.norm(x - q, axis=1)
    order = np.argsort(-s, kind="stable")[:k]
    return [f"v{idx[j]}" for j in order], s[order]


@pytest.mark.parametrize("metric", ["cosine", "euclidean", "dotproduct"])
def test_recall_and_scores_against_numpy(metric):
    ix, data, _ = filled(metric=metric)  # seed 7
    queries = clustered(7, 6000, 24, queries=50)[6000:]
    hits = 0
    for q in queries:
        got = ix.search(q, 10, ef=64)
        want, scores = exact(data, q, 10, metric=metric)
        hits += len({g for g, _ in got} & set(want))
        assert got[0][1] == pytest.approx(scores[0], rel=1e-4, abs=1e-4)
    assert hits / 500 >= 0.95


def test_filtered_search_equals_the_exact_filtered_top_k():
    ix, data, meta = filled()
    q = clustered(9, 5, 24)  # seed 9
    for flt, keep in [
        ({"thread_id": "t5"}, lambda m: m["thread_id"] == "t5"),
        ({"$and": [{"resource_id": "r1"}, {"n": {"$lt": 700}}]}, lambda m: m["resource_id"] == "r1" and m["n"] < 700),
        ({"n": {"$in": [3, 5, 8, 13]}}, lambda m: m["n"] in (3, 5, 8, 13)),
    ]:
        allowed = [i for i, m in enumerate(meta) if keep(m)]
        for v in q:
            assert [i for i, _ in ix.search(v, 10, flt)] == exact(data, v, 10, allowed)[0]


def test_filters_allowing_thousands_equal_the_exact_filtered_top_k():
    # seed 11; 8,000 vectors with a key of few values (posted) and one of a value each
    # (sorted numbers): filters allowing 5-25 % go through the exact scan of the allowed
    # slots or the walk, as the planner chooses, and the scan must return the exact answer.
    n = 8000
    data = clustered(11, n, 24)
    ix = VectorIndex(24, "cosine", m=12, ef_construction=100, seed=1)
    meta = [{"cat": i % 100, "tag": f"t{i % 100}", "ts": (i * 7919) % n} for i in range(n)]
    ix.add([f"v{i}" for i in range(n)], data, meta, link=True)
    q = clustered(12, 5, 24)  # seed 12
    for flt, keep in [
        ({"cat": {"$in": list(range(10))}}, lambda m: m["cat"] < 10),
        ({"tag": {"$in": [f"t{v}" for v in range(5, 15)]}}, lambda m: 5 <= m["cat"] < 15),
        ({"ts": {"$gte": 1000, "$lt": 1400}}, lambda m: 1000 <= m["ts"] < 1400),
        ({"$and": [{"ts": {"$lt": 8000}}, {"cat": {"$lt": 5}}]}, lambda m: m["cat"] < 5),
    ]:
        allowed = [i for i, m in enumerate(meta) if keep(m)]
        for v in q:
            got = ix.search(v, 10, flt, 4000)  # wide enough that the scan answers
            want_ids, want_scores = exact(data, v, 10, allowed)
            assert [i for i, _ in got] == want_ids
            np.testing.assert_allclose([s for _, s in got], want_scores, rtol=1e-5, atol=1e-6)


class Hit:
    """A result class for ``query``: what it sets lands in the instance."""


def test_query_hands_out_the_metadata_text_each_vector_holds():
    ix, data, meta = filled(n=300)
    q = data[5]
    # Written as dicts alone: no text to hand out.
    results, missing = ix.query(q, 3, None, None, result=Hit)
    assert [r.id for r in results] == [i for i, _ in ix.search(q, 3)]
    assert missing == [r.id for r in results] and not any(hasattr(r, "_text") for r in results)
    assert ix.texts_missing == 300
    # Written as texts: each vector keeps its own, exactly as given.
    ids = [f"v{i}" for i in range(300)]
    texts = [json.dumps({"n": i, "w": f"é {i}"}, ensure_ascii=False) for i in range(300)]
    ix.add(ids, data[:300], metadata_json=texts)
    results, missing = ix.query(q, 3, None, None, result=Hit)
    assert missing == [] and [r._text.decode() for r in results] == [texts[int(r.id[1:])] for r in results]
    assert ix.texts_missing == 0
    # Dicts and texts: the filter reads the dicts, the results hold the texts.
    ix.add(["v5"], q[None, :], [{"n": -1}], metadata_json=['{"n": -1, "extra": [1, 2]}'])
    (hit,), missing = ix.query(q, 1, {"n": -1}, None, result=Hit)
    assert (hit.id, hit._text, missing) == ("v5", b'{"n": -1, "extra": [1, 2]}', [])
    # Replaced by a dict alone: none again, until filled; removed: not counted.
    ix.add(["v5"], q[None, :], [{}])
    assert ix.query(q, 1, None, None, result=Hit)[1] == ["v5"]
    assert ix.texts_missing == 1
    ix.fill_texts(["v5", "v6", "nope"], ["{}", '{"ignored": 1}', "{}"])
    assert ix.query(q, 1, None, None, result=Hit)[0][0]._text == b"{}"
    assert ix.query(data[6], 1, None, None, result=Hit)[0][0]._text.decode() == texts[6]  # it had one
    ix.add(["v5"], q[None, :], [{}])
    ix.remove(["v5"])
    assert ix.texts_missing == 0
    with pytest.raises(InvalidArgumentError):
        ix.fill_texts(["v0"], [])
    with pytest.raises(InvalidArgumentError):
        ix.add(["v0"], q[None, :], [{}], metadata_json=[])
    with pytest.raises(InvalidArgumentError):
        ix.add(["v0"], q[None, :])


def test_texts_follow_their_vectors_when_compaction_numbers_the_slots_anew():
    ix, data, _ = filled(n=1000)
    ix.add([f"v{i}" for i in range(1000)], data[:1000], metadata_json=[str(i) for i in range(1000)])
    # 400 more tombstones: the index compacts, numbering the slots anew.
    assert ix.remove([f"v{i}" for i in range(400)]) == 400
    for q in data[[450, 900]]:
        results, missing = ix.query(q, 20, None, None, result=Hit)
        assert len(results) == 20 and missing == []
        assert all(r._text.decode() == r.id[1:] for r in results)


def test_search_batch_equals_single_searches():
    ix, _, _ = filled(n=500)
    q = clustered(10, 6, 24)
    assert ix.search_batch(q, 5) == [ix.search(v, 5) for v in q]
    assert ix.search_batch(q, 5, {"thread_id": "t1"}) == [ix.search(v, 5, {"thread_id": "t1"}) for v in q]


def test_remove_and_remove_where_and_get_vector():
    ix, data, _ = filled(n=400)
    assert ix.remove(["v1", "v2", "nope"]) == 2
    gone = ix.remove_where({"thread_id": "t3"})
    assert sorted(gone) == sorted(f"v{i}" for i in range(3, 400, 40))
    assert len(ix) == 400 - 2 - 10 and "v1" not in ix and "v0" in ix
    assert ix.get_vector("v1") is None
    v = ix.get_vector("v0")
    np.testing.assert_allclose(v, data[0] / np.linalg.norm(data[0]), rtol=1e-5)
    assert set(ix.ids_where({"thread_id": "t3"})) == set()


def test_save_load_round_trip_and_corruption(tmp_path):
    ix, data, _ = filled(n=800)
    path = tmp_path / "x.hnsw"
    ix.save(str(path), 17, "db-1")
    back, generation, origin = VectorIndex.load(str(path))
    assert generation == 17 and origin == "db-1" and len(back) == len(ix) and back.dim == 24 and back.metric == "cosine"
    for q in clustered(11, 5, 24):
        assert back.search(q, 10, ef=32) == ix.search(q, 10, ef=32)
    raw = path.read_bytes()
    for bad in (raw[:-9], raw[:100], b"", b"SQLite format 3\x00" + raw[16:]):
        path.write_bytes(bad)
        with pytest.raises(IndexCorruptError):
            VectorIndex.load(str(path))


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda ix: ix.search(np.zeros(5, np.float32), 3), DimensionMismatchError),
        (lambda ix: ix.add(["a"], np.zeros((1, 5), np.float32), [{}]), DimensionMismatchError),
        (lambda ix: ix.add(["a", "b"], np.zeros((1, 4), np.float32), [{}, {}]), InvalidArgumentError),
        (lambda ix: ix.search(np.zeros(4, np.float32), -1), InvalidArgumentError),
        (lambda ix: ix.search(np.zeros(4, np.float32), 3, "thread"), FilterTypeError),
        (lambda ix: ix.search(np.zeros(4, np.float32), 3, {"$nope": 1}), InvalidFilterError),
        (lambda ix: ix.remove_where({}), InvalidFilterError),
        (lambda ix: VectorIndex(4, "manhattan"), InvalidArgumentError),
        (lambda ix: VectorIndex(0, "cosine"), InvalidArgumentError),
        (lambda ix: VectorIndex(4, "cosine", m=1), InvalidArgumentError),
    ],
)
def test_bad_input_raises_the_api_error(call, error):
    ix = VectorIndex(4, "cosine")
    with pytest.raises(error):
        call(ix)
    assert len(ix) == 0
