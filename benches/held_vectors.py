"""What holding the float vectors in memory buys: ``HnswVectorStore`` through its public API with
``hold_vectors`` off (the default: a re-rank reads its float vectors from the vectors file) and
on, hnswlib beside them, on the shapes, queries and filters of ``compare_vectors.py``.

One store is built (bulk upsert and link, two threads) and closed; its files are copied, and the
original is opened as it is and the copy with ``hold_vectors=True``, so both search the same
graph. hnswlib is built on the same data. Everything is timed as ``compare_vectors.py`` times it,
on one thread, in CPU time of the querying thread: each side at the lowest breadth of
``compare_vectors.EFS`` reaching recall@10 0.95 / 0.99, the three timed in turn (seven rounds,
median pass); each store's filtered queries at its planner's breadth in turn with numpy's scan of
the prebuilt allowed rows; and the resident memory a fresh process adds opening each store and
running 1,000 queries, beyond what it adds for the same store over a file whose index is empty.

``--other-data`` checks the same on shapes and filter keys no other bench uses, right after the
bulk upsert: each store built in turn through the public API (one thread) and timed as soon as
its upsert returns, the filters on a string key (0.2 %), a float range (2 %) and a ``$nin`` (60 %).

    python benches/held_vectors.py                         # 100k x 384 and 50k x 128
    python benches/held_vectors.py --shapes '50k x 128'
    python benches/held_vectors.py --other-data            # 30k x 200 and 12k x 1024

Writes ``results/held_vectors.md`` (``results/held_vectors_other_data.md``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import compare_vectors as cv  # noqa: E402  (sets the one-thread environment first)
import vector_peers as peers  # noqa: E402

SIDES = {"default": peers.Threadrecall, "held": peers.ThreadrecallHeld}

OTHER_SHAPES = (cv.Shape("30k x 200", 30_000, 200, 40, 0.6), cv.Shape("12k x 1024", 12_000, 1024, 60, 0.5))
KINDS = "abcde"
OTHER_FILTERS = [
    cv.FilterCase("room == string", "0.2 %", 500, lambda g: {"room": f"r{g}"}, lambda ids, g: ids % 500 == g),
    cv.FilterCase("score range (floats)", "2 %", 50, lambda g: {"score": {"$gt": 20 * g, "$lt": 20 * g + 20}},
                  lambda ids, g: ids * 37 % 1000 // 20 == g),
    cv.FilterCase("kind $nin (2 of 5)", "60 %", 5, lambda g: {"kind": {"$nin": [KINDS[g], KINDS[(g + 1) % 5]]}},
                  lambda ids, g: (ids % 5 != g) & (ids % 5 != (g + 1) % 5)),
]


def other_metadata(i: int) -> dict:
    return {"room": f"r{i % 500}", "score": float(i * 37 % 1000) + 0.25, "kind": KINDS[i % 5]}


def timed(libs: dict[str, Any], work: cv.Workload) -> dict[str, Any]:
    """The stores and hnswlib (built on the same data here) at matched recall, in turn; each
    store's filtered queries in turn with numpy's scan of the prebuilt allowed rows."""
    libs["hnswlib"] = peers.Hnswlib(work.shape.dim)
    libs["hnswlib"].build(work.data)
    results: dict[str, dict] = {name: {} for name in libs}
    for name, lib in libs.items():
        cv.measure_queries(lib, work, results[name])
    cv.interleaved(libs, results, work.queries)
    numpy_side: dict[str, dict] = {name: {} for name in SIDES}
    for name in SIDES:
        cv.filters_in_turn(libs[name], work, results[name], numpy_side[name])
    cases = [(label, case.selectivity) for label, (case, *_) in work.filters.items()]
    return {"results": results, "numpy": numpy_side, "cases": cases}


def measure(shape: cv.Shape, workdir: Path) -> dict[str, Any]:
    work = cv.Workload(shape, cv.SIZES["full"])
    built = peers.Threadrecall(shape.dim, workdir / "default", threads=2)
    built.upsert(work.data, work.metas)
    built.link()
    built.close()
    shutil.copytree(workdir / "default", workdir / "held")
    libs: dict[str, Any] = {name: cls(shape.dim, workdir / name) for name, cls in SIDES.items()}
    out = timed(libs, work)
    for name in SIDES:
        libs[name].close()
        out["results"][name]["memory"] = cv.memory(SIDES[name].name, libs[name].path, shape.dim)
    empty = peers.Threadrecall(shape.dim, workdir / "empty")
    empty.close()
    out["fixed"] = cv.memory(empty.name, empty.path, shape.dim)  # DuckDB and a store whose index is empty
    out["raw_bytes"] = shape.n * shape.dim * 4
    return out


def after_upsert(shape: cv.Shape, workdir: Path) -> dict[str, Any]:
    work = cv.Workload(shape, cv.SIZES["full"], OTHER_FILTERS, other_metadata)
    libs: dict[str, Any] = {}
    for name, cls in SIDES.items():
        libs[name] = cls(shape.dim, workdir / name)
        libs[name].upsert(work.data, work.metas)
    out = timed(libs, work)
    for name in SIDES:
        libs[name].close()
    return out


def report(shape: cv.Shape, m: dict[str, Any]) -> str:
    results, numpy_side = m["results"], m["numpy"]
    lines = [f"### {shape.label}", "",
             "| measure | default | `hold_vectors=True` |", "|---|---|---|"]
    for target in map(str, cv.TARGETS):
        theirs = results["hnswlib"]["matched"].get(target)
        cells = []
        for name in SIDES:
            ours = results[name]["matched"].get(target)
            if ours is None or theirs is None:
                cells.append("not reached")
                continue
            cells.append(f"{ours['us']:.1f} µs (ef {ours['ef']}, recall {ours['recall']:.3f}): "
                         f"**{theirs['us'] / ours['us']:.2f}x** hnswlib's QPS")
        hnsw = "" if theirs is None else f" (hnswlib {theirs['us']:.1f} µs at ef {theirs['ef']})"
        lines.append(f"| QPS at recall@10 {target}{hnsw} | {cells[0]} | {cells[1]} |")
    for label, selectivity in m["cases"]:
        cells = []
        for name in SIDES:
            ours, scan = results[name]["filtered"][label], numpy_side[name]["filtered"][label]
            cells.append(f"{ours['us']:.1f} µs (recall {ours['recall']:.3f}) against numpy's "
                         f"{scan['us']:.1f}: **{scan['us'] / ours['us']:.2f}x**")
        lines.append(f"| `{label}` ({selectivity}) | {cells[0]} | {cells[1]} |")
    if "fixed" in m:
        beyond = [results[name]["memory"] - m["fixed"] for name in SIDES]
        memory = [f"{b / 2**20:.1f} MiB, **{b / m['raw_bytes']:.2f}x** the raw vectors" for b in beyond]
        lines.append(f"| resident memory of the index (a fresh process's, beyond the empty store's "
                     f"{m['fixed'] / 2**20:.1f} MiB) | {memory[0]} | {memory[1]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", metavar="LABEL", help="only these shapes, by label")
    parser.add_argument("--other-data", action="store_true",
                        help="other shapes and filter keys, timed right after the bulk upsert")
    args = parser.parse_args()
    every, run, out, title = ((OTHER_SHAPES, after_upsert, "held_vectors_other_data.md",
                               "on other data, right after the bulk upsert") if args.other_data else
                              (cv.SIZES["full"].shapes, measure, "held_vectors.md", "on file or held in memory"))
    shapes = [s for s in every if args.shapes is None or s.label in args.shapes]
    command = "python benches/held_vectors.py" + (" --other-data" if args.other_data else "")
    parts = [f"# Float vectors {title}\n",
             f"`{command}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"commit {cv._commit()}; see the script for what is timed.\n"]
    for shape in shapes:
        workdir = peers.temporary_dir()
        try:
            parts.append(report(shape, run(shape, workdir)))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print(parts[-1], flush=True)
    (Path(__file__).parent / "results" / out).write_text("\n".join(parts))

if __name__ == "__main__":
    main()
