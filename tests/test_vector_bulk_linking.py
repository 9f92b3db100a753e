"""Bulk writes are linked at once on several threads; the graph keeps near-duplicates in reach."""

from __future__ import annotations

import numpy as np
import pytest

from threadrecall.embedders import HashEmbedder
from threadrecall.errors import ConfigurationError, InvalidArgumentError
from threadrecall.vector import HnswVectorStore


def unit(seed: int, n: int, dim: int = 16) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_bulk_upsert_is_linked_before_it_returns(threads):
    data = unit(41, 5000)  # seed 41
    with HnswVectorStore(threads=threads) as store:
        store.create_index("docs", 16)
        store.upsert("docs", data, ids=[f"v{i}" for i in range(5000)])
        assert store._loaded["docs"].index.pending == 0
        queries = unit(42, 50)  # seed 42
        hits = 0
        for q in queries:
            truth = {f"v{j}" for j in np.argsort(-(data @ q))[:10]}
            hits += len(truth & {r.id for r in store.query("docs", q, top_k=10)})
        assert hits >= 0.95 * 500


def test_small_writes_are_left_to_the_background_linker():
    data = unit(43, 10)  # seed 43
    with HnswVectorStore() as store:
        store.create_index("docs", 16)
        store.upsert("docs", data, ids=[f"v{i}" for i in range(10)])
        assert store.query("docs", data[3], top_k=1)[0].id == "v3"
        store.link("docs")
        assert store._loaded["docs"].index.pending == 0


def test_threads_must_be_a_positive_integer(monkeypatch):
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(InvalidArgumentError):
            HnswVectorStore(threads=bad)
    monkeypatch.setenv("THREADRECALL_THREADS", "none")
    with pytest.raises(ConfigurationError):
        HnswVectorStore()
    monkeypatch.setenv("THREADRECALL_THREADS", "3")
    with HnswVectorStore() as store:
        assert store.threads == 3


def test_an_exact_text_query_finds_its_own_message_among_near_duplicates():
    # 200 texts differing by one word, among 2,000 others; linked, then each text queried.
    embedder = HashEmbedder(dim=384)
    words = [f"w{i}" for i in range(200)]
    near = [f"please remember that the meeting with the design team moved to {w}" for w in words]
    others = [f"unrelated note {i} on topic {i % 37} with detail {i * 13}" for i in range(2000)]
    texts = others + near
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    with HnswVectorStore() as store:
        store.create_index("msgs", 384)
        store.upsert("msgs", vectors, ids=[f"m{i}" for i in range(len(texts))])
        store.link("msgs")
        assert store._loaded["msgs"].index.pending == 0
        found = sum(store.query("msgs", vectors[2000 + i], top_k=1)[0].id == f"m{2000 + i}"
                    for i in range(200))
    assert found == 200
