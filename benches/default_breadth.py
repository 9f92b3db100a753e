"""The planner's default search breadth against the narrowest breadth that reaches recall@10
0.95, on several data shapes, side by side.

    python benches/default_breadth.py [shape ...]      # shapes by label, default: all

For each shape (seeded; clustered shapes are Gaussian mixtures as in the vector comparison,
"uniform" ones are uniform random directions), one core index (M = 16, construction breadth
200, linked), two kinds of query: new ones from the same distribution, and ones off the data
(a stored vector plus noise, as ``filtered_query.py`` draws them); exact ground truth by
numpy. Measured: the breadth the planner picks when none is given (``ef=None``: measured on
the graph at the first such search, whose one-off cost is reported), its recall@10 and
µs/query, and a sweep of fixed breadths (an eighth apart) for the narrowest one reaching 0.95
and its µs/query, in the same run. Prints a markdown table.
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
SWEEP = [16, 18, 20, 22, 24, 27, 30, 34, 38, 42, 48, 54, 60, 68, 76, 86, 96, 108, 120, 136, 152,
         172, 192, 216, 240, 272, 304, 344, 384, 432, 512, 640, 768]
# label: (n, dim, clusters or 0 for uniform, spread)
SHAPES = {
    "50k x 128 clustered (20, 1.0)": (50_000, 128, 20, 1.0),
    "100k x 384 clustered (1000, 0.5)": (100_000, 384, 1000, 0.5),
    "20k x 768 clustered (50, 0.5)": (20_000, 768, 50, 0.5),
    "200k x 64 clustered (100, 0.7)": (200_000, 64, 100, 0.7),
    "50k x 128 uniform": (50_000, 128, 0, 0.0),
    "20k x 32 uniform": (20_000, 32, 0, 0.0),
    # Not used to choose the measure's target, margin or probe count:
    "30k x 96 clustered (50, 0.6)": (30_000, 96, 50, 0.6),
    "20k x 256 clustered (50, 0.6)": (20_000, 256, 50, 0.6),
    "30k x 160 clustered (10, 1.5)": (30_000, 160, 10, 1.5),
}
# Queries off the data, as benches/filtered_query.py draws them: a stored vector plus
# Gaussian noise of 0.1 per component (as long as the vector itself at 96 dimensions).
OFF_DATA_NOISE = 0.1


def data_for(n: int, dim: int, clusters: int, spread: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED + n + dim + clusters)
    if clusters == 0:
        x = rng.standard_normal((n + QUERIES, dim), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x[:n], x[n:]
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)
    return mixture(rng, n, centres, spread), mixture(rng, QUERIES, centres, spread)


def off_data(data: np.ndarray) -> np.ndarray:
    """Queries a stored vector plus noise away from the data (seeded)."""
    rng = np.random.default_rng(SEED + 1)
    q = data[rng.integers(0, len(data), QUERIES)]
    q = q + rng.normal(scale=OFF_DATA_NOISE, size=q.shape).astype(np.float32)
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def timed(index: object, queries: np.ndarray, ef: int | None) -> tuple[list[list[int]], float]:
    found, times = [], []
    for q in queries:
        t0 = time.perf_counter()
        hits = index.search(q, 10, None, ef)  # type: ignore[attr-defined]
        times.append(time.perf_counter() - t0)
        found.append([int(i) for i, _ in hits])
    return found, statistics.median(times) * 1e6


def matched(index: object, queries: np.ndarray, truth: list[list[int]]) -> str:
    """The narrowest swept breadth reaching recall@10 0.95, its recall and µs."""
    for ef in SWEEP:
        found, us_ef = timed(index, queries, ef)
        r = recall(found, truth)
        if r >= 0.95:
            return f"{ef} | {r:.3f} | {us_ef:.0f}"
    return "not reached | |"


def main() -> None:
    wanted = sys.argv[1:] or list(SHAPES)
    print("| shape | queries | default ef | recall@10 | µs | measuring s | matched ef (0.95) "
          "| recall | µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label in wanted:
        n, dim, clusters, spread = SHAPES[label]
        data, queries = data_for(n, dim, clusters, spread)
        index = _core.VectorIndex(dim, "cosine", m=16, ef_construction=200)
        index.add([str(i) for i in range(n)], data, [{} for _ in range(n)])
        index.link_all(2)
        t0 = time.perf_counter()
        default = index.default_ef(10)
        measuring = time.perf_counter() - t0
        for kind, qs in (("new, same mixture", queries), ("off the data", off_data(data))):
            truth = exact_top_k(data, qs, 10)
            found, us = timed(index, qs, None)
            print(f"| {label} | {kind} | {default} | {recall(found, truth):.3f} | {us:.0f} "
                  f"| {measuring:.2f} | {matched(index, qs, truth)} |", flush=True)


if __name__ == "__main__":
    main()
