"""How long a saved HNSW index takes to open and give its first answer, in a fresh process.

    python benches/open_index.py <db> [index] [dim] [runs]

``<db>`` is a DuckDB store whose index (default ``bench``) already has its index file beside
it (built and saved by an earlier open), of ``dim`` dimensions (default 384). Each run is a new process: it imports the library,
opens the store, runs one unfiltered top-10 search (the index loads from its file then) and
200 more, and reports the seconds to open the store, to the first answer (import excluded),
the µs per warm query (random Gaussian queries, default breadth) and the resident memory the
index added. Runs one after another; the page cache is warm after the first. Prints one JSON
line per run and the median of each figure, with the load average before each run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from threadrecall.vector import HnswVectorStore

def rss():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

start = time.perf_counter()
before = rss()
store = HnswVectorStore(sys.argv[1])
opened = time.perf_counter()
name, dim = sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(1)
store.search_ids(name, rng.standard_normal(dim).astype(np.float32), top_k=10)
first = time.perf_counter()
queries = rng.standard_normal((200, dim)).astype(np.float32)
t = time.perf_counter()
for q in queries:
    store.search_ids(name, q, top_k=10)
warm = (time.perf_counter() - t) / len(queries)
print(json.dumps({"open_store_s": opened - start, "first_answer_s": first - start,
                  "warm_query_us": warm * 1e6, "rss_added_mb": (rss() - before) / 2**20}))
sys.stdout.flush()
import os
os._exit(0)  # no save at exit: every run opens the same file
"""


def main() -> None:
    if len(sys.argv) < 2 or not os.path.exists(sys.argv[1]):
        sys.exit(__doc__)
    db = sys.argv[1]
    name = sys.argv[2] if len(sys.argv) > 2 else "bench"
    dim = sys.argv[3] if len(sys.argv) > 3 else "384"
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    results = []
    for _ in range(runs):
        load = os.getloadavg()[0]
        out = subprocess.run([sys.executable, "-c", CHILD, db, name, dim], check=True,
                             capture_output=True, text=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        result["load_average"] = load
        print(json.dumps(result))
        results.append(result)
    medians = {key: round(statistics.median(r[key] for r in results), 3) for key in results[0]}
    print("median", json.dumps(medians))


if __name__ == "__main__":
    main()
