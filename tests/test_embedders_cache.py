"""CachedEmbedder and shared_cache."""

import asyncio
import gc
import threading

import numpy as np
import pytest
from threadrecall.embedders import CachedEmbedder, Embedder, HashEmbedder, shared_cache
from threadrecall.errors import DimensionMismatchError, InvalidArgumentError


class Recording:
    """A HashEmbedder that records every batch it is asked to embed."""

    def __init__(self, dim=16, model_id="recording"):
        self._hash = HashEmbedder(dim=dim)
        self.model_id = model_id
        self.dimension = dim
        self.calls: list[list[str]] = []
        self.acalls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        return self._hash.embed(texts)

    async def aembed(self, texts):
        self.acalls.append(list(texts))
        return self._hash.embed(texts)


def test_protocol_and_delegation():
    inner = Recording(dim=12, model_id="m-1")
    cached = CachedEmbedder(inner)
    assert isinstance(cached, Embedder)
    assert cached.model_id == "m-1"
    assert cached.dimension == 12
    assert cached.max_entries == 1000


def test_repeated_text_reaches_the_inner_embedder_once():
    inner = Recording()
    cached = CachedEmbedder(inner)
    first = cached.embed(["hello there"])
    for _ in range(5):
        np.testing.assert_array_equal(cached.embed(["hello there"]), first)
    assert inner.calls == [["hello there"]]
    assert (cached.hits, cached.misses) == (5, 1)


def test_batch_with_duplicates_makes_one_call_with_distinct_misses():
    inner = Recording()
    cached = CachedEmbedder(inner)
    cached.embed(["b"])
    vectors = cached.embed(["a", "b", "a", "c", "b", "a"])
    assert inner.calls == [["b"], ["a", "c"]]
    expected = HashEmbedder(dim=16).embed(["a", "b", "a", "c", "b", "a"])
    np.testing.assert_array_equal(vectors, expected)
    assert (cached.hits, cached.misses) == (4, 3)


def test_all_cached_batch_makes_no_call():
    inner = Recording()
    cached = CachedEmbedder(inner)
    cached.embed(["x", "y"])
    cached.embed(["y", "x", "y"])
    assert inner.calls == [["x", "y"]]


def test_empty_batch():
    inner = Recording(dim=5)
    out = CachedEmbedder(inner).embed([])
    assert out.shape == (0, 5) and out.dtype == np.float32
    assert inner.calls == []


def test_lru_eviction_at_1000():
    inner = Recording()
    cached = CachedEmbedder(inner)
    texts = [f"text {i}" for i in range(1000)]
    cached.embed(texts)
    assert len(cached) == 1000
    cached.embed(["text 0"])  # touch: now the most recent
    cached.embed(["text 1000"])  # evicts the least recent, "text 1"
    assert len(cached) == 1000
    inner.calls.clear()
    cached.embed(["text 0", "text 2", "text 999", "text 1000"])
    assert inner.calls == []
    cached.embed(["text 1"])
    assert inner.calls == [["text 1"]]


def test_batch_larger_than_the_cache_still_returns_every_row():
    inner = Recording()
    cached = CachedEmbedder(inner, max_entries=3)
    texts = [f"t{i}" for i in range(10)]
    np.testing.assert_array_equal(cached.embed(texts), HashEmbedder(dim=16).embed(texts))
    assert len(cached) == 3


def test_model_id_is_part_of_the_key():
    a, b = Recording(model_id="model-a"), Recording(model_id="model-b")
    cache_a, cache_b = CachedEmbedder(a), CachedEmbedder(b)
    assert cache_a._key("model-a", "same") != cache_b._key("model-b", "same")


def test_returned_array_is_a_copy():
    cached = CachedEmbedder(Recording())
    first = cached.embed(["mutable?"])
    first[:] = 0
    assert np.linalg.norm(cached.embed(["mutable?"])) == pytest.approx(1.0)


def test_inner_returning_the_wrong_shape():
    class Broken(Recording):
        def embed(self, texts):
            return np.zeros((len(texts), self.dimension + 1), dtype=np.float32)

    with pytest.raises(DimensionMismatchError):
        CachedEmbedder(Broken()).embed(["x"])


def test_aembed_uses_the_inner_aembed_and_the_cache():
    inner = Recording()
    cached = CachedEmbedder(inner)
    cached.embed(["seen"])
    out = asyncio.run(cached.aembed(["seen", "new", "new"]))
    assert inner.acalls == [["new"]]
    np.testing.assert_array_equal(out, HashEmbedder(dim=16).embed(["seen", "new", "new"]))


def test_thread_safety():
    """Eight threads (seeded choice of texts) hammer one cache; rows and counters stay right."""
    inner = Recording()
    cached = CachedEmbedder(inner, max_entries=50)
    pool = [f"text {i}" for i in range(200)]
    reference = dict(zip(pool, HashEmbedder(dim=16).embed(pool)))
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(100):
            batch = [pool[i] for i in rng.integers(0, len(pool), size=8)]
            out = cached.embed(batch)
            for text, row in zip(batch, out):
                if not np.array_equal(row, reference[text]):
                    errors.append(text)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert cached.hits + cached.misses == 8 * 100 * 8
    assert cached.misses == sum(len(call) for call in inner.calls)
    assert len(cached) <= 50


def test_shared_cache_is_one_per_instance():
    inner = Recording()
    first = shared_cache(inner)
    assert shared_cache(inner) is first
    assert shared_cache(first) is first
    assert first.inner is inner
    other = Recording()
    assert shared_cache(other) is not first


def test_shared_cache_is_released_with_its_holders():
    inner = Recording()
    cached = shared_cache(inner)
    cached.embed(["warm"])
    del cached
    gc.collect()
    fresh = shared_cache(inner)
    assert len(fresh) == 0


@pytest.mark.parametrize("max_entries", [0, -1, 2.0, True])
def test_bad_max_entries(max_entries):
    with pytest.raises(InvalidArgumentError):
        CachedEmbedder(Recording(), max_entries=max_entries)


def test_refuses_a_non_embedder_and_double_caching():
    with pytest.raises(InvalidArgumentError):
        CachedEmbedder(object())
    with pytest.raises(InvalidArgumentError):
        CachedEmbedder(CachedEmbedder(Recording()))
