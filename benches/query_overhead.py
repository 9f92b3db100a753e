"""What ``HnswVectorStore.query()`` costs beyond the core search it wraps, side by side.

    python benches/query_overhead.py [n] [dim]

One store over a DuckDB file (seeded Gaussian mixture, 20 clusters, spread 1.0, metadata
``{"cat": i % 100, "tag": ...}``), linked. For top-10 and top-100, unfiltered and with a 10 %
filter, the same queries go in turn to the core search (``VectorIndex.search``, same breadth,
same filter), to ``query()``, and to the query path as it was before results were built in
the core (``previous_query`` below: ``search_ids``, then Python builds the results with every
hit's metadata looked up by id and decoded); per-call wall times, medians over many calls, the order rotated each
call. The budget is 5 µs plus 0.3 µs per hit over the core search.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from vector_data import SEED, mixture  # noqa: E402

from threadrecall.types import QueryResult  # noqa: E402
from threadrecall.vector import HnswVectorStore  # noqa: E402

CALLS = 3000


def previous_query(store: HnswVectorStore, q: np.ndarray, k: int, flt: dict | None,
                   texts: dict[str, str]) -> list:
    """The former body of ``query()`` (metadata from a dict of texts by id, as the store's
    cache of texts was)."""
    hits = store.search_ids("v", q, top_k=k, filter=flt)
    found = [(i, score, texts.get(i)) for i, score in hits]
    found = [hit for hit in found if hit[2] is not None]
    metadata = json.loads("[" + ",".join([text for _, _, text in found]) + "]")
    results = []
    new = object.__new__
    for (hit_id, score, _), meta in zip(found, metadata):
        result = new(QueryResult)
        result.__dict__.update(id=hit_id, score=float(score), metadata=meta, vector=None)
        results.append(result)
    return results


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
        metadata = [{"cat": i % 100, "tag": f"t{i % 1000}"} for i in range(n)]
        store.upsert("v", data, ids=[str(i) for i in range(n)], metadata=metadata)
        texts = {str(i): json.dumps(m) for i, m in enumerate(metadata)}
        store.link("v")
        store.flush()
        index = store._current("v").index  # the core object the store searches
        print(f"{n} x {dim}, {CALLS} calls each, medians (µs)\n")
        print("| k | filter | core search | previous query path | query() | overhead before "
              "| overhead now | budget |")
        print("|---|---|---|---|---|---|---|---|")
        for k in (10, 100):
            for label, flt in (("none", None), ("cat $in 10 %", {"cat": {"$in": list(range(10))}})):
                calls = [lambda q: index.search(q, k, flt, store.ef_search),
                         lambda q: previous_query(store, q, k, flt, texts),
                         lambda q: store.query("v", q, top_k=k, filter=flt)]
                times: list[list[float]] = [[], [], []]
                for j in range(CALLS):
                    q = queries[j % len(queries)]
                    for w in range(3):
                        which = (j + w) % 3
                        t0 = time.perf_counter()
                        calls[which](q)
                        times[which].append(time.perf_counter() - t0)
                c, b, f = (statistics.median(t) * 1e6 for t in times)
                print(f"| {k} | {label} | {c:.1f} | {b:.1f} | {f:.1f} | {b - c:.1f} | {f - c:.1f} "
                      f"| {5 + 0.3 * k:.1f} |", flush=True)
        store.close()


if __name__ == "__main__":
    main()
