"""How to scan one resource's vectors exactly among 1M: the plans side by side.

A table of ``--size`` 384-d vectors (HashEmbedder over ``conftest.conversation``'s texts: 10,000
threads of 100 resources, so a resource holds 1 % of the rows, spread over the whole heap) is
copied in once, with every index the variants need; then each variant's statement runs the
same resource-scoped top-10 queries, interleaved call by call, on one connection:

- ``heap``: the expression index on ``metadata -> 'resource_id'``, then the heap rows (the plan
  PgVector used before);
- ``index-only jsonb key``: a btree on a stored ``resource_jkey`` column (``metadata ->
  'resource_id'``) that INCLUDEs ``id`` and the embedding, so the scope's vectors are read from
  the index, contiguous, without heap visits;
- ``index-only text key``: the same on a stored text column (the string ``resource_id``,
  ``COLLATE "C"``): the btree compares bytes instead of JSONB values.

recall@10 against numpy's exact top 10 of the scope; p50/p95 in ms; ``EXPLAIN (ANALYZE,
BUFFERS)`` of one call each.

    python benches/pgvector_scope_scan.py --dsn DSN --build      # once (a few minutes at 1M)
    python benches/pgvector_scope_scan.py --dsn DSN --calls 300

``--store SCHEMA`` measures ``PgVector.search_ids`` itself instead, on the index a
``bench_pg_vectors.py --keep`` run left in SCHEMA, interleaved call by call: its resource
filter counted on the plain btree on ``resource_key``, then read from the index that includes
the vectors (the store's plan); the scope read from that index once and counted as it is
read (the plan before); and the same filter on ``metadata -> 'resource_id'`` (the expression
index and the heap, as before the ``resource_key`` column).

The build also stores ``binary_quantize(embedding)`` (``bits``) with its own btree on
``resource_key`` INCLUDE (id, bits), for the quantized prefilter variants: the scope's top N by
Hamming distance re-ranked with the full vectors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from itertools import islice
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from bench_pg_vectors import QUERIES, RESOURCES, THREADS, _binary_rows  # noqa: E402
from conftest import conversation  # noqa: E402

from threadrecall.embedders import HashEmbedder  # noqa: E402

TABLE = "scope_scan.vectors"
BATCH = 20_000

VARIANTS = {
    "heap": "SELECT id, embedding <#> %(q)s::vector AS d FROM {t} "
            "WHERE (metadata -> 'resource_id') = %(r)s::jsonb ORDER BY d LIMIT 10",
    "index-only jsonb key": "SELECT id, embedding <#> %(q)s::vector AS d FROM {t} "
                            "WHERE resource_jkey = %(r)s::jsonb ORDER BY d LIMIT 10",
    "index-only text key": "SELECT id, embedding <#> %(q)s::vector AS d FROM {t} "
                           "WHERE resource_key = (%(r)s::jsonb #>> '{{}}') ORDER BY d LIMIT 10",
    **{f"bits top {n} re-ranked": "WITH c AS (SELECT id FROM {t} WHERE resource_key = (%(r)s::jsonb #>> '{{}}') "
                                  "ORDER BY bits <~> (SELECT binary_quantize(%(q)s::vector)::bit(384)) "
                                  f"LIMIT {n}) "
                                  "SELECT v.id, v.embedding <#> %(q)s::vector AS d FROM c JOIN {t} v USING (id) "
                                  "ORDER BY d LIMIT 10"
       for n in (100, 200, 400)},
}


def build(conn, size: int) -> None:
    embedder = HashEmbedder(dim=384)
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.execute("DROP SCHEMA IF EXISTS scope_scan CASCADE")
    conn.execute("CREATE SCHEMA scope_scan")
    conn.execute(f"CREATE TABLE {TABLE} (id TEXT PRIMARY KEY, embedding vector(384) NOT NULL, "
                 "metadata JSONB NOT NULL, "
                 "resource_jkey JSONB GENERATED ALWAYS AS (metadata -> 'resource_id') STORED, "
                 "resource_key TEXT COLLATE \"C\" GENERATED ALWAYS AS (CASE WHEN "
                 "jsonb_typeof(metadata -> 'resource_id') = 'string' THEN metadata ->> 'resource_id' END) STORED, "
                 "bits bit(384) GENERATED ALWAYS AS (binary_quantize(embedding)::bit(384)) STORED)")
    rows = conversation(size, threads=THREADS, resources=RESOURCES)
    done, started = 0, time.perf_counter()
    with conn.cursor() as cur:
        while chunk := list(islice(rows, BATCH)):
            vectors = embedder.embed([r["content"] for r in chunk])
            unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
            texts = [json.dumps({"message_id": r["id"], "thread_id": r["thread_id"],
                                 "resource_id": r["resource_id"], "topic": r["metadata"]["topic"]})
                     for r in chunk]
            with cur.copy(f"COPY {TABLE} (id, embedding, metadata) FROM STDIN WITH (FORMAT binary)") as out:
                out.write(_binary_rows([f"{r['id']}#0" for r in chunk], unit.astype(np.float32), texts))
            done += len(chunk)
            print(f"  copied {done:,} in {time.perf_counter() - started:,.0f} s", flush=True)
    for statement in (f"CREATE INDEX ON {TABLE} ((metadata -> 'resource_id'))",
                      f"CREATE INDEX ON {TABLE} ((metadata -> 'thread_id'))",
                      f"CREATE INDEX scope_jsonb ON {TABLE} (resource_jkey) INCLUDE (id, embedding)",
                      f"CREATE INDEX scope_text ON {TABLE} (resource_key) INCLUDE (id, embedding)",
                      f"CREATE INDEX scope_bits ON {TABLE} (resource_key) INCLUDE (id, bits)",
                      f"VACUUM ANALYZE {TABLE}"):
        t = time.perf_counter()
        conn.execute(statement)
        print(f"  {statement[:70]}: {time.perf_counter() - t:,.0f} s", flush=True)


def measure(conn, size: int, calls: int) -> None:
    embedder = HashEmbedder(dim=384)
    qvecs = embedder.embed(QUERIES)
    qvecs = qvecs / np.linalg.norm(qvecs, axis=1, keepdims=True)
    # the same vectors the build copied, for the exact truth
    truth = np.zeros((size, 384), np.float32)
    resource_of = np.zeros(size, np.int32)
    rows, start = conversation(size, threads=THREADS, resources=RESOURCES), 0
    while chunk := list(islice(rows, BATCH)):
        v = embedder.embed([r["content"] for r in chunk])
        truth[start:start + len(chunk)] = v / np.linalg.norm(v, axis=1, keepdims=True)
        resource_of[start:start + len(chunk)] = [int(r["resource_id"][1:]) for r in chunk]
        start += len(chunk)
    rng = np.random.default_rng(5)
    work = [(int(rng.integers(RESOURCES)), int(rng.integers(len(QUERIES)))) for _ in range(calls)]
    for name, text in VARIANTS.items():
        r, q = work[0]
        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + text.format(t=TABLE),
                            {"q": str(qvecs[q].tolist()), "r": json.dumps(f"r{r}")}).fetchall()
        print(f"--- {name}\n" + "\n".join(p[0] for p in plan if "Sort Key" not in p[0]), flush=True)
    times = {name: [] for name in VARIANTS}
    quality = {name: 0.0 for name in VARIANTS}
    for rep in range(2):
        for r, q in (work[:30] if rep == 0 else work):
            params = {"q": str(qvecs[q].tolist()), "r": json.dumps(f"r{r}")}
            members = np.flatnonzero(resource_of == r)
            scores = truth[members] @ qvecs[q]
            tenth = np.sort(scores)[-10]
            for name, text in VARIANTS.items():
                started = time.perf_counter()
                got = conn.execute(text.format(t=TABLE), params).fetchall()
                if rep:
                    times[name].append((time.perf_counter() - started) * 1000)
                    rows = [int(i.split("#")[0][1:]) for i, _ in got]
                    quality[name] += sum(1 for i in rows if truth[i] @ qvecs[q] >= tenth - 1e-5) / 10
    print(f"load average {os.getloadavg()}")
    print("| plan | p50 ms | p95 ms | recall@10 |\n|---|---:|---:|---:|")
    for name, values in times.items():
        print(f"| {name} | {np.percentile(values, 50):.2f} | {np.percentile(values, 95):.2f} "
              f"| {quality[name] / calls:.3f} |")
    for index in ("scope_jsonb", "scope_text", "scope_bits", "vectors_pkey"):
        (pretty,) = conn.execute("SELECT pg_size_pretty(pg_relation_size(%s))", [f"scope_scan.{index}"]).fetchone()
        print(f"size of {index}: {pretty}")
    (pretty,) = conn.execute("SELECT pg_size_pretty(pg_relation_size(%s))", [TABLE]).fetchone()
    print(f"size of the heap: {pretty}")


def measure_store(dsn: str, schema: str, calls: int) -> None:
    import psycopg

    from threadrecall.storage import PostgresStorage
    from threadrecall.vector import PgVector, pgvector

    pg = PostgresStorage(dsn, schema=schema)
    # Each plan: the text columns the filter may compare, and whether a resource's scope is
    # counted on the plain btree before its vectors are read (else counted as it is read).
    plans = {"counted on the plain btree": (pgvector.TEXT_COLUMNS, pgvector._counted),
             "scope read and counted at once": (pgvector.TEXT_COLUMNS, lambda f: False),
             "metadata expression (heap)": ({}, lambda f: False)}
    stores = {label: PgVector(pg) for label in plans}

    @contextlib.contextmanager
    def plan(label):
        keep = pgvector.TEXT_COLUMNS, pgvector._counted
        pgvector.TEXT_COLUMNS, pgvector._counted = plans[label]
        try:
            yield stores[label]
        finally:
            pgvector.TEXT_COLUMNS, pgvector._counted = keep

    (name,) = stores[next(iter(plans))].list_indexes()
    embedder = HashEmbedder(dim=384)
    qvecs = embedder.embed(QUERIES)
    count = stores[next(iter(plans))].describe_index(name).count
    rng = np.random.default_rng(9)
    work = [(int(rng.integers(RESOURCES)), int(rng.integers(len(QUERIES)))) for _ in range(calls)]
    times: dict[str, list[float]] = {label: [] for label in plans}
    same = 0
    labels = list(plans)
    for k, (r, q) in enumerate(work):
        found = {}
        # the order rotates call by call: the first plan to read a resource may find its pages
        # outside shared_buffers, the next ones inside
        for label in labels[k % 3:] + labels[:k % 3]:
            with plan(label) as store:
                started = time.perf_counter()
                found[label] = store.search_ids(name, qvecs[q], top_k=10, filter={"resource_id": f"r{r}"})
                elapsed = (time.perf_counter() - started) * 1000
            if k >= 20:
                times[label].append(elapsed)
        same += all([i for i, _ in f] == [i for i, _ in found[labels[0]]] for f in found.values())
    # The server's CPU time per search: each plan's statement on one connection, its backend's
    # utime + stime from /proc (the same machine), summed over the calls.
    ticks = {label: 0 for label in plans}
    with psycopg.connect(dsn, autocommit=True) as conn:
        (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone()
        for k, (r, q) in enumerate(work):
            for label in labels[k % 3:] + labels[:k % 3]:
                with plan(label) as store:
                    statement, params = store.search_sql(name, qvecs[q], top_k=10, filter={"resource_id": f"r{r}"})
                before = _cpu_ticks(pid)
                conn.execute(statement, params).fetchall()
                if k >= 20:
                    ticks[label] += _cpu_ticks(pid) - before
        r, q = work[0]
        for label in plans:
            with plan(label) as store:
                statement, params = store.search_sql(name, qvecs[q], top_k=10, filter={"resource_id": f"r{r}"})
            rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement, params).fetchall()
            print(f"--- {label}\n" + "\n".join(p[0] for p in rows if "Sort Key" not in p[0] and "Order By" not in p[0]))
    hz = os.sysconf("SC_CLK_TCK")
    print(f"{count:,} vectors, {calls} calls, load average {os.getloadavg()}")
    print(f"same top 10 from every plan in {same} of {calls} calls")
    print("| plan | search_ids p50 ms | p95 ms | server CPU ms per search |\n|---|---:|---:|---:|")
    for label, values in times.items():
        print(f"| {label} | {np.percentile(values, 50):.2f} | {np.percentile(values, 95):.2f} "
              f"| {ticks[label] * 1000 / hz / len(values):.2f} |")
    pg.close()

def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--build", action="store_true")
    parser.add_argument("--store", metavar="SCHEMA", help="measure PgVector in this schema instead")
    args = parser.parse_args()
    if args.store:
        measure_store(args.dsn, args.store, args.calls)
        return
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        if args.build:
            conn.execute("SET maintenance_work_mem = '1GB'")
            build(conn, args.size)
        else:
            measure(conn, args.size, args.calls)


if __name__ == "__main__":
    main()
