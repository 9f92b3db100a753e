"""What a recall's ownership check costs on DuckDB for a thread this process has not read yet.

    python benches/owner_check.py STORE.duckdb [--build] [--threads N] [--same-process]
                                  [--semantic DIM]

``--build`` saves ``--threads`` threads of 100 resources, 10 messages each (the threads made by
the saves, metadata ``{"lang": ...}`` on every message). Then 600 threads picked at random are
recalled once each (``Memory.recall(thread, resource_id=..., per_page=0, include=[one message
with a neighbour each side])``), so every call has to learn its thread's owner: in a new
process on the reopened store, or with ``--same-process`` in the one that just imported
(``--build`` needed). ``--semantic DIM`` recalls by ``vector_search_string`` instead, in thread
scope with a filter on the messages' ``lang``, through ``HnswVectorStore`` and a ``DIM``-d
``HashEmbedder`` (the store built with them). To compare two checkouts, run it alternately
with ``PYTHONPATH`` at each side's ``python/`` (and its compiled core).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from threadrecall import Memory
from threadrecall.embedders import HashEmbedder
from threadrecall.storage import DuckDBStorage
from threadrecall.vector import HnswVectorStore

RESOURCES, PER_THREAD, CALLS = 100, 10, 600
LANGS = ("de", "en", "fr", "pt")


def memory_for(path: Path, semantic: int | None) -> Memory:
    storage = DuckDBStorage(path)
    if semantic is None:
        return Memory(storage=storage)
    return Memory(storage=storage, vector=HnswVectorStore(storage), embedder=HashEmbedder(dim=semantic),
                  options={"semantic_recall": {"top_k": 3, "message_range": 1, "scope": "thread",
                                               "filter": {"lang": "de"}}})


def build(memory: Memory, threads: int) -> None:
    for start in range(0, threads * PER_THREAD, 10_000):
        memory.save_messages([{"id": f"m{i}", "thread_id": f"t{i % threads}", "role": "user",
                               "resource_id": f"r{i % threads % RESOURCES}", "content": f"message {i}",
                               "metadata": {"lang": LANGS[i % len(LANGS)]}}
                              for i in range(start, min(start + 10_000, threads * PER_THREAD))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--build", action="store_true")
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--same-process", action="store_true")
    parser.add_argument("--semantic", type=int, metavar="DIM")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    memory = memory_for(args.store, args.semantic)
    if args.build:
        build(memory, args.threads)
        if not args.same_process:
            memory.close()
            memory = memory_for(args.store, args.semantic)
    times = []
    for t in random.Random(args.seed).sample(range(args.threads), CALLS):
        call = ({"vector_search_string": f"message {t + 4 * args.threads}"} if args.semantic else
                {"include": [{"id": f"m{t + 3 * args.threads}", "with_previous_messages": 1,
                              "with_next_messages": 1}]})
        started = time.perf_counter()
        memory.recall(f"t{t}", resource_id=f"r{t % RESOURCES}", per_page=0, **call)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    print(f"first recall of a thread: p50 {statistics.median(times):.3f} ms, "
          f"p95 {times[int(0.95 * len(times))]:.3f} ms")
    memory.close()


if __name__ == "__main__":
    main()
