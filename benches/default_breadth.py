"""The planner's default search breadth against the narrowest breadth that reaches recall@10
0.95, on several data shapes, side by side.

    python benches/default_breadth.py [shape ...]      # shapes by label, default: all

For each shape (seeded; clustered shapes are Gaussian mixtures as in the vector comparison,
"uniform" ones are uniform random directions), one core index (M = 16, construction breadth
200, linked, saved), two kinds of query: new ones from the same distribution, and ones off
the data (a stored vector plus noise, as ``filtered_query.py`` draws them); exact ground truth
by numpy. Each kind gets its own copy of the index, loaded from the file. Measured: the
breadth the planner picks when none is given (``ef=None``), first as measured on held-out
vectors, then once 192 other queries of the kind were served (the breadth is then measured on
them; each measure's one-off cost is reported); recall@10 and µs/query of the other queries
at each; and a sweep of fixed breadths (an eighth apart) for the narrowest
one reaching 0.95 and its µs/query, in the same run. Prints a markdown table.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from vector_data import SEED, exact_top_k, mixture, recall  # noqa: E402

from threadrecall import _core  # noqa: E402

QUERIES = 400
# Queries served before the second measure (the measure keeps this many distinct ones).
SERVED = 192
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
    """The data and ``SERVED + QUERIES`` new queries from its distribution."""
    rng = np.random.default_rng(SEED + n + dim + clusters)
    total = SERVED + QUERIES
    if clusters == 0:
        x = rng.standard_normal((n + total, dim), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x[:n], x[n:]
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)
    return mixture(rng, n, centres, spread), mixture(rng, total, centres, spread)


def off_data(data: np.ndarray) -> np.ndarray:
    """``SERVED + QUERIES`` queries, each a stored vector plus noise away from the data
    (seeded)."""
    rng = np.random.default_rng(SEED + 1)
    q = data[rng.integers(0, len(data), SERVED + QUERIES)]
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
    print("| shape | queries | default ef, held-out | recall@10 | µs | measuring s "
          "| default ef, served | recall@10 | µs | measuring s | matched ef (0.95) | recall | µs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label in wanted:
        n, dim, clusters, spread = SHAPES[label]
        data, queries = data_for(n, dim, clusters, spread)
        built = _core.VectorIndex(dim, "cosine", m=16, ef_construction=200)
        built.add([str(i) for i in range(n)], data, [{} for _ in range(n)])
        built.link_all(2)
        t0 = time.perf_counter()
        built.default_ef(10)
        measuring = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "index.hnsw"
            built.save(path, 0, "bench")
            del built
            for kind, qs in (("new, same mixture", queries), ("off the data", off_data(data))):
                index = _core.VectorIndex.load(path)[0]
                served, evaluated = qs[:SERVED], qs[SERVED:]
                truth = exact_top_k(data, evaluated, 10)
                held_out = index.default_ef(10)  # as saved with the file
                found, us = timed(index, evaluated, held_out)
                before = f"{held_out} | {recall(found, truth):.3f} | {us:.0f} | {measuring:.2f}"
                timed(index, served[:-1], None)
                t0 = time.perf_counter()
                timed(index, served[-1:], None)  # the last one kept: the breadth is measured
                remeasuring = time.perf_counter() - t0
                found, us = timed(index, evaluated, None)
                after = (f"{index.default_ef(10)} | {recall(found, truth):.3f} | {us:.0f} "
                         f"| {remeasuring:.2f}")
                print(f"| {label} | {kind} | {before} | {after} | {matched(index, evaluated, truth)} |",
                      flush=True)


if __name__ == "__main__":
    main()
