"""The breadth an unfiltered query uses when none is given, against an exact numpy scan: on
data whose clusters are wide (neighbours about as far as the rest of their cluster), the
default still reaches recall@10 0.95 for new queries from the same distribution."""

from __future__ import annotations

import numpy as np
import pytest

from threadrecall.storage.duckdb import Database
from threadrecall.vector import HnswVectorStore


def mixture(rng: np.random.Generator, centres: np.ndarray, spread: float, n: int) -> np.ndarray:
    """``n`` unit vectors scattered around randomly chosen ``centres`` with Gaussian noise."""
    x = centres[rng.integers(0, len(centres), n)]
    x = x + spread * rng.standard_normal(x.shape).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize(
    ("n", "dim", "clusters", "spread"),
    [(12_000, 96, 8, 2.0), (16_000, 192, 6, 2.0)],
)
def test_the_default_breadth_reaches_recall_095_on_wide_clusters(n, dim, clusters, spread):
    rng = np.random.default_rng(31)  # seed 31 for centres, data and queries
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    data = mixture(rng, centres, spread, n)
    queries = mixture(rng, centres, spread, 300)
    store = HnswVectorStore(Database(":memory:"))
    try:
        store.create_index("docs", dim)
        store.upsert("docs", data, ids=[str(i) for i in range(n)])
        store.link()
        truth = np.argsort(-(queries @ data.T), axis=1)[:, :10]
        found = 0
        for q, t in zip(queries, truth):
            got = {r.id for r in store.query("docs", q, top_k=10)}
            found += len(got & {str(i) for i in t})
        assert found / truth.size >= 0.95
    finally:
        store.close()
