"""Range filters, and ``$nin``/``$ne``, on keys of few values (posted keys) through the public
``query()``, next to the ``$in`` of the same values and numpy over a prebuilt subset.

    python benches/posted_ranges.py N DIM [--fresh]

A range on a key of low cardinality is answered from the key's slot lists; this measures it
on data, keys and bounds of its own: Gaussian clusters (seed 11, N / 500 of them, spread 0.7),
metadata ``{"day": i % 365, "score": <one of 200 floats in [0, 10)>, "kind": one of 6
strings, "date": the ISO date of "day" in 2026}``, queries near stored vectors. Per filter:
p50 µs of ``query(top_k=10)`` over 300 queries (after ``link()``, or right after the bulk
upsert with ``--fresh``), numpy's exact scan over the allowed rows (gathered beforehand,
untimed) and recall@10 against it.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from threadrecall.storage import DuckDBStorage  # noqa: E402
from threadrecall.vector import HnswVectorStore  # noqa: E402

n, dim = int(sys.argv[1]), int(sys.argv[2])
fresh = "--fresh" in sys.argv
rng = np.random.default_rng(11)
centres = rng.normal(size=(max(n // 500, 2), dim)).astype(np.float32)
x = centres[rng.integers(0, len(centres), n)] + rng.normal(scale=0.7, size=(n, dim)).astype(np.float32)
x /= np.linalg.norm(x, axis=1, keepdims=True)
day = np.arange(n) % 365
score = np.round(rng.integers(0, 200, n) * 0.05, 2)
kind = rng.integers(0, 6, n)
date = (np.datetime64("2026-01-01") + day).astype(str)
meta = [{"day": int(day[i]), "score": float(score[i]), "kind": f"k{kind[i]}", "date": str(date[i])}
        for i in range(n)]
store = HnswVectorStore(storage=DuckDBStorage(os.path.join(tempfile.mkdtemp(), "v.duckdb")))
store.create_index("ix", dim)
store.upsert("ix", x, ids=[str(i) for i in range(n)], metadata=meta)
if not fresh:
    store.link("ix")
queries = x[rng.integers(0, n, 300)] + rng.normal(scale=0.1, size=(300, dim)).astype(np.float32)
queries /= np.linalg.norm(queries, axis=1, keepdims=True)

cases = [
    ("day in [0, 36): under the key", {"day": {"$gte": 0, "$lt": 36}}, day < 36),
    ("the same: $in of its 36 values", {"day": {"$in": list(range(36))}}, day < 36),
    ("day in [100, 104): bounds apart", {"$and": [{"day": {"$gt": 99}}, {"day": {"$lte": 103}}]},
     (day > 99) & (day <= 103)),
    ("day > 328 (one bound)", {"day": {"$gt": 328}}, day > 328),
    ("score in [2.5, 3.0) (floats)", {"score": {"$gte": 2.5, "$lt": 3.0}}, (score >= 2.5) & (score < 3.0)),
    ("kind == k2 and day in [10, 20]", {"kind": "k2", "day": {"$gte": 10, "$lte": 20}},
     (kind == 2) & (day >= 10) & (day <= 20)),
    ("day in [200, 200] (one value)", {"day": {"$gte": 200, "$lte": 200}}, day == 200),
    ("date in March (ISO strings)", {"date": {"$gte": "2026-03-01", "$lt": "2026-04-01"}},
     (date >= "2026-03-01") & (date < "2026-04-01")),
    ("date in one week, apart", {"$and": [{"date": {"$gt": "2026-06-07"}}, {"date": {"$lte": "2026-06-14"}}]},
     (date > "2026-06-07") & (date <= "2026-06-14")),
    ("kind in [k1, k3) (strings)", {"kind": {"$gte": "k1", "$lt": "k3"}}, (kind >= 1) & (kind < 3)),
    ("day $nin of 329 days (the other 36 pass)", {"day": {"$nin": list(range(36, 365))}}, day < 36),
    ("day $ne 7", {"day": {"$ne": 7}}, day != 7),
]
print(f"{n} x {dim}, {'fresh after the bulk upsert' if fresh else 'linked'}")
print("| filter | allowed | query() p50 µs | numpy p50 µs | numpy / query() | recall@10 |")
print("|---|---|---|---|---|---|")
for label, flt, mask in cases:
    allowed = np.flatnonzero(mask)
    subset = x[allowed]
    ours, theirs, hits = [], [], 0
    for q in queries:
        start = time.perf_counter()
        found = store.query("ix", q, top_k=10, filter=flt)
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        sims = subset @ q
        top = np.argpartition(-sims, min(9, len(sims) - 1))[:10]
        truth = allowed[top[np.argsort(-sims[top])]]
        theirs.append(time.perf_counter() - start)
        hits += len({int(r.id) for r in found} & set(truth.tolist()))
    a, b = statistics.median(ours) * 1e6, statistics.median(theirs) * 1e6
    print(f"| {label} | {len(allowed)} | {a:.1f} | {b:.1f} | {b / a:.2f}x "
          f"| {hits / (len(queries) * min(10, len(allowed))):.3f} |")
store.close()
