"""Embedder throughput.

Run: ``pytest benches/bench_embedders.py --benchmark-only``. Each benchmark stores its
texts-per-second figure in ``extra_info["texts_per_s"]`` (shown with ``--benchmark-verbose``
or in the JSON from ``--benchmark-json``).
"""

import numpy as np
import pytest

from threadrecall.embedders import CachedEmbedder, HashEmbedder, LocalEmbedder

SEED = 1234


def short_texts(count: int, seed: int = SEED) -> list[str]:
    """Chat-like messages of 5 to 15 words from a small vocabulary (seeded)."""
    rng = np.random.default_rng(seed)
    words = ("the a meeting project deadline budget cat coffee tomorrow we should review "
             "plan send email call notes report launch customer bug fix deploy friday").split()
    return [" ".join(rng.choice(words, size=rng.integers(5, 16))) for _ in range(count)]


def record(benchmark, count: int) -> None:
    benchmark.extra_info["texts"] = count
    benchmark.extra_info["texts_per_s"] = round(count / benchmark.stats.stats.mean)


@pytest.mark.parametrize("dim", [384, 1536])
def test_hash_embedder_throughput(benchmark, dim):
    texts = short_texts(100_000)
    embedder = HashEmbedder(dim=dim)
    vectors = benchmark.pedantic(embedder.embed, args=(texts,), rounds=5, warmup_rounds=1)
    assert vectors.shape == (len(texts), dim)
    record(benchmark, len(texts))


def test_cached_embedder_all_hits(benchmark):
    texts = short_texts(1000)
    cached = CachedEmbedder(HashEmbedder())
    cached.embed(texts)
    benchmark(cached.embed, texts)
    record(benchmark, len(texts))


@pytest.mark.parametrize("threads", [1, 2])
def test_local_embedder_throughput(benchmark, threads):
    pytest.importorskip("onnxruntime")
    texts = short_texts(512)
    embedder = LocalEmbedder(threads=threads)
    embedder.embed(texts[:8])  # load the model outside the timing
    vectors = benchmark.pedantic(embedder.embed, args=(texts,), rounds=3)
    assert vectors.shape == (len(texts), 384)
    record(benchmark, len(texts))
