"""Semantic recall end to end, and ingest with embedding, on one store.

Run: ``pytest benches/bench_semantic.py --benchmark-only -o addopts="" [--bench-size 1m]``.
The store has ``size`` messages over 10,000 threads of 100 resources, embedded with the
384-d ``HashEmbedder``; the graph's linking backlog is drained before the timings. Query embeddings are warmed into the embedding cache first, so the
timings cover the vector search, the context expansion and building the result, not the model.

Ingest (``-k ingest``): ``save_messages`` of 1,000 new messages, embedding included, into an
empty store and into one already holding 100k messages; the median is per batch of 1,000, the
mean adds the database's checkpoints and the index file's periodic saves.
"""

from __future__ import annotations

import random
import time

import pytest

from threadrecall import Memory
from threadrecall.cli import import_messages
from threadrecall.embedders import HashEmbedder
from threadrecall.storage import DuckDBStorage

from conftest import conversation, cycle

THREADS = 10_000
QUERIES = [f"what did we say about {t} and item {i}" for t in ("billing", "support", "travel", "books", "food")
           for i in range(0, 1000, 25)]


@pytest.fixture(scope="module")
def store(bench_size, tmp_path_factory):
    path = tmp_path_factory.mktemp("semantic") / "bench.duckdb"
    memory = Memory(storage=DuckDBStorage(path), embedder=HashEmbedder(dim=384),
                    options={"semantic_recall": {"top_k": 4, "message_range": 1}})
    started = time.perf_counter()
    import_messages(memory, conversation(bench_size, threads=min(THREADS, bench_size // 10)),
                    total=bench_size, batch=1000)
    rate = bench_size / (time.perf_counter() - started)
    print(f"\ningested {bench_size} messages with embeddings at {rate:,.0f} messages/s")
    started = time.perf_counter()
    memory.vector.link()  # measure the steady state: every vector in the graph
    print(f"linked the graph's backlog in {time.perf_counter() - started:,.1f} s")
    memory.index.embedder.embed(QUERIES)  # warm the query embeddings
    yield memory, min(THREADS, bench_size // 10)
    memory.close()


def _calls(threads, n=500, seed=11):
    rng = random.Random(seed)
    return [(f"t{t}", f"r{t % 100}", rng.choice(QUERIES)) for t in (rng.randrange(threads) for _ in range(n))]



@pytest.mark.benchmark(group="semantic-recall")
@pytest.mark.parametrize("scope", ["thread", "resource"])
def test_semantic_recall(benchmark, store, scope):
    memory, threads = store
    nxt = cycle(_calls(threads))
    config = {"semantic_recall": {"scope": scope}}

    def run():
        thread_id, resource_id, query = nxt()
        return memory.recall(thread_id, resource_id=resource_id, per_page=0, vector_search_string=query,
                             thread_config=config)

    result = benchmark(run)
    assert 1 <= len(result.messages) <= 12


INGEST_BASE = 100_000  # messages already in the store of the "100k" case
INGEST_ROUNDS = 20


def _ingest_memory(path):
    return Memory(storage=DuckDBStorage(path), embedder=HashEmbedder(dim=384),
                  options={"semantic_recall": True})


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A store already holding ``INGEST_BASE`` embedded messages, its graph fully linked."""
    memory = _ingest_memory(tmp_path_factory.mktemp("ingest") / "filled.duckdb")
    import_messages(memory, conversation(INGEST_BASE, threads=THREADS), total=INGEST_BASE, batch=1000,
                    progress=False)
    memory.vector.link()
    yield memory
    memory.close()


@pytest.mark.benchmark(group="ingest")
@pytest.mark.parametrize("base", ["empty", "100k"])
def test_ingest_batches_of_1000(benchmark, tmp_path, request, base):
    """``save_messages`` of 1,000 new messages (embedding included); the median is per batch.

    The mean includes the database's periodic checkpoints, which the median leaves out.
    """
    memory = _ingest_memory(tmp_path / "ingest.duckdb") if base == "empty" else request.getfixturevalue("filled")
    batches = iter([[{**r, "id": f"b{s}-{r['id']}"} for r in conversation(1000, threads=100, seed=s)]
                    for s in range(INGEST_ROUNDS)])

    def batch():
        return memory.save_messages(next(batches))

    saved = benchmark.pedantic(batch, rounds=INGEST_ROUNDS, iterations=1)
    assert len(saved) == 1000
    stats = benchmark.stats.stats
    print(f"\ningest into {base} store: median {stats.median * 1e3:.1f} ms per 1,000 "
          f"({1000 / stats.median:,.0f} messages/s), mean {stats.mean * 1e3:.1f} ms")
    if base == "empty":
        memory.close()
