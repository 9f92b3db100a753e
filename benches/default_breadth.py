"""The planner's default search breadth against the narrowest breadth that reaches recall@10
0.95, on several data shapes, side by side.

    python benches/default_breadth.py [shape ...]      # shapes by label, default: all

For each shape (seeded; clustered shapes are Gaussian mixtures as in the vector comparison,
"uniform" ones are uniform random directions), one core index (M = 16, construction breadth
200, linked), queries from the same distribution, exact ground truth by numpy. Measured: the
breadth the planner picks when none is given (``ef=None``: measured on the graph at the first
such search, whose one-off cost is reported), its recall@10 and µs/query, and a sweep of
fixed breadths for the narrowest one reaching 0.95 and its µs/query, in the same run. Prints
a markdown table; "default / matched" is the default's µs over the matched breadth's.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from vector_data import SEED, exact_top_k, mixture, recall  # noqa: E402

from threadrecall import _core  # noqa: E402

QUERIES = 400
SWEEP = [16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768]
# label: (n, dim, clusters or 0 for uniform, spread)
SHAPES = {
    "50k x 128 clustered (20, 1.0)": (50_000, 128, 20, 1.0),
    "100k x 384 clustered (1000, 0.5)": (100_000, 384, 1000, 0.5),
    "20k x 768 clustered (50, 0.5)": (20_000, 768, 50, 0.5),
    "200k x 64 clustered (100, 0.7)": (200_000, 64, 100, 0.7),
    "50k x 128 uniform": (50_000, 128, 0, 0.0),
    "20k x 32 uniform": (20_000, 32, 0, 0.0),
}


def data_for(n: int, dim: int, clusters: int, spread: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED + n + dim + clusters)
    if clusters == 0:
        x = rng.standard_normal((n + QUERIES, dim), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x[:n], x[n:]
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)
    return mixture(rng, n, centres, spread), mixture(rng, QUERIES, centres, spread)


def timed(index: object, queries: np.ndarray, ef: int | None) -> tuple[list[list[int]], float]:
    found, times = [], []
    for q in queries:
        t0 = time.perf_counter()
        hits = index.search(q, 10, None, ef)  # type: ignore[attr-defined]
        times.append(time.perf_counter() - t0)
        found.append([int(i) for i, _ in hits])
    return found, statistics.median(times) * 1e6


def main() -> None:
    wanted = sys.argv[1:] or list(SHAPES)
    print("| shape | default ef | recall@10 | µs | measuring s | matched ef (0.95) | recall | µs "
          "| default / matched µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label in wanted:
        n, dim, clusters, spread = SHAPES[label]
        data, queries = data_for(n, dim, clusters, spread)
        truth = exact_top_k(data, queries, 10)
        index = _core.VectorIndex(dim, "cosine", m=16, ef_construction=200)
        index.add([str(i) for i in range(n)], data, [{} for _ in range(n)])
        index.link_all(2)
        t0 = time.perf_counter()
        default = index.default_ef(10)
        measuring = time.perf_counter() - t0
        found, us = timed(index, queries, None)
        r_default = recall(found, truth)
        matched = None
        for ef in SWEEP:
            found, us_ef = timed(index, queries, ef)
            r = recall(found, truth)
            if r >= 0.95:
                matched = (ef, r, us_ef)
                break
        m = (f"{matched[0]} | {matched[1]:.3f} | {matched[2]:.0f} | {us / matched[2]:.2f}x"
             if matched else "not reached | | |")
        print(f"| {label} | {default} | {r_default:.3f} | {us:.0f} | {measuring:.2f} | {m}", flush=True)


if __name__ == "__main__":
    main()
