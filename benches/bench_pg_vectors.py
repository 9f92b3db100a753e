"""Side-by-side: semantic recall end to end with the HNSW index over DuckDB and over PostgreSQL.

One run, one machine. Both stores get the same ``--size`` messages (10,000 threads of 100
resources, ``benches/conftest.conversation``), embedded with the 384-d ``HashEmbedder``
through ``Memory.save_messages`` in batches of 1,000. The PostgreSQL store is then opened again
from a new ``PostgresStorage``, as another process would: its index is rebuilt from the rows
in the database (timed), and before every search it checks with one query that it is current.
Both graphs' linking backlogs are drained before the timings, and the query embeddings are
warmed, so the timings cover the vector search, the context expansion and the result.

Latency: ``Memory.recall(thread, resource_id=..., per_page=0, vector_search_string=q)`` in
thread and resource scope, the two stores called alternately, ``--calls`` calls each after a
warm-up; p50 / p95 in milliseconds. ``search_ids`` alone (the index search, with the
freshness query over PostgreSQL) is timed the same way. Recall@10: the store's top 10 for
the query vector within the scope against an exact numpy scan of the same vectors (a hit
counts when its exact score reaches the exact 10th score, so ties do not count as misses).

    python benches/bench_pg_vectors.py                  # 100,000 messages
    python benches/bench_pg_vectors.py --size 10000     # quick
    THREADRECALL_TEST_PG_DSN=postgresql://... python benches/bench_pg_vectors.py

Without ``THREADRECALL_TEST_PG_DSN`` a throwaway server is started (``tests/postgres_server``).
Writes ``results/pg_vectors.md``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from conftest import conversation  # noqa: E402

from threadrecall import Memory  # noqa: E402
from threadrecall.cli import import_messages  # noqa: E402
from threadrecall.embedders import HashEmbedder  # noqa: E402
from threadrecall.storage import DuckDBStorage, PostgresStorage  # noqa: E402

THREADS = 10_000
QUERIES = [f"what did we say about {t} and item {i}" for t in ("billing", "support", "travel", "books", "food")
           for i in range(0, 1000, 25)]
OPTIONS = {"semantic_recall": {"top_k": 4, "message_range": 1}}


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def calls(threads: int, n: int, seed: int = 11) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    return [(f"t{t}", f"r{t % 100}", rng.choice(QUERIES)) for t in (rng.randrange(threads) for _ in range(n))]


def ingest(memory: Memory, size: int, threads: int) -> float:
    started = time.perf_counter()
    import_messages(memory, conversation(size, threads=threads), total=size, batch=1000, progress=False)
    return size / (time.perf_counter() - started)


def exact_truth(rows: list[dict], embedder) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
    """Every message's vector (normalised), thread and resource, and its row by vector id."""
    vectors = embedder.embed([r["content"] for r in rows]).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    threads = np.array([r["thread_id"] for r in rows])
    resources = np.array([r["resource_id"] for r in rows])
    return vectors, threads, resources, {f"{r['id']}#0": k for k, r in enumerate(rows)}


def recall_at_10(memory: Memory, truth, work: list[tuple[str, str, str]], scope: str) -> float:
    vectors, threads, resources, row_of = truth
    total = 0.0
    for thread_id, resource_id, query in work:
        q = memory.index.embed_query(query)[0].astype(np.float32)
        q /= np.linalg.norm(q)
        flt = {"thread_id": thread_id} if scope == "thread" else {"resource_id": resource_id}
        mask = threads == thread_id if scope == "thread" else resources == resource_id
        scores = vectors[mask] @ q
        k = min(10, len(scores))
        tenth = np.sort(scores)[-k]
        got = memory.vector.search_ids(memory.index.name, q, top_k=10, filter=flt)
        good = sum(1 for vid, _ in got if float(vectors[row_of[vid]] @ q) >= tenth - 1e-5)
        total += good / k
    return total / len(work)


