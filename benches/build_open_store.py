"""Builds a DuckDB store for benches/open_index.py through the public API, its index file saved.

    python benches/build_open_store.py <db> [n] [dim] [metric] [batch]

Gaussian mixture (1,000 clusters, spread 0.5, L2-normalised, seeded), ``n`` vectors (default
1,000,000) of ``dim`` dimensions (default 384) in index ``bench`` (``metric`` default cosine),
upserted ``batch`` at a time (default 50,000), each upsert linked and saved (a frame of the
index file per upsert, and a few empty ones the background linker's saves add), then linked
and saved once more on close. Metadata: ``thread_id`` of 5,000 values and ``resource_id`` of
100; with the euclidean metric also ``title`` (a string of 1,000 values) and ``score`` (a
float), so another shape of record is loaded. Prints the time of each batch.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from vector_data import SEED, mixture  # noqa: E402

from threadrecall.vector import HnswVectorStore  # noqa: E402

CLUSTERS = 1_000


def metadata(start: int, count: int, rng: np.random.Generator, extra: bool) -> list[dict]:
    out = []
    scores = rng.random(count)
    for i in range(start, start + count):
        entry = {"thread_id": f"t{i % 5000}", "resource_id": f"r{i % 100}"}
        if extra:
            entry["title"] = f"title {i % 1000}"
            entry["score"] = float(scores[i - start])
        out.append(entry)
    return out


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    db = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    dim = int(sys.argv[3]) if len(sys.argv) > 3 else 384
    metric = sys.argv[4] if len(sys.argv) > 4 else "cosine"
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 50_000
    if os.path.exists(db):
        sys.exit(f"{db} exists: give a new path")
    rng = np.random.default_rng(SEED + n + dim)
    centres = rng.standard_normal((CLUSTERS, dim), dtype=np.float32)
    store = HnswVectorStore(db)
    store.create_index("bench", dim, metric)
    began = time.perf_counter()
    for start in range(0, n, batch):
        count = min(batch, n - start)
        t = time.perf_counter()
        vectors = mixture(rng, count, centres)
        store.upsert("bench", vectors, ids=[f"v{i}" for i in range(start, start + count)],
                     metadata=metadata(start, count, rng, metric == "euclidean"))
        store.link("bench")
        store.flush()
        print(f"{start + count:>9} vectors: batch {time.perf_counter() - t:.1f} s, "
              f"total {time.perf_counter() - began:.0f} s", flush=True)
    store.link("bench")
    path = store.index_path("bench")
    store.close()
    print(f"built in {time.perf_counter() - began:.0f} s; index file {path}")


if __name__ == "__main__":
    main()
