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

    python benches/held_vectors.py                         # 100k x 384 and 50k x 128
    python benches/held_vectors.py --shapes '50k x 128'

Writes ``results/held_vectors.md``.
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


def measure(shape: cv.Shape, workdir: Path) -> dict[str, Any]:
    work = cv.Workload(shape, cv.SIZES["full"])
    built = peers.Threadrecall(shape.dim, workdir / "default", threads=2)
    built.upsert(work.data, work.metas)
    built.link()
    built.close()
    shutil.copytree(workdir / "default", workdir / "held")
    libs: dict[str, Any] = {name: cls(shape.dim, workdir / name) for name, cls in SIDES.items()}
    libs["hnswlib"] = peers.Hnswlib(shape.dim)
    libs["hnswlib"].build(work.data)
    results: dict[str, dict] = {name: {} for name in libs}
    for name, lib in libs.items():
        cv.measure_queries(lib, work, results[name])
    cv.interleaved(libs, results, work.queries)
    numpy_side: dict[str, dict] = {name: {} for name in SIDES}
    for name in SIDES:
        cv.filters_in_turn(libs[name], work, results[name], numpy_side[name])
    for name in SIDES:
        libs[name].close()
        results[name]["memory"] = cv.memory(SIDES[name].name, libs[name].path, shape.dim)
    empty = peers.Threadrecall(shape.dim, workdir / "empty")
    empty.close()
    fixed = cv.memory(empty.name, empty.path, shape.dim)  # DuckDB and a store whose index is empty
    return {"results": results, "numpy": numpy_side, "raw_bytes": shape.n * shape.dim * 4, "fixed": fixed}


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
    for label, selectivity in ((c.label, c.selectivity) for c in cv.FILTERS):
        cells = []
        for name in SIDES:
            ours, scan = results[name]["filtered"][label], numpy_side[name]["filtered"][label]
            cells.append(f"{ours['us']:.1f} µs (recall {ours['recall']:.3f}) against numpy's "
                         f"{scan['us']:.1f}: **{scan['us'] / ours['us']:.2f}x**")
        lines.append(f"| `{label}` ({selectivity}) | {cells[0]} | {cells[1]} |")
    beyond = [results[name]["memory"] - m["fixed"] for name in SIDES]
    memory = [f"{b / 2**20:.1f} MiB, **{b / m['raw_bytes']:.2f}x** the raw vectors" for b in beyond]
    lines.append(f"| resident memory of the index (a fresh process's, beyond the empty store's "
                 f"{m['fixed'] / 2**20:.1f} MiB) | {memory[0]} | {memory[1]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", metavar="LABEL", help="only these shapes, by label")
    args = parser.parse_args()
    shapes = [s for s in cv.SIZES["full"].shapes if args.shapes is None or s.label in args.shapes]
    parts = ["# Float vectors on file or held in memory\n",
             f"`python benches/held_vectors.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"commit {cv._commit()}; see the script for what is timed.\n"]
    for shape in shapes:
        workdir = peers.temporary_dir()
        try:
            parts.append(report(shape, measure(shape, workdir)))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print(parts[-1], flush=True)
    (Path(__file__).parent / "results" / "held_vectors.md").write_text("\n".join(parts))


if __name__ == "__main__":
    main()