def timed(fn, work) -> list[float]:
    out = []
    for item in work:
        started = time.perf_counter()
        fn(item)
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=1_000)
    parser.add_argument("--recall-queries", type=int, default=300)
    args = parser.parse_args()
    size, threads = args.size, min(THREADS, args.size // 10)

    server = None
    dsn = os.environ.get("THREADRECALL_TEST_PG_DSN")
    if not dsn:
        from postgres_server import PostgresServer

        server = PostgresServer()
        server.start()
        dsn = server.dsn
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    folder = Path(tempfile.mkdtemp(prefix="bench_pg_vectors_"))
    try:
        embedder = HashEmbedder(dim=384)
        duck = Memory(storage=DuckDBStorage(folder / "bench.duckdb"), embedder=embedder, options=OPTIONS)
        writer = Memory(storage=PostgresStorage(dsn, schema=schema), embedder=embedder, options=OPTIONS)
        rate = {"duckdb": ingest(duck, size, threads), "postgres": ingest(writer, size, threads)}
        print(f"ingested {size:,} messages: DuckDB {rate['duckdb']:,.0f}/s, PostgreSQL {rate['postgres']:,.0f}/s")
        writer.close()

        pg = Memory(storage=PostgresStorage(dsn, schema=schema), embedder=embedder, options=OPTIONS)
        started = time.perf_counter()
        pg.recall("t0", resource_id="r0", per_page=0, vector_search_string=QUERIES[0])  # rebuilds the index
        rebuild = time.perf_counter() - started
        print(f"PostgreSQL: index rebuilt from the database in {rebuild:,.1f} s")
        for memory in (duck, pg):
            memory.vector.link()
        embedder.embed(QUERIES)

        floor = []
        for _ in range(args.calls):  # the cost of any one round trip to the server, now
            with pg.storage.connection() as conn:
                started = time.perf_counter()
                conn.execute("SELECT 1").fetchall()
                floor.append((time.perf_counter() - started) * 1000)
        print(f"one round trip (SELECT 1): p50 {percentile(floor, 50):.3f} ms")
        truth = exact_truth(list(conversation(size, threads=threads)), embedder)
        stores = {"DuckDB + HNSW": duck, "PostgreSQL + HNSW cache": pg}
        rows = []
        for scope in ("thread", "resource"):
            work = calls(threads, args.calls, seed=11 if scope == "thread" else 12)
            config = {"semantic_recall": {"scope": scope}}
            recalls, searches = {}, {}
            for name, memory in stores.items():  # warm-up
                for thread_id, resource_id, query in work[:50]:
                    memory.recall(thread_id, resource_id=resource_id, per_page=0, vector_search_string=query,
                                  thread_config=config)
            for thread_id, resource_id, query in work:  # alternate the stores call by call
                for name, memory in stores.items():
                    started = time.perf_counter()
                    memory.recall(thread_id, resource_id=resource_id, per_page=0, vector_search_string=query,
                                  thread_config=config)
                    recalls.setdefault(name, []).append((time.perf_counter() - started) * 1000)
                    q = memory.index.embed_query(query)[0]
                    flt = {"thread_id": thread_id} if scope == "thread" else {"resource_id": resource_id}
                    started = time.perf_counter()
                    memory.vector.search_ids(memory.index.name, q, top_k=4, filter=flt)
                    searches.setdefault(name, []).append((time.perf_counter() - started) * 1000)
            for name, memory in stores.items():
                quality = recall_at_10(memory, truth, work[: args.recall_queries], scope)
                rows.append((scope, name, percentile(recalls[name], 50), percentile(recalls[name], 95),
                             percentile(searches[name], 50), percentile(searches[name], 95), quality))
                print(rows[-1])
        duck.close()
        pg.close()
    finally:
        if server is not None:
            server.stop()

    base = {(r[0]): r for r in rows if r[1].startswith("DuckDB")}
    lines = [
        f"# Semantic recall end to end, HNSW over DuckDB and over PostgreSQL ({size:,} messages)",
        "",
        f"{threads:,} threads of 100 resources, 384-d HashEmbedder, top_k 4, message_range 1; "
        f"{args.calls:,} calls per scope, the two stores alternately; recall@10 over "
        f"{args.recall_queries} queries against an exact scan. Ingest (save_messages, batches of 1,000, "
        f"embedding included): DuckDB {rate['duckdb']:,.0f} msg/s, PostgreSQL {rate['postgres']:,.0f} msg/s. "
        f"PostgreSQL index rebuilt from the database in another store: {rebuild:,.1f} s.",
        "",
        f"One round trip to the server (`SELECT 1` on a pooled connection) in this run: p50 "
        f"{percentile(floor, 50):.3f} ms, p95 {percentile(floor, 95):.3f} ms. Over PostgreSQL a recall makes "
        "three: the thread's owner check, the index's freshness query, the context window; "
        "`search_ids` makes one (the freshness query) before searching in memory.",
        "",
        "| scope | store | recall p50 ms | recall p95 ms | p50 vs DuckDB | search_ids p50 ms | search_ids p95 ms | recall@10 |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for scope, name, p50, p95, s50, s95, quality in rows:
        ratio = p50 / base[scope][2]
        lines.append(f"| {scope} | {name} | {p50:.2f} | {p95:.2f} | {ratio:.2f}x | {s50:.3f} | {s95:.3f} | {quality:.3f} |")
    out = HERE / "results" / "pg_vectors.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
