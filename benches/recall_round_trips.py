"""Semantic recall over PostgreSQL with the thread's owner read apart (a lookup, then the
window: the storage without ``owned_window``) and with it in the hits' read (one statement),
interleaved call by call in one process: 20,000 messages, 2,000 threads of 100 resources,
``top_k`` 4, ``message_range`` 1, on the HNSW cache and on PgVector.

    THREADRECALL_TEST_PG_DSN=... python benches/recall_round_trips.py
"""
import sys, time, random, os, uuid
sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]
import numpy as np, psycopg
from conftest import conversation
from threadrecall import Memory
from threadrecall.embedders import HashEmbedder
from threadrecall.storage import PostgresStorage
from threadrecall.vector import HnswVectorStore, PgVector
dsn = os.environ["THREADRECALL_TEST_PG_DSN"]; N = 20000
schema = "ab_" + uuid.uuid4().hex[:8]
st = PostgresStorage(dsn, schema=schema); emb = HashEmbedder(dim=384)
opts = {"semantic_recall": {"top_k": 4, "message_range": 1}}
h = Memory(storage=st, vector=HnswVectorStore(st), embedder=emb, options=opts)
rows = list(conversation(N, threads=N // 10, resources=100))
for i in range(0, N, 5000): h.save_messages(rows[i:i+5000])
pv = PgVector(st); p = Memory(storage=st, vector=pv, embedder=emb, options=opts)
p.index.ensure(); p.index.write(p.index.prepare(h.storage.get_messages([r["id"] for r in rows])), {m.id: m for m in h.storage.get_messages([r["id"] for r in rows])}, st.get_threads({r["thread_id"] for r in rows}))
h.vector.link()
QUERIES = [f"what did we say about {t} and item {i}" for t in ("billing", "support", "travel", "books", "food") for i in range(0, 1000, 25)]
rng = random.Random(1)
work = [(f"t{t}", f"r{t % 100}", rng.choice(QUERIES)) for t in (rng.randrange(N // 10) for _ in range(700))]
fused = type(st).owned_window


def _absent(self):
    raise AttributeError("owned_window")


print("| store | scope | owner apart p50 | owner in the read p50 | ratio |\n|---|---|---:|---:|---:|")
for label, mem in (("PostgreSQL + HNSW cache", h), ("PostgreSQL + PgVector", p)):
    for scope in ("thread", "resource"):
        cfg = {"semantic_recall": {"scope": scope}}
        t_old, t_new = [], []
        for k, (t, r, q) in enumerate(work):
            for mode in ("old", "new"):
                if mode == "old": type(st).owned_window = property(_absent)  # read as absent: get_thread, then the window
                else: type(st).owned_window = fused
                s = time.perf_counter(); mem.recall(t, resource_id=r, per_page=0, vector_search_string=q, thread_config=cfg); d = (time.perf_counter() - s) * 1000
                if k >= 100: (t_old if mode == "old" else t_new).append(d)
        o, n = np.percentile(t_old, 50), np.percentile(t_new, 50)
        print(f"| {label} | {scope} | {o:.2f} | {n:.2f} | {n/o:.2f} |", flush=True)
print("load", os.getloadavg())
with psycopg.connect(dsn, autocommit=True) as c: c.execute(f'DROP SCHEMA "{schema}" CASCADE')
