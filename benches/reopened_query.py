"""``HnswVectorStore.query()`` in a process that opens a saved store, two builds side by side.

    python benches/reopened_query.py FOLDER N DIM BEFORE AFTER [ROUNDS]

For each build (BEFORE and AFTER: folders holding the ``threadrecall`` package, put first on
``PYTHONPATH``), a store over a DuckDB file in ``FOLDER/<build>`` is built once under that
build (a seeded Gaussian mixture of N x DIM, 20 clusters, spread 1.0, cosine; metadata
``{"cat": i % 100, "tag": f"t{i % 1000}"}``), linked and closed. Then fresh interpreters,
the builds alternated ROUNDS times, each open its store and run, per case, 300 queries it
has not run before, then 300 more, through ``query(top_k=10)``, reading every hit's metadata.
Reported: the time to the first answer, per-call medians (wall, µs) of each block, recall@10
against numpy's exact answer, and the process's resident set growth (after the queries,
minus before the store was opened).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from vector_data import K, SEED, exact_top_k, mixture, recall  # noqa: E402

BLOCK = 300
CASES = {
    "unfiltered": None,
    "cat == int (1 %)": {"cat": 7},
    "tag == string (0.1 %)": {"tag": "t7"},
}


def data(n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED + n + dim)
    centres = rng.standard_normal((20, dim), dtype=np.float32)
    return mixture(rng, n, centres, 1.0), mixture(rng, 2 * BLOCK * len(CASES), centres, 1.0)


def rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def build(folder: Path, n: int, dim: int) -> None:
    from threadrecall.vector import HnswVectorStore

    folder.mkdir(parents=True, exist_ok=True)
    x, _ = data(n, dim)
    store = HnswVectorStore(str(folder / "v.duckdb"))
    store.create_index("v", dim, "cosine")
    store.upsert("v", x, ids=[str(i) for i in range(n)],
                 metadata=[{"cat": i % 100, "tag": f"t{i % 1000}"} for i in range(n)])
    store.link("v")
    store.close()


def child(folder: Path, n: int, dim: int) -> None:
    from threadrecall.vector import HnswVectorStore

    x, queries = data(n, dim)
    ids = np.arange(n)
    before = rss()
    started = time.perf_counter()
    store = HnswVectorStore(str(folder / "v.duckdb"))
    store.query("v", queries[-1], top_k=K)
    out: dict = {"first answer ms": (time.perf_counter() - started) * 1e3}
    for c, (label, where) in enumerate(CASES.items()):
        allowed = ids if where is None else ids[
            ids % 100 == where["cat"] if "cat" in where else ids % 1000 == int(where["tag"][1:])]
        block = queries[c * 2 * BLOCK:(c + 1) * 2 * BLOCK]
        times, found = [], []
        for q in block:
            t = time.perf_counter()
            hits = store.query("v", q, top_k=K, filter=where)
            for h in hits:
                h.metadata  # noqa: B018 - read, as a user would
            times.append((time.perf_counter() - t) * 1e6)
            found.append([int(h.id) for h in hits])
        truth = [[int(allowed[j]) for j in row] for row in exact_top_k(x[allowed], block, K)]
        out[label] = {"new µs": statistics.median(times[:BLOCK]),
                      "next µs": statistics.median(times[BLOCK:]),
                      "recall": recall(found, truth)}
    out["rss MB"] = (rss() - before) / 2**20
    print(json.dumps(out))


def main() -> None:
    folder, n, dim = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    builds = {"before": sys.argv[4], "after": sys.argv[5]}
    rounds = int(sys.argv[6]) if len(sys.argv) > 6 else 2
    env = {name: dict(os.environ, PYTHONPATH=path) for name, path in builds.items()}
    for name in builds:
        if not (folder / name / "v.duckdb").exists():
            subprocess.run([sys.executable, __file__, "--build", str(folder / name), str(n),
                            str(dim)], env=env[name], check=True, stderr=subprocess.DEVNULL)
    runs: dict[str, list[dict]] = {name: [] for name in builds}
    for _ in range(rounds):
        for name in builds:
            line = subprocess.run(
                [sys.executable, __file__, "--child", str(folder / name), str(n), str(dim)],
                env=env[name], check=True, capture_output=True, text=True).stdout
            runs[name].append(json.loads(line.strip().splitlines()[-1]))
    print(f"\n{n:,} x {dim}, {rounds} fresh processes per build, alternated; "
          "µs per call, median (recall@10)\n")
    print("| case | block | before | after | before / after |")
    print("|---|---|---|---|---|")
    med = {name: lambda key, sub=None, r=r: statistics.median(
        x[key] if sub is None else x[key][sub] for x in r) for name, r in runs.items()}
    for label in CASES:
        for sub in ("new µs", "next µs"):
            b, a = med["before"](label, sub), med["after"](label, sub)
            rb, ra = (runs[name][0][label]["recall"] for name in builds)
            print(f"| {label} | {sub[:-3]} queries | {b:.1f} ({rb:.3f}) | {a:.1f} ({ra:.3f}) "
                  f"| {b / a:.2f}x |")
    for key in ("first answer ms", "rss MB"):
        b, a = med["before"](key), med["after"](key)
        print(f"| {key} | | {b:.1f} | {a:.1f} | |")


if __name__ == "__main__":
    if sys.argv[1] == "--build":
        build(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "--child":
        child(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
