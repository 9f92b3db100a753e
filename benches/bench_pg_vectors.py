"""Side by side: semantic recall end to end on the three vector stores, next to pgvector queried
directly with SQL.

One run, one machine, one PostgreSQL server. The same ``--size`` messages
(``benches/conftest.conversation``: 10,000 threads of 100 resources), embedded once with the
384-d ``HashEmbedder``, are loaded into

- DuckDB + HNSW: a DuckDB file and ``HnswVectorStore`` over it (index file beside it);
- PostgreSQL + HNSW cache: one PostgreSQL schema and ``HnswVectorStore`` over it (its vector
  rows there, the graph of each process a cache of them, rebuilt here from the rows as another
  process would and timed);
- PostgreSQL + PgVector: the same schema's messages and ``PgVector`` (pgvector's HNSW,
  ``m=16, ef_construction=64``).

Loading is in bulk, as an import would be: messages through each storage's ``save_messages``
and vectors through the store's own write path (``MessageIndex.write``: ids ``<message>#0``,
``vector_metadata``), batches of 10,000; PgVector's rows are copied in with ``COPY`` before its
HNSW index is built (``maintenance_work_mem``, parallel maintenance workers), as pgvector
advises. Load times are reported; they are not ``Memory.save_messages`` throughput.

Latency: ``Memory.recall(thread, resource_id=..., per_page=0, vector_search_string=q)`` with
``top_k`` 4 and ``message_range`` 1 in thread and resource scope, the three stores called in
turn, ``--calls`` calls each after a warm-up (query embeddings warmed): the vector search, the
context expansion and the messages read back. ``search_ids`` (top 10) alone is timed the same
way, and so is the one statement a hand-written pgvector query would be (``SELECT id FROM
<table> WHERE metadata -> 'thread_id' = $1 ORDER BY embedding <#> $2 LIMIT 10`` with
``hnsw.iterative_scan = relaxed_order`` and ``hnsw.ef_search = 100``) on one open connection.
Recall@10 of each (the store's ``search_ids`` top 10, or the direct SQL's) against an exact
numpy scan of the same vectors in the scope, over ``--recall-queries`` of the calls (a hit
counts when its exact score reaches the exact 10th score, so ties are not misses).

    python benches/bench_pg_vectors.py --size 100000
    python benches/bench_pg_vectors.py --size 1000000
    python benches/bench_pg_vectors.py --size 100000 --dim 128 --topic billing   # other data, a filter
    python benches/bench_pg_vectors.py --report     # results/pg_vectors.md from every size run

Without ``THREADRECALL_TEST_PG_DSN`` a throwaway server is started (``tests/postgres_server``).
Each size's figures go to ``results/pg_vectors_<size>.json``; ``--report`` writes
``results/pg_vectors.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from itertools import islice
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from conftest import conversation  # noqa: E402

from threadrecall import Memory  # noqa: E402
from threadrecall.embedders import HashEmbedder  # noqa: E402
from threadrecall.incoming import incoming_message  # noqa: E402
from threadrecall.semantic import MessageIndex, vector_metadata  # noqa: E402
from threadrecall.storage import DuckDBStorage, PostgresStorage  # noqa: E402
from threadrecall.types import Thread, dumps  # noqa: E402
from threadrecall.vector import HnswVectorStore, PgVector  # noqa: E402

THREADS = 10_000
RESOURCES = 100
DIM = 384  # of the HashEmbedder, unless --dim
BATCH = 10_000
QUERIES = [f"what did we say about {t} and item {i}" for t in ("billing", "support", "travel", "books", "food")
           for i in range(0, 1000, 25)]
OPTIONS = {"semantic_recall": {"top_k": 4, "message_range": 1}}
STORES = ("DuckDB + HNSW", "PostgreSQL + HNSW cache", "PostgreSQL + PgVector")
# The server the run starts when none is given: room to build pgvector's HNSW index in memory.
SERVER = {"shared_buffers": "2GB", "maintenance_work_mem": "8GB", "max_parallel_maintenance_workers": "2",
          "effective_cache_size": "8GB", "work_mem": "64MB"}
RESULTS = HERE / "results"


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def calls(threads: int, n: int, seed: int) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    return [(f"t{t}", f"r{t % RESOURCES}", rng.choice(QUERIES)) for t in (rng.randrange(threads) for _ in range(n))]


def load(size: int, threads: int, folder: Path, dsn: str, schema: str, stores: list[str],
         ef_construction: int | None, pgvector_hnsw: bool = True, dim: int = DIM) -> dict[str, float]:
    """Every store gets the same messages and vectors; returns the seconds each part took."""
    import psycopg

    took: dict[str, float] = {}
    embedder = HashEmbedder(dim=dim)
    with_duck = STORES[0] in stores
    with_cache = STORES[1] in stores  # else the messages only, without the cache's vector rows
    graph = {} if ef_construction is None else {"ef_construction": ef_construction}
    duck = DuckDBStorage(folder / "bench.duckdb") if with_duck else None
    pg = PostgresStorage(dsn, schema=schema)
    duck_vectors = HnswVectorStore(duck, **graph) if with_duck else None
    pg_vectors, pgvector = HnswVectorStore(pg, **graph), PgVector(pg)
    duck_index = MessageIndex(duck_vectors, embedder) if with_duck else None
    pg_index = MessageIndex(pg_vectors, embedder)
    pgvector_index = MessageIndex(pgvector, embedder)
    for index in (duck_index, pg_index, pgvector_index):
        if index is not None:
            index.ensure()
    table = pgvector._info(pgvector_index.name).table
    with pg.transaction() as conn:  # rows first, the HNSW graph after, as pgvector advises
        (hnsw_name,) = conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s "
                                    "AND indexdef LIKE '%%USING hnsw%%'", [schema]).fetchone()
        conn.execute(f'DROP INDEX "{schema}"."{hnsw_name}"')
    thread_list = [Thread(f"t{t}", f"r{t % RESOURCES}") for t in range(threads)]
    by_id = {t.id: t for t in thread_list}
    for storage in (duck, pg):
        if storage is not None:
            storage.save_threads(thread_list)
    pg_label = "postgres_hnsw" if with_cache else "postgres_messages"
    took.update(embed=0.0, **({"duckdb": 0.0} if with_duck else {}), **{pg_label: 0.0}, pgvector_copy=0.0)
    truth = np.zeros((size, dim), np.float32)
    rows = conversation(size, threads=threads, resources=RESOURCES)
    done = 0
    copy = psycopg.sql.SQL("COPY {} (id, embedding, metadata) FROM STDIN WITH (FORMAT binary)").format(table)
    while chunk := list(islice(rows, BATCH)):
        messages = [incoming_message(r) for r in chunk]
        started = time.perf_counter()
        embedded = pg_index.prepare(messages)
        took["embed"] += time.perf_counter() - started
        unit = embedded.vectors / np.linalg.norm(embedded.vectors, axis=1, keepdims=True)
        truth[done:done + len(messages)] = unit
        done += len(messages)
        for label, storage, index in (("duckdb", duck, duck_index), (pg_label, pg, pg_index)):
            if storage is None:
                continue
            started = time.perf_counter()
            with storage.transaction():
                stored = storage.save_messages(messages)
                if storage is duck or with_cache:
                    index.write(embedded, {m.id: m for m in stored}, by_id)
            took[label] += time.perf_counter() - started
        started = time.perf_counter()
        with pg.connection() as conn, conn.transaction(), conn.cursor().copy(copy) as out:
            out.write(_binary_rows([f"{m.id}#0" for m in messages], unit,
                                   [dumps(vector_metadata(m, by_id[m.thread_id])) for m in messages]))
        took["pgvector_copy"] += time.perf_counter() - started
        print(f"  loaded {done:,} / {size:,}: " + ", ".join(f"{k} {v:,.0f} s" for k, v in took.items()), flush=True)
    started = time.perf_counter()
    with pg.connection() as conn:
        conn.execute("SET maintenance_work_mem = '8GB'")  # the whole graph of 1M x 384 fits
        conn.execute("SET max_parallel_maintenance_workers = 2")
        if pgvector_hnsw:
            conn.execute(f'CREATE INDEX "{hnsw_name}" ON {table.as_string(conn)} USING hnsw (embedding vector_ip_ops) '
                         f"WITH (m = {pgvector.m}, ef_construction = {pgvector.ef_construction})")
        conn.execute(f"VACUUM ANALYZE {table.as_string(conn)}")
        conn.execute(f'VACUUM ANALYZE "{schema}".hnsw_rows')
    took["pgvector_hnsw_build" if pgvector_hnsw else "pgvector_vacuum"] = time.perf_counter() - started
    if with_duck:
        started = time.perf_counter()
        duck_vectors.link()
        duck_vectors.close()  # writes the index file
        took["duckdb_link_and_save"] = time.perf_counter() - started
        duck.close()
    np.save(folder / "truth.npy", truth)
    pgvector.close()
    pg_vectors.close()
    pg.close()
    return took


def _binary_rows(ids: list[str], vectors: np.ndarray, texts: list[str]) -> bytes:
    """Rows of (text, vector, jsonb) in COPY's binary format: pgvector's binary vector is
    int16 dimension, int16 0, then big-endian float32 values; JSONB's is a version byte and
    the text."""
    dim = vectors.shape[1]
    head = struct.pack(">hh", dim, 0)
    big = np.ascontiguousarray(vectors, dtype=">f4")
    parts = [b"PGCOPY\n\xff\r\n\x00", struct.pack(">ii", 0, 0)]
    for i, vector, text in zip(ids, big, texts):
        key, meta = i.encode(), b"\x01" + text.encode()
        parts.append(struct.pack(">hi", 3, len(key)) + key + struct.pack(">i", 4 + 4 * dim) + head
                     + vector.tobytes() + struct.pack(">i", len(meta)) + meta)
    parts.append(struct.pack(">h", -1))
    return b"".join(parts)


def recall_at_10(search, truth, members_of, work, scope: str, embed) -> float:
    """Over the calls whose scope holds any vector (with ``--topic``, a thread may hold none)."""
    total, counted = 0.0, 0
    for thread_id, resource_id, query in work:
        q = embed(query)
        key = thread_id if scope == "thread" else resource_id
        if key not in members_of:
            continue
        counted += 1
        rows = members_of[key]
        scores = truth[rows] @ (q / np.linalg.norm(q))
        k = min(10, len(scores))
        tenth = np.sort(scores)[-k]
        score_of = dict(zip(rows, scores))
        got = search(key, q)
        total += sum(1 for row in got if score_of.get(row, -2.0) >= tenth - 1e-5) / k
    return total / counted


def measure(size: int, threads: int, folder: Path, dsn: str, schema: str, n_calls: int,
            n_recall: int, chosen: list[str], ef_construction: int | None,
            loaded: Callable[[], None] = lambda: None, while_linking: bool = False,
            dim: int = DIM, topic: str | None = None) -> dict:
    """Time each store; ``loaded`` returns once the load is complete (the HNSW stores may open,
    and the PostgreSQL cache be rebuilt from its rows, while pgvector's index is still built).
    ``while_linking``: time the HNSW stores as their first search left them (a rebuilt cache's
    graph still linking in the background), without waiting for the link. ``topic``: every
    call also filters on the messages' ``topic`` (semantic recall's ``filter``)."""
    import psycopg

    embedder = HashEmbedder(dim=dim)
    also = {"topic": topic} if topic else {}
    graph = {} if ef_construction is None else {"ef_construction": ef_construction}
    pg = PostgresStorage(dsn, schema=schema)
    stores = {}
    if STORES[0] in chosen:
        duck_storage = DuckDBStorage(folder / "bench.duckdb")
        stores[STORES[0]] = Memory(storage=duck_storage, vector=HnswVectorStore(duck_storage, **graph),
                                   embedder=embedder, options=OPTIONS)
    if STORES[1] in chosen:
        stores[STORES[1]] = Memory(storage=pg, vector=HnswVectorStore(pg, **graph), embedder=embedder,
                                   options=OPTIONS)
    pgv = Memory(storage=pg, vector=PgVector(pg), embedder=embedder, options=OPTIONS)
    if STORES[2] in chosen:
        stores[STORES[2]] = pgv
    opened, answered = {}, {}
    for name, memory in stores.items():  # the first search loads the index (rebuilds it over PostgreSQL)
        if name == STORES[2]:
            loaded()
        started = time.perf_counter()
        memory.recall("t0", resource_id="r0", per_page=0, vector_search_string=QUERIES[0])
        answered[name] = time.perf_counter() - started
        if isinstance(memory.vector, HnswVectorStore) and not while_linking:
            memory.vector.link()
        opened[name] = time.perf_counter() - started
        print(f"  {name}: first answer {answered[name]:,.1f} s, linked {opened[name]:,.1f} s", flush=True)
    embedder.embed(QUERIES)
    qvec = {q: pgv.index.embed_query(q)[0] for q in QUERIES}

    direct = psycopg.connect(dsn, autocommit=True)
    direct.execute("SET hnsw.iterative_scan = relaxed_order")
    direct.execute(f"SET hnsw.ef_search = {pgv.vector.ef_search}")
    table = pgv.vector._info(pgv.index.name).table.as_string(direct)
    floor = []
    for _ in range(n_calls):
        started = time.perf_counter()
        direct.execute("SELECT 1").fetchall()
        floor.append((time.perf_counter() - started) * 1000)

    truth = np.load(folder / "truth.npy", mmap_mode="r")
    truth = np.ascontiguousarray(truth)
    row_of = {f"m{i}#0": i for i in range(size)}
    members = {}
    rows = conversation(size, threads=threads, resources=RESOURCES)
    for i, row in enumerate(rows):
        if topic and row["metadata"]["topic"] != topic:
            continue
        members.setdefault(row["thread_id"], []).append(i)
        members.setdefault(row["resource_id"], []).append(i)
    members = {k: np.asarray(v) for k, v in members.items()}

    result = {"size": size, "threads": threads, "calls": n_calls, "recall_queries": n_recall,
              "ef_construction": ef_construction or HnswVectorStore.__init__.__kwdefaults__["ef_construction"],
              "dim": dim, "topic": topic,
              "stores": list(stores),
              "opened_s": opened, "answered_s": answered, "select1_p50": percentile(floor, 50), "select1_p95": percentile(floor, 95),
              "server": {name: direct.execute(f"SHOW {name}").fetchone()[0]
                         for name in ("shared_buffers", "effective_cache_size")},
              "rows": []}
    def timed(suffix: str) -> None:
        for scope in ("thread", "resource"):
            key = f"{scope}_id"
            work = calls(threads, n_calls, seed=11 if scope == "thread" else 12)
            config = {"semantic_recall": {"scope": scope, **({"filter": also} if also else {})}}
            statement = (f"SELECT id FROM {table} WHERE metadata -> '{key}' = %s::jsonb "
                         + ("AND metadata -> 'topic' = %s::jsonb " if topic else "")
                         + "ORDER BY embedding <#> %s::vector LIMIT 10")

            def sql(value, q, statement=statement):
                params = [json.dumps(value), *([json.dumps(topic)] if topic else []), str(q.tolist())]
                return [r[0] for r in direct.execute(statement, params, prepare=False)]

            times: dict[str, list[float]] = {}
            for rep in range(2):  # a warm-up round, then the timed one
                for thread_id, resource_id, query in (work[:50] if rep == 0 else work):
                    value = thread_id if scope == "thread" else resource_id
                    for name, memory in stores.items():
                        started = time.perf_counter()
                        memory.recall(thread_id, resource_id=resource_id, per_page=0, vector_search_string=query,
                                      thread_config=config)
                        recall_ms = (time.perf_counter() - started) * 1000
                        started = time.perf_counter()
                        memory.vector.search_ids(memory.index.name, qvec[query], top_k=10,
                                                 filter={key: value, **also})
                        search_ms = (time.perf_counter() - started) * 1000
                        if rep:
                            times.setdefault(f"{name}|recall", []).append(recall_ms)
                            times.setdefault(f"{name}|search", []).append(search_ms)
                    started = time.perf_counter()
                    sql(value, qvec[query])
                    if rep:
                        times.setdefault("direct|sql", []).append((time.perf_counter() - started) * 1000)
            quality_work = work[:n_recall]
            for name, memory in stores.items():
                def search(value, q, memory=memory):
                    hits = memory.vector.search_ids(memory.index.name, q, top_k=10, filter={key: value, **also})
                    return [row_of[i] for i, _ in hits]
                quality = recall_at_10(search, truth, members, quality_work, scope, lambda s: qvec[s])
                row = {"scope": scope, "store": name + suffix, "quality": quality,
                       "recall_p50": percentile(times[f"{name}|recall"], 50),
                       "recall_p95": percentile(times[f"{name}|recall"], 95),
                       "search_p50": percentile(times[f"{name}|search"], 50),
                       "search_p95": percentile(times[f"{name}|search"], 95)}
                result["rows"].append(row)
                print("  ", row, flush=True)
            quality = recall_at_10(lambda value, q: [row_of[i] for i in sql(value, q)], truth, members,
                                   quality_work, scope, lambda s: qvec[s])
            row = {"scope": scope, "store": "pgvector, direct SQL", "quality": quality,
                   "search_p50": percentile(times["direct|sql"], 50), "search_p95": percentile(times["direct|sql"], 95)}
            result["rows"].append(row)
            print("  ", row, flush=True)

    def waiting() -> dict[str, int]:
        return {name: m.vector._loaded[m.index.name].index.pending
                for name, m in stores.items() if isinstance(m.vector, HnswVectorStore)}

    if while_linking:
        result["waiting"] = {"before": waiting()}
    timed(" (graph linking)" if while_linking else "")
    if while_linking:
        result["waiting"]["after"] = waiting()
    direct.close()
    for memory in {*stores.values(), pgv}:
        memory.close()
    return result


def report() -> None:
    runs = sorted((json.loads(p.read_text()) for p in RESULTS.glob("pg_vectors_*.json")),
                  key=lambda r: (r["size"], r["date"]))
    lines = [
        "# Semantic recall on the three vector stores, and pgvector queried directly",
        "",
        "`python benches/bench_pg_vectors.py --size N` (see its docstring for what is timed). "
        "10,000 threads of 100 resources, 384-d HashEmbedder, `top_k` 4, `message_range` 1; the three stores "
        "called in turn, the same calls for each. recall@10 against an exact scan of the scope, next to every "
        "latency. Latencies in ms. Compare within a table only: each size is one run on a shared 2-core "
        "machine, with the load named under it.",
    ]
    for run in runs:
        if "opened_beside_load" in run:  # the stores a run measured: those of its rows
            run.setdefault("stores", [s for s in STORES if any(r["store"] == s for r in run["rows"])])
        lines += ["", f"## {run['size']:,} messages", "",
                  f"Run {run['date']}; load average before / after: {run['load_before']} / {run['load_after']}. "
                  f"{run['threads']:,} threads ({run['size'] // run['threads']} messages each), 100 resources "
                  f"({run['size'] // 100:,} each); {run['calls']:,} calls per scope and store, recall@10 over "
                  f"{run['recall_queries']} of them. One round trip (`SELECT 1`): p50 {run['select1_p50']:.3f} ms, "
                  f"p95 {run['select1_p95']:.3f} ms."
                  + (" Server: " + ", ".join(f"{k} {v}" for k, v in run["server"].items()) + "."
                     if "server" in run else "")
                  + (f" Vectors of {run['dim']} dimensions." if run.get("dim", DIM) != DIM else "")
                  + (f" Every call also filters on `{{\"topic\": \"{run['topic']}\"}}` (semantic recall's "
                     "`filter`; a fifth of each scope)." if run.get("topic") else "")
                  + (f" Stores measured in this run: {', '.join(run['stores'])}." if "stores" in run else "")
                  + (" The HNSW stores built with "
                     f"m 16, ef_construction {run['ef_construction']} (pgvector's: m 16, ef_construction 64)."
                     if STORES[1] in run.get("stores", ()) else "")
                  + (f" Code measured: {run['code']}." if "code" in run else "")
                  + (" pgvector's HNSW index was not built in this run: every scoped search here is below "
                     "PgVector's exact threshold, and the direct SQL ran as an exact scan."
                     if run.get("pgvector_hnsw") is False else "")
                  + (" The PostgreSQL cache was rebuilt while pgvector's index was still being built, both "
                     "on the same cores." if run.get("opened_beside_load") and STORES[1] in run["stores"] else ""),
                  "",
                  "| scope | store | recall() p50 | recall() p95 | search_ids / SQL p50 | search_ids / SQL p95 "
                  "| recall@10 |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for r in run["rows"]:
            end = (f"{r['recall_p50']:.2f} | {r['recall_p95']:.2f}" if "recall_p50" in r else "— | —")
            lines.append(f"| {r['scope']} | {r['store']} | {end} | {r['search_p50']:.2f} | {r['search_p95']:.2f} "
                         f"| {r['quality']:.3f} |")
        load = run["load_s"]
        first = ("First search of each store in a new process (index file loaded, or the PostgreSQL cache "
                 "rebuilt from its rows, then linked): " +
                 ", ".join(f"{k} {v:,.1f} s" for k, v in run["opened_s"].items()) + ".")
        if "answered_s" in run:
            first = ("First search of each store in a new process (index file loaded, or the PostgreSQL cache "
                     "rebuilt from its rows): answered after " +
                     ", ".join(f"{k} {v:,.1f} s" for k, v in run["answered_s"].items()) +
                     ("" if "waiting" in run else "; graph linked after " +
                      ", ".join(f"{k} {v:,.1f} s" for k, v in run["opened_s"].items())) + ".")
        if "waiting" in run:
            first += (" Timed without waiting for the link: vectors still waiting to be linked when the timing "
                      "began / ended (searched exactly meanwhile): " +
                      ", ".join(f"{k} {v:,} / {run['waiting']['after'][k]:,}" for k, v in run["waiting"]["before"].items())
                      + ".")
        lines += ["", "Load (seconds): " + ", ".join(f"{k} {v:,.0f}" for k, v in load.items()) + ". " + first]
    notes = RESULTS / "pg_vectors_notes.md"  # written by hand: what the tables alone do not say
    if notes.exists():
        lines += ["", notes.read_text().rstrip("\n")]
    out = RESULTS / "pg_vectors.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=1_000)
    parser.add_argument("--recall-queries", type=int, default=300)
    parser.add_argument("--report", action="store_true", help="only write results/pg_vectors.md")
    parser.add_argument("--load-only", action="store_true",
                        help="load, keep the stores and print their folder (needs THREADRECALL_TEST_PG_DSN)")
    parser.add_argument("--measure", type=Path, metavar="FOLDER", help="measure the stores a --load-only run kept")
    parser.add_argument("--stores", default=",".join(STORES),
                        help="comma-separated: which stores to load (PgVector always) or measure")
    parser.add_argument("--keep", action="store_true",
                        help="keep the stores a --measure run measured (to measure them again)")
    parser.add_argument("--ef-construction", type=int, default=None,
                        help="ef_construction of the HNSW stores (default: HnswVectorStore's own)")
    parser.add_argument("--no-pgvector-hnsw", action="store_true",
                        help="skip pgvector's HNSW build (scoped searches below its exact threshold do not use it; "
                             "the direct SQL then scans exactly)")
    parser.add_argument("--while-linking", action="store_true",
                        help="time the HNSW stores right after their first search, a rebuilt cache still linking "
                             "in the background (not waiting for the link)")
    parser.add_argument("--dim", type=int, default=DIM, help="the HashEmbedder's dimension (a load's)")
    parser.add_argument("--topic", default=None,
                        help="also filter every call on the messages' topic (billing, support, travel, books, food)")
    parser.add_argument("--tag", default="", help="a suffix for this run's results file (e.g. the code measured)")
    parser.add_argument("--serve", action="store_true",
                        help="start a server with this bench's settings, print its DSN, run until interrupted")
    args = parser.parse_args()
    if args.report:
        report()
        return
    if args.serve:
        from postgres_server import PostgresServer

        import signal

        signal.signal(signal.SIGTERM, signal.default_int_handler)  # kill <pid> stops the server too
        with PostgresServer(settings=SERVER) as server:
            print(f"THREADRECALL_TEST_PG_DSN={server.dsn}", flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                return
    server = None
    dsn = os.environ.get("THREADRECALL_TEST_PG_DSN")
    if (args.load_only or args.measure) and not dsn:
        parser.error("--load-only and --measure need a server that outlives the run: THREADRECALL_TEST_PG_DSN")
    if not dsn:
        from postgres_server import PostgresServer

        server = PostgresServer(settings=SERVER)
        server.start()
        dsn = server.dsn
    beside = False
    if args.measure:
        folder = args.measure
        beside = not (folder / "state.json").exists()  # started while that load still runs
        state = json.loads((folder / ("loading.json" if beside else "state.json")).read_text())
    else:
        size = args.size
        state = {"size": size, "threads": min(THREADS, size // 10), "schema": f"bench_{uuid.uuid4().hex[:12]}",
                 "stores": [s for s in STORES if s in args.stores.split(",") or s == STORES[2]],
                 "ef_construction": args.ef_construction, "pgvector_hnsw": not args.no_pgvector_hnsw,
                 "dim": args.dim}
        folder = Path(tempfile.mkdtemp(prefix="bench_pg_vectors_"))
    chosen = [s for s in state.get("stores", list(STORES)) if s in args.stores.split(",")]
    # The stores outlive a run that measures only some of them (another measures the rest).
    started_at = f"{os.getloadavg()[0]:.1f}"  # a --measure run's own load, not its load's
    keep = args.load_only or args.keep or (args.measure and set(chosen) < set(state.get("stores", STORES)))
    try:
        if not args.measure:
            state["load_before"] = f"{os.getloadavg()[0]:.1f}"
            print(f"loading {state['size']:,} messages into {folder} and schema {state['schema']}", flush=True)
            (folder / "loading.json").write_text(json.dumps(state))
            state["load_s"] = load(state["size"], state["threads"], folder, dsn, state["schema"],
                                   state["stores"], state["ef_construction"], state["pgvector_hnsw"],
                                   state["dim"])
            print(f"  load: {state['load_s']}", flush=True)
            (folder / "state.json").write_text(json.dumps(state))
        if args.load_only:
            print(f"kept: --measure {folder}")
            return

        def loaded() -> None:
            while not (folder / "state.json").exists():
                time.sleep(5)

        result = measure(state["size"], state["threads"], folder, dsn, state["schema"], args.calls,
                         args.recall_queries, chosen, state.get("ef_construction"), loaded, args.while_linking,
                         state.get("dim", DIM), args.topic)
        state = json.loads((folder / "state.json").read_text())
        result["opened_beside_load"] = beside
        result["pgvector_hnsw"] = state.get("pgvector_hnsw", True)
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
            if server is not None:
                server.stop()
            else:
                import psycopg

                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{state["schema"]}" CASCADE')
    result.update(load_s=state["load_s"], date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                  load_before=started_at if args.measure else state["load_before"],
                  load_after=f"{os.getloadavg()[0]:.1f}")
    part = "" if set(result["stores"]) >= set(state["stores"]) else "_" + "_".join(
        s.split(" + ")[-1].lower().replace(" ", "_") for s in result["stores"])  # some of the stores
    part += "" if result["pgvector_hnsw"] else "_no_pgvector_hnsw"
    part += f"_{args.tag}" if args.tag else ""
    (RESULTS / f"pg_vectors_{state['size']}{part}.json").write_text(json.dumps(result, indent=1) + "\n")
    report()


if __name__ == "__main__":
    main()
