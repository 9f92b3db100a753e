"""What ``HnswVectorStore.query()`` costs beyond the core search it wraps, side by side.

    python benches/query_overhead.py [n] [dim]

One store over a DuckDB file (seeded Gaussian mixture, 20 clusters, spread 1.0, metadata
``{"cat": i % 100, "tag": ...}``), linked. For top-10 and top-100, unfiltered and with a 10 %
filter, the same queries go alternately to the core search the store calls
(``VectorIndex.search``, same breadth, same filter) and to ``query()``; per-call wall times,
medians over many calls. The budget is 5 µs plus 0.3 µs per hit.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from vector_data import SEED, mixture  # noqa: E402

from threadrecall.vector import HnswVectorStore  # noqa: E402

CALLS = 3000


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    dim = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    rng = np.random.default_rng(SEED + n + dim)
    centres = rng.standard_normal((20, dim), dtype=np.float32)
    data = mixture(rng, n, centres, 1.0)
    queries = mixture(rng, 500, centres, 1.0)
    with tempfile.TemporaryDirectory() as tmp:
        store = HnswVectorStore(str(Path(tmp) / "overhead.duckdb"))
        store.create_index("v", dim)
        store.upsert("v", data, ids=[str(i) for i in range(n)],
                     metadata=[{"cat": i % 100, "tag": f"t{i % 1000}"} for i in range(n)])
        store.link("v")
        store.flush()
        index = store._current("v").index  # the core object the store searches
        print(f"{n} x {dim}, {CALLS} calls each, medians (µs)")
        print("| k | filter | core search | query() | overhead | budget |")
        print("|---|---|---|---|---|---|")
        for k in (10, 100):
            for label, flt in (("none", None), ("cat $in 10 %", {"cat": {"$in": list(range(10))}})):
                core, full = [], []
                for j in range(CALLS):
                    q = queries[j % len(queries)]
                    t0 = time.perf_counter()
                    index.search(q, k, flt, store.ef_search)
                    t1 = time.perf_counter()
                    store.query("v", q, top_k=k, filter=flt)
                    t2 = time.perf_counter()
                    core.append(t1 - t0)
                    full.append(t2 - t1)
                c, f = statistics.median(core) * 1e6, statistics.median(full) * 1e6
                print(f"| {k} | {label} | {c:.1f} | {f:.1f} | {f - c:.1f} | {5 + 0.3 * k:.1f} |")
        store.close()


if __name__ == "__main__":
    main()
