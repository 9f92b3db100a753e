"""Scoped pgvector searches on a table partitioned by a hash of resource_id, next to the one
table of ``PgVector``, in one run, over the rows a ``bench_pg_vectors.py --load-only`` run kept.

(A) that run's pgvector rows copied into P hash partitions of ``metadata -> 'resource_id'``,
each with its HNSW index (m 16, ef_construction 64) and the scope btrees: thread- and
resource-scoped top 10, as an exact scan of the scope and as pgvector's iterative HNSW scan.
(B) one partition as it would be at 1,000,000 messages over 64 partitions (the 10,000 rows of
one resource and half of another's, 15,000 in all): the resource-scoped search in it.
Recall@10 against the exact order of the scope, over the first 60 timed searches.

    THREADRECALL_TEST_PG_DSN=... python benches/pgvector_partitions.py FOLDER [P] A B
"""
import json
import os
import random
import sys
import time
sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]
import numpy as np, psycopg
from threadrecall.embedders import HashEmbedder
from conftest import conversation
dsn = os.environ["THREADRECALL_TEST_PG_DSN"]
schema = json.load(open(os.path.join(sys.argv[1], "state.json")))["schema"]
P = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 64
emb = HashEmbedder(dim=384)
QUERIES = [f"what did we say about {t} and item {i}" for t in ("billing", "support", "travel", "books", "food") for i in range(0, 1000, 25)]
qv = {q: (lambda v: v / np.linalg.norm(v))(emb.embed([q])[0]) for q in QUERIES}
c = psycopg.connect(dsn, autocommit=True)
S = f'"{schema}"'
c.execute("SET maintenance_work_mem = '2GB'")
def build_partitioned(name, source_sql):
    c.execute(f"DROP TABLE IF EXISTS {S}.{name}")
    c.execute(f"CREATE TABLE {S}.{name} (id text, embedding vector(384) NOT NULL, metadata jsonb NOT NULL) PARTITION BY HASH ((metadata -> 'resource_id'))")
    for k in range(P):
        c.execute(f"CREATE TABLE {S}.{name}_{k} PARTITION OF {S}.{name} FOR VALUES WITH (MODULUS {P}, REMAINDER {k})")
    c.execute(f"INSERT INTO {S}.{name} {source_sql}")
    return index(name)
def plain_table(name, source_sql):
    c.execute(f"DROP TABLE IF EXISTS {S}.{name}")
    c.execute(f"CREATE TABLE {S}.{name} AS {source_sql}")
    return index(name)
def index(name):
    """Build the table's HNSW and metadata indexes; the HNSW build's seconds."""
    s = time.perf_counter()
    c.execute(f"CREATE INDEX ON {S}.{name} USING hnsw (embedding vector_ip_ops) WITH (m = 16, ef_construction = 64)")
    built = time.perf_counter() - s
    for key in ("thread_id", "resource_id"):
        c.execute(f"CREATE INDEX ON {S}.{name} ((metadata -> '{key}'))")
    c.execute(f"VACUUM ANALYZE {S}.{name}")
    return built
EXACT = ("WITH scope AS MATERIALIZED (SELECT id, embedding <#> %(q)s::vector AS d FROM {t} WHERE metadata -> '{k}' = %(v)s::jsonb LIMIT 20000) "
         "SELECT id FROM scope ORDER BY d LIMIT 10")
HNSW = "SELECT id FROM {t} WHERE metadata -> '{k}' = %(v)s::jsonb ORDER BY embedding <#> %(q)s::vector LIMIT 10"
def measure(label, table, key, values, n=150):
    out = {}
    for plan, text in (("exact", EXACT), ("hnsw iterative", HNSW)):
        st = text.format(t=f"{S}.{table}", k=key)
        rng = random.Random(5)
        ts, rec = [], []
        c.execute("SET hnsw.iterative_scan = relaxed_order"); c.execute("SET hnsw.ef_search = 100")
        for i in range(n + 20):
            v = rng.choice(values); q = qv[rng.choice(QUERIES)]
            p = {"v": json.dumps(v), "q": str(q.tolist())}
            s = time.perf_counter(); got = [r[0] for r in c.execute(st, p).fetchall()]; d = (time.perf_counter() - s) * 1000
            if i >= 20:
                ts.append(d)
                if i < 20 + 60:
                    c.execute("SET enable_indexscan = off")
                    exact = c.execute(f"SELECT embedding <#> %(q)s::vector FROM {S}.{table} WHERE metadata -> '{key}' = %(v)s::jsonb ORDER BY 1 LIMIT 10", p).fetchall()
                    c.execute("RESET enable_indexscan")
                    tenth = exact[-1][0]
                    ds = dict(c.execute(f"SELECT id, embedding <#> %(q)s::vector FROM {S}.{table} WHERE id = ANY(%(ids)s)", {**p, "ids": got}).fetchall())
                    rec.append(sum(1 for g in got if ds[g] <= tenth + 1e-6) / len(exact))
        print(f"| {label} | {key.split('_')[0]} | {plan} | {np.percentile(ts, 50):.2f} | {np.percentile(ts, 95):.2f} | {np.mean(rec):.3f} |", flush=True)
print("load", os.getloadavg())
src = f"SELECT id, embedding, metadata FROM {S}.pgvector_1"  # the one index of a bench run
if "A" in sys.argv:
    bp = build_partitioned("part_a", src)
    print(f"(A) 100k rows, {P} partitions: HNSW build {bp:.0f} s")
    threads = [f"t{i}" for i in range(10000)]; resources = [f"r{i}" for i in range(100)]
    print("| table | scope | plan | p50 ms | p95 ms | recall@10 |\n|---|---|---|---:|---:|---:|")
    for label, table in (("one table", "pgvector_1"), (f"{P} partitions", "part_a")):
        measure(label, table, "thread_id", threads)
        measure(label, table, "resource_id", resources)
if "B" in sys.argv:
    # one partition at 1M: the rows of r7 (10,000) and half of r8's, as a 1M conversation has them
    rows = [r for r in conversation(1_000_000, threads=10_000, resources=100) if r["resource_id"] in ("r7", "r8")]
    rows = [r for r in rows if r["resource_id"] == "r7" or int(r["thread_id"][1:]) % 200 == 8]
    vecs = emb.embed([" ".join(r["content"].split()) for r in rows])
    vecs = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    c.execute(f"DROP TABLE IF EXISTS {S}.part_b_src")
    c.execute(f"CREATE TABLE {S}.part_b_src (id text, embedding vector(384), metadata jsonb)")
    with c.cursor().copy(f"COPY {S}.part_b_src (id, embedding, metadata) FROM STDIN") as cp:
        for r, v in zip(rows, vecs):
            cp.write_row((r["id"] + "#0", str(v.tolist()), json.dumps({"thread_id": r["thread_id"], "resource_id": r["resource_id"]})))
    print(f"(B) {len(rows)} rows ({sum(r['resource_id']=='r7' for r in rows)} of r7)")
    bb = plain_table("part_b", f"SELECT * FROM {S}.part_b_src")
    print(f"HNSW build {bb:.0f} s")
    print("| table | scope | plan | p50 ms | p95 ms | recall@10 |\n|---|---|---|---:|---:|---:|")
    measure("one partition at 1M", "part_b", "resource_id", ["r7"])
print("load", os.getloadavg())
