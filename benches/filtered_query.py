"""Filtered ``query()`` through the public ``HnswVectorStore`` API against numpy over a
prebuilt subset, right after one bulk ``upsert`` and again after ``link()``.

    python benches/filtered_query.py N DIM

Data, keys and dimension differ from the ones ``filtered_scan.py`` and ``compare_vectors.py``
use: 50 Gaussian clusters of spread 0.6 (seed 7), metadata ``{"grp": i % 37, "lab":
f"L{i * 7919 % 731}", "w": <a uniform float in [0, 1000)>}``, queries near stored vectors. For
each filter: medians over 200 queries of ``query(top_k=10)`` and of numpy's exact scan over the
allowed rows (gathered beforehand, untimed), and recall@10 against that exact answer.
"""
import os, sys, time, statistics, tempfile
for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"): os.environ.setdefault(v, "1")
import numpy as np
from threadrecall.vector import HnswVectorStore
from threadrecall.storage import DuckDBStorage
n, d = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(7)
centres = rng.normal(size=(50, d)).astype(np.float32)
x = centres[rng.integers(0, 50, n)] + rng.normal(scale=0.6, size=(n, d)).astype(np.float32)
x /= np.linalg.norm(x, axis=1, keepdims=True)
ids = np.arange(n)
grp = ids % 37; lab = (ids * 7919) % 731; w = rng.uniform(0, 1000, n)
meta = [{"grp": int(grp[i]), "lab": f"L{lab[i]}", "w": float(w[i])} for i in range(n)]
folder = tempfile.mkdtemp()
store = HnswVectorStore(storage=DuckDBStorage(os.path.join(folder, "v.duckdb")))
store.create_index("ix", d)
t = time.perf_counter()
store.upsert("ix", x, ids=[f"v{i}" for i in range(n)], metadata=meta)
print(f"upsert {n}x{d}: {time.perf_counter()-t:.1f} s")
qs = x[rng.integers(0, n, 200)] + rng.normal(scale=0.1, size=(200, d)).astype(np.float32)
qs /= np.linalg.norm(qs, axis=1, keepdims=True)
cases = [("~2.7 % grp == int", {"grp": 5}, grp == 5),
         ("~10 % grp $in 4 ints", {"grp": {"$in": [1, 2, 3, 4]}}, np.isin(grp, [1, 2, 3, 4])),
         ("~0.14 % lab == string", {"lab": "L17"}, lab == 17),
         ("~1 % w range", {"w": {"$gte": 500.0, "$lt": 510.0}}, (w >= 500) & (w < 510)),
         ("~0.27 % grp and w", {"$and": [{"grp": 3}, {"w": {"$lt": 100.0}}]}, (grp == 3) & (w < 100)),
         ("~0.014 % lab and w", {"$and": [{"lab": "L17"}, {"w": {"$lt": 100.0}}]}, (lab == 17) & (w < 100)),
         ("none", None, np.ones(n, bool))]
def run(label):
    print(f"\n{label}\n| filter | allowed | query() µs | numpy subset µs | speed vs numpy | recall@10 |\n|---|---|---|---|---|---|")
    for name, f, mask in cases:
        sub = ids[mask]; xs = x[sub]
        ta, tb, hits = [], [], 0
        for q in qs:
            a = time.perf_counter(); res = store.query("ix", q, top_k=10, filter=f); ta.append(time.perf_counter() - a)
            a = time.perf_counter(); s = xs @ q; top = sub[np.argpartition(-s, min(10, len(s) - 1))[:10]]; tb.append(time.perf_counter() - a)
            truth = {f"v{i}" for i in top[np.argsort(-(x[top] @ q))][:10]}
            hits += len(truth & {r.id for r in res}) / max(1, min(10, len(sub)))
        ma, mb = statistics.median(ta) * 1e6, statistics.median(tb) * 1e6
        print(f"| {name} | {len(sub)} | {ma:.0f} | {mb:.0f} | {mb/ma:.2f}x | {hits/len(qs):.3f} |")
run("right after the bulk upsert (no link() call)")
store.link()
run("after link()")
print("load", os.getloadavg()[0])
