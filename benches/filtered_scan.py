"""Filtered search on any metadata key against numpy over a prebuilt id subset, side by side.

    python benches/filtered_scan.py [n] [dim]

Clustered float32 vectors (seed 0), metadata {"cat": i % 100}; filters allowing 1 % and
0.1 % of the vectors ("cat" == 7, "cat" in a range). Prints median latency ratios and
recall@10 against the exact answer.
"""

import statistics
import sys
import time

import numpy as np

from threadrecall import _core


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    dim = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(50, dim)).astype(np.float32)
    data = centres[rng.integers(0, 50, n)] + 0.3 * rng.normal(size=(n, dim)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    index = _core.VectorIndex(dim, "cosine")
    index.add([f"v{i}" for i in range(n)], data, [{"cat": i % 100} for i in range(n)])
    queries = data[rng.integers(0, n, 200)] + 0.05
    cases = {"1 %": ({"cat": 7}, np.arange(7, n, 100)),
             "3 % range": ({"cat": {"$gte": 10, "$lt": 13}}, np.array([i for i in range(n) if 10 <= i % 100 < 13]))}
    for label, (flt, subset) in cases.items():
        sub = data[subset]
        t_core, t_np, hits = [], [], 0
        for q in queries:
            t0 = time.perf_counter()
            got = index.search(q, 10, flt)
            t1 = time.perf_counter()
            s = sub @ (q / np.linalg.norm(q))
            top = subset[np.argpartition(-s, 10)[:10]]
            t2 = time.perf_counter()
            t_core.append(t1 - t0)
            t_np.append(t2 - t1)
            hits += len({int(i[1:]) for i, _ in got} & set(top.tolist()))
        ratio = statistics.median(t_np) / statistics.median(t_core)
        print(f"{label}: core {statistics.median(t_core) * 1e6:.0f} us, numpy subset "
              f"{statistics.median(t_np) * 1e6:.0f} us, speed vs numpy {ratio:.2f}x, "
              f"recall@10 {hits / (10 * len(queries)):.3f}")


if __name__ == "__main__":
    main()
