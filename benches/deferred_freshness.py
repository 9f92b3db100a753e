"""Semantic recall over PostgreSQL + HNSW cache, the cache's freshness checked first (its own
round trip before the search, then the read of the hits) against checked in the read of the
hits (one round trip), interleaved call by call in one process.

``--size`` messages (``conftest.conversation``: threads of 10 messages, 100 resources) saved
through ``Memory.save_messages``, 384-d ``HashEmbedder``, ``top_k`` 4, ``message_range`` 1,
``per_page`` 0, thread and resource scope. "checked first" is the store without
``search_ids_deferred`` (so ``search_ids``, which reads the catalogue row before it searches);
the same ``Memory``, cache and connection pool serve both. Then the same with a message saved
through a second storage and store (another process, as far as the database can tell) before
each timed call, so every call finds its cache behind: checked first, that is the catalogue
row, the changes and the read (three round trips); checked in the read, the read that brings
the changes and the read again (two).

    THREADRECALL_TEST_PG_DSN=... python benches/deferred_freshness.py --size 20000
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import uuid
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from conftest import conversation  # noqa: E402

from threadrecall import Memory  # noqa: E402
from threadrecall.embedders import HashEmbedder  # noqa: E402
from threadrecall.storage import PostgresStorage  # noqa: E402
from threadrecall.vector import HnswVectorStore  # noqa: E402

QUERIES = [f"what did we say about {t} and item {i}" for t in ("billing", "support", "travel", "books", "food")
           for i in range(0, 1000, 25)]
OPTIONS = {"semantic_recall": {"top_k": 4, "message_range": 1}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=1_000)
    args = parser.parse_args()
    dsn = os.environ["THREADRECALL_TEST_PG_DSN"]
    schema = f"fresh_{uuid.uuid4().hex[:8]}"
    threads = args.size // 10
    storage = PostgresStorage(dsn, schema=schema)
    store = HnswVectorStore(storage)
    memory = Memory(storage=storage, vector=store, embedder=HashEmbedder(dim=384), options=OPTIONS)
    try:
        rows = list(conversation(args.size, threads=threads, resources=100))
        for i in range(0, len(rows), 5_000):
            memory.save_messages(rows[i:i + 5_000])
        store.link()
        rng = random.Random(1)
        work = [(f"t{t}", f"r{t % 100}", rng.choice(QUERIES))
                for t in (rng.randrange(threads) for _ in range(args.calls + 100))]
        redone = [0]
        catch_up = store.catch_up

        def counted(*a, **k):  # called when a check in the read did not hold
            redone[0] += 1
            return catch_up(*a, **k)

        store.catch_up = counted
        load = os.getloadavg()[0]
        print(f"{args.size:,} messages, {args.calls:,} calls per scope and mode ({args.calls // 2:,} with "
              f"writes), load average {load:.1f}\n")
        other_storage = PostgresStorage(dsn, schema=schema)
        other = Memory(storage=other_storage, vector=HnswVectorStore(other_storage),
                       embedder=HashEmbedder(dim=384), options=OPTIONS)
        written = iter(range(10**9))

        def write_elsewhere() -> None:
            i = next(written)
            t = i % threads
            other.save_messages([{"id": f"w{i}", "thread_id": f"t{t}", "resource_id": f"r{t % 100}",
                                  "role": "user", "content": f"a note written elsewhere, number {i}"}])

        print("| writes | scope | checked first p50 | p95 | checked in the read p50 | p95 | ratio p50 |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for writes, scope in (("none", "thread"), ("none", "resource"),
                              ("one before each call", "thread"), ("one before each call", "resource")):
            config = {"semantic_recall": {"scope": scope}}
            times: dict[str, list[float]] = {"first": [], "read": []}
            calls = work if writes == "none" else work[:args.calls // 2 + 100]
            for k, (thread, resource, query) in enumerate(calls):
                for mode in ("first", "read"):
                    if writes != "none":
                        write_elsewhere()
                    if mode == "first":
                        store.search_ids_deferred = None  # read as absent: search_ids
                    else:
                        del store.search_ids_deferred
                    start = time.perf_counter()
                    memory.recall(thread, resource_id=resource, per_page=0, vector_search_string=query,
                                  thread_config=config)
                    if k >= 100:
                        times[mode].append((time.perf_counter() - start) * 1000)
            first, read = np.array(times["first"]), np.array(times["read"])
            print(f"| {writes} | {scope} | {np.median(first):.2f} | {np.percentile(first, 95):.2f} | "
                  f"{np.median(read):.2f} | {np.percentile(read, 95):.2f} | "
                  f"{np.median(read) / np.median(first):.2f} |", flush=True)
        print(f"\ncalls searched again after the check in the read: {redone[0]:,}; "
              f"load average after {os.getloadavg()[0]:.1f}")
        other.close()
    finally:
        memory.close()
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
