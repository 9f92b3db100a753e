"""Filtered search on any metadata key against numpy over a prebuilt id subset, side by side.

    python benches/filtered_scan.py [n] [dim]

Gaussian-mixture float32 vectors (20 clusters, spread 1.0, L2-normalised; seed as the vector
comparison), metadata ``{"cat": i % 1000, "tag": f"t{i % 1000}", "ts": <a unique integer
timestamp, shuffled>, "price": <a uniform float>}``: ``cat`` and ``tag`` have few enough
values to be posted, ``ts`` and ``price`` are sorted. Filters allowing 10, 1 and 0.1 % on
integer and string keys, numeric ranges on the sorted keys, and combinations. For each, the
core search (``VectorIndex.search``, planner defaults) and numpy over the allowed rows
(gathered beforehand, untimed) answer the same queries alternately; medians of per-query
wall times, recall@10 against the exact filtered answer. Prints a markdown table.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # numpy on one thread, as the core search

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from vector_data import SEED, mixture  # noqa: E402

from threadrecall import _core  # noqa: E402

QUERIES = 300
T0 = 1_700_000_000_000


def cases(n: int, ts: np.ndarray, price: np.ndarray) -> list[tuple[str, str, dict, np.ndarray]]:
    ids = np.arange(n)
    cat = ids % 1000
    by_ts = np.argsort(ts)

    def ts_window(share: float) -> tuple[int, int]:
        lo = int(min(0.3, 1 - share) * n)
        hi = min(lo + int(share * n), n - 1)
        return int(ts[by_ts[lo]]), int(ts[by_ts[hi]]) + (hi == n - 1)

    out = []
    for share, label in ((0.1, "10 %"), (0.01, "1 %"), (0.001, "0.1 %")):
        values = list(range(int(1000 * share)))
        if len(values) == 1:
            out.append((label, "cat == int", {"cat": 7}, ids[cat == 7]))
            out.append((label, "tag == string", {"tag": "t7"}, ids[cat == 7]))
        else:
            out.append((label, f"cat $in ({len(values)} ints)", {"cat": {"$in": values}},
                        ids[np.isin(cat, values)]))
            out.append((label, f"tag $in ({len(values)} strings)",
                        {"tag": {"$in": [f"t{v}" for v in values]}}, ids[np.isin(cat, values)]))
        lo, hi = ts_window(share)
        out.append((label, "ts range $gte/$lt", {"ts": {"$gte": lo, "$lt": hi}},
                    ids[(ts >= lo) & (ts < hi)]))
        out.append((label, "price range (float)", {"price": {"$gt": 0.5, "$lte": 0.5 + share}},
                    ids[(price > 0.5) & (price <= 0.5 + share)]))
        lo, hi = ts_window(share * 10)
        out.append((label, "ts range $and cat $lt", {"$and": [{"ts": {"$gte": lo, "$lt": hi}},
                                                               {"cat": {"$lt": 100}}]},
                    ids[(ts >= lo) & (ts < hi) & (cat < 100)]))
    lo, hi = ts_window(0.005)
    out.append(("~1 %", "$or of ts range, cat ==",
                {"$or": [{"ts": {"$gte": lo, "$lt": hi}}, {"cat": 3}]},
                ids[((ts >= lo) & (ts < hi)) | (cat == 3)]))
    out.append(("~99 %", "cat $nin (10 ints)", {"cat": {"$nin": list(range(10))}},
                ids[~np.isin(cat, list(range(10)))]))
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    dim = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    rng = np.random.default_rng(SEED + n + dim)
    centres = rng.standard_normal((20, dim), dtype=np.float32)
    data = mixture(rng, n, centres, 1.0)
    queries = mixture(rng, QUERIES, centres, 1.0)
    ts = T0 + rng.permutation(n).astype(np.int64) * 1000
    price = rng.random(n)
    index = _core.VectorIndex(dim, "cosine")
    metas = [{"cat": i % 1000, "tag": f"t{i % 1000}", "ts": int(ts[i]), "price": float(price[i])}
             for i in range(n)]
    index.add([str(i) for i in range(n)], data, metas, link=True)
    print(f"{n} x {dim}, {QUERIES} queries per filter, medians (µs)\n")
    print("| selectivity | filter | allowed | core µs | numpy subset µs | speed vs numpy | recall@10 |")
    print("|---|---|---|---|---|---|---|")
    for label, name, flt, members in cases(n, ts, price):
        sub = data[members]
        t_core, t_np, hits, wanted = [], [], 0, 0
        for q in queries:
            t0 = time.perf_counter()
            got = index.search(q, 10, flt)
            t1 = time.perf_counter()
            s = sub @ q
            kk = min(10, len(members))
            top = members[np.argpartition(-s, kk - 1)[:kk]]
            t2 = time.perf_counter()
            t_core.append(t1 - t0)
            t_np.append(t2 - t1)
            hits += len({int(i) for i, _ in got} & set(top.tolist()))
            wanted += kk
        c, p = statistics.median(t_core) * 1e6, statistics.median(t_np) * 1e6
        print(f"| {label} | `{name}` | {len(members)} | {c:.0f} | {p:.0f} | {p / c:.2f}x | "
              f"{hits / max(1, wanted):.3f} |")


if __name__ == "__main__":
    main()
