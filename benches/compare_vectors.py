"""Side-by-side: threadrecall's vector store against hnswlib, faiss and usearch.

threadrecall is driven through its public API only: ``HnswVectorStore`` over a DuckDB file,
``create_index``, ``upsert``, ``query`` with metadata filters, ``link``. Peers: hnswlib,
faiss ``IndexHNSWFlat`` and ``IndexHNSWSQ`` (8-bit), usearch (f32 and i8), all with M = 16 and
a construction breadth of 200; a peer that is not installed is skipped.

One run, one thread for every library (faiss with one OpenMP thread, hnswlib, usearch and
threadrecall's store with ``threads=1``); the store's background linker and DuckDB's own
threads are counted in its build time, which is CPU seconds of the whole process. The store is
also built once more with two linking threads, timed by the wall clock against its one-thread
build. Query latencies are CPU seconds of the querying thread (the machine is shared: waiting
for a core is not a library's cost), medians of three passes where stated. The QPS at matched
recall is timed last, with every library of a shape loaded: one pass of all queries per
library in turn, seven rounds (the order rotating), medians; a host that slows down for a
minute then slows every library alike. The filtered queries and numpy's scans of the same
filters are then timed in turn the same way.

Data: seeded Gaussian mixtures, L2-normalised, cosine, two shapes with different cluster
counts and spreads; queries from the same mixture; exact ground truth by numpy (filtered
ground truth over the allowed subset). Metadata ``{"cat": i % 100, "tag": f"t{i % 1000}"}``,
filtered as users write them (``{"cat": 7}``, ``{"tag": {"$in": [...]}}``, ranges) at 10, 1
and 0.1 %.

Measured: build (bulk insert with linking), fresh-after-upsert latency at matched recall
(queries right after the bulk upsert, before any explicit link, at the lowest breadth whose
recall@10 reaches 0.95 on them), QPS at matched recall@10 (each library at the
lowest breadth whose recall reaches 0.95 / 0.99; single queries and, where the library has
one, a batch call), filtered recall and latency next to numpy over a prebuilt id subset and
next to each peer's own filtered search, and resident memory (RSS of a fresh interpreter
that loads only that index, minus its RSS before). Writes ``results/compare_vectors_<size>.md``
(and ``.json``, and a recall-QPS plot when matplotlib is installed).

    python benches/compare_vectors.py                 # 100k x 384 and 50k x 128
    python benches/compare_vectors.py --size small    # a smoke check, under two minutes

Peers: ``pip install -e '.[bench]'`` (hnswlib compiles from source).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import vector_peers as peers  # noqa: E402
from vector_data import K, SEED, exact_top_k, mixture, recall  # noqa: E402
from vector_report import render  # noqa: E402

REPEAT = 3
# Passes per library at each matched breadth, taken in turn across the libraries of a shape.
MATCHED_ROUNDS = 7
# One pass of a side's filtered queries: the ids found per query.
Pass = Callable[[], list[list[int]]]
# Queries the memory run makes once the index is loaded.
MEMORY_QUERIES = 1_000
TARGETS = (0.95, 0.99)
# Breadths a step of at most a quarter apart: a library whose recall reaches a target just past
# one is not charged for the next, wider one.
EFS = [10, 12, 14, 16, 18, 20, 24, 28, 32, 36, 40, 48, 56, 64, 72, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448,
       512, 640, 768, 1024]
FRESH_QUERIES = 200  # asked right after the bulk insert, at breadths rising to TARGETS[0]
PLATEAU = 4  # the sweep stops when this many wider breadths gained no recall
# Peers' filtered searches: this breadth (or their 0.99-matched one, when wider) at 10 %,
# widened by sqrt(10 % / selectivity) for rarer filters, as the store's planner widens its own.
FILTERED_EF = 64


@dataclass(frozen=True)
class Shape:
    label: str
    n: int
    dim: int
    clusters: int
    spread: float


@dataclass(frozen=True)
class Size:
    shapes: tuple[Shape, ...]
    queries: int  # unfiltered queries
    filtered: int  # queries per filter
    callback_filtered: int  # of those, for hnswlib's Python-callback filter
    numpy_exact: int  # queries for the numpy full scan


SIZES = {
    "full": Size(
        (Shape("100k x 384", 100_000, 384, 1000, 0.5), Shape("50k x 128", 50_000, 128, 20, 1.0)),
        1_000, 200, 50, 200),
    "small": Size(
        (Shape("8k x 96", 8_000, 96, 200, 0.5), Shape("6k x 48", 6_000, 48, 10, 1.0)),
        200, 40, 40, 100),
}


@dataclass(frozen=True)
class FilterCase:
    """A metadata filter as a user writes it, in ``groups`` disjoint variants (one per query,
    round-robin), and the ids each variant allows."""

    label: str
    selectivity: str
    groups: int
    where: Callable[[int], dict]
    allows: Callable[[np.ndarray, int], np.ndarray]


FILTERS = [
    FilterCase("cat $in (10 ints)", "10 %", 10,
               lambda g: {"cat": {"$in": [g + 10 * j for j in range(10)]}},
               lambda ids, g: (ids % 100) % 10 == g),
    FilterCase("cat range $gte/$lt", "10 %", 10,
               lambda g: {"cat": {"$gte": 10 * g, "$lt": 10 * g + 10}},
               lambda ids, g: (ids % 100) // 10 == g),
    FilterCase("cat == int", "1 %", 100, lambda g: {"cat": g}, lambda ids, g: ids % 100 == g),
    FilterCase("tag $in (10 strings)", "1 %", 100,
               lambda g: {"tag": {"$in": [f"t{g + 100 * j}" for j in range(10)]}},
               lambda ids, g: (ids % 1000) % 100 == g),
    FilterCase("tag == string", "0.1 %", 1000, lambda g: {"tag": f"t{g}"},
               lambda ids, g: ids % 1000 == g),
]


def metadata_for(i: int) -> dict:
    return {"cat": i % 100, "tag": f"t{i % 1000}"}


def cpu(fn: Callable[[], Any], repeat: int = 1) -> tuple[Any, float]:
    """The result of ``fn`` and the median CPU seconds of the calling thread over ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        start = time.thread_time()
        out = fn()
        times.append(time.thread_time() - start)
    return out, statistics.median(times)


def numpy_subset_query(subset: np.ndarray, members: np.ndarray, q: np.ndarray) -> list[int]:
    sims = subset @ q
    if len(sims) > K:
        top = np.argpartition(-sims, K - 1)[:K]
        return members[top[np.argsort(-sims[top])]].tolist()
    return members[np.argsort(-sims)].tolist()


def sweep(lib: Any, queries: np.ndarray, truth: list[list[int]],
          until: float = max(TARGETS)) -> list[tuple[int, float, float]]:
    """(ef, recall@10, µs per query) from the smallest breadth up to the first reaching
    ``until`` (one pass per breadth; the matched breadths are timed again)."""
    points = []
    for ef in EFS:
        lib.set_ef(ef)
        found, secs = cpu(lambda: [lib.query(q, K) for q in queries])
        points.append((ef, recall(found, truth), secs / len(queries) * 1e6))
        if points[-1][1] >= until:
            break
        if len(points) > PLATEAU and points[-1][1] - points[-1 - PLATEAU][1] < 0.001:
            break  # quantised vectors cap the recall: wider searches only cost time
    return points


def matched(lib: Any, points: list, queries: np.ndarray, truth: list[list[int]]) -> dict:
    """For each target, the lowest breadth reaching it and its recall, single queries and
    batch (timed later by ``interleaved``, beside the other libraries)."""
    out = {}
    for target in TARGETS:
        ef = next((ef for ef, r, _ in points if r >= target), None)
        if ef is None:
            out[str(target)] = None
            continue
        lib.set_ef(ef)
        entry = {"ef": ef, "recall": recall([lib.query(q, K) for q in queries], truth)}
        if getattr(lib, "has_batch", False):
            entry["batch_recall"] = recall(np.asarray(lib.batch(queries, K)).tolist(), truth)
        out[str(target)] = entry
    return out


def interleaved(libs: dict[str, Any], results: dict[str, dict], queries: np.ndarray) -> None:
    """Time every library at its matched breadths in turn: per target, ``MATCHED_ROUNDS``
    rounds of one pass of all queries per library (and per batch call), the order rotating
    each round; the median pass becomes the entry's µs per query."""
    for target in map(str, TARGETS):
        runs = []
        for name, lib in libs.items():
            entry = results[name]["matched"].get(target)
            if entry is None:
                continue
            runs.append((entry, "us", lib, entry["ef"], lambda lib=lib: [lib.query(q, K) for q in queries]))
            if "batch_recall" in entry:
                runs.append((entry, "batch_us", lib, entry["ef"], lambda lib=lib: lib.batch(queries, K)))
        passes: dict[int, list[float]] = {i: [] for i in range(len(runs))}
        for r in range(MATCHED_ROUNDS):
            for i in [(r + j) % len(runs) for j in range(len(runs))]:
                entry, key, lib, ef, run = runs[i]
                lib.set_ef(ef)
                passes[i].append(cpu(run)[1])
        for i, (entry, key, *_) in enumerate(runs):
            entry[key] = statistics.median(passes[i]) / len(queries) * 1e6


def filtered_passes(lib: Any, work: Workload) -> dict[str, tuple[Pass, Pass]]:
    """Per filter, one pass of threadrecall's filtered queries and one of numpy's scans of the
    prebuilt allowed rows, each returning the ids found per query."""
    passes = {}
    for label, (case, plan, members, subsets) in work.filters.items():
        wheres = [case.where(g) for _, g, _ in plan]

        def ours(plan: list = plan, wheres: list = wheres) -> list[list[int]]:
            return [lib.query(q, K, w) for (q, _, _), w in zip(plan, wheres)]

        def exact(plan: list = plan, members: dict = members, subsets: dict = subsets) -> list[list[int]]:
            return [numpy_subset_query(subsets[g], members[g], q) for q, g, _ in plan]

        passes[label] = (ours, exact)
    return passes


def filters_in_turn(lib: Any, work: Workload, ours: dict, numpy_side: dict) -> None:
    """threadrecall's filtered queries (at its default breadth) and numpy's scans of the
    prebuilt subsets, timed in turn: per filter, ``MATCHED_ROUNDS`` rounds of one pass each,
    the order alternating; the median pass is each side's µs per query. Records recall@10 too."""
    lib.set_ef(None)
    for label, sides in filtered_passes(lib, work).items():
        truth = [t for _, _, t in work.filters[label][1]]
        found: list[Any] = [None, None]
        times: list[list[float]] = [[], []]
        for r in range(MATCHED_ROUNDS):
            for i in (0, 1) if r % 2 == 0 else (1, 0):
                found[i], secs = cpu(sides[i])
                times[i].append(secs)
        for side, entry in enumerate((ours, numpy_side)):
            entry.setdefault("filtered", {})[label] = {
                "recall": recall(found[side], truth), "us": statistics.median(times[side]) / len(truth) * 1e6}


def memory(name: str, path: Path, dim: int) -> int:
    """Resident bytes the index adds to a fresh interpreter that loads only it."""
    out = subprocess.run([sys.executable, __file__, "--memory", name, str(path), str(dim)],
                         check=True, capture_output=True, text=True, env=os.environ.copy())
    reading = json.loads(out.stdout.strip().splitlines()[-1])
    return reading["after"] - reading["baseline"]


def memory_child(name: str, path: str, dim: int) -> None:
    """The body of one memory run: import, read the baseline, load, run queries (what they
    touch counts too: threadrecall reads float vectors from its vectors file as it re-ranks),
    read again."""
    module = ("threadrecall.vector" if name.startswith("threadrecall") else "hnswlib" if name == "hnswlib"
              else "faiss" if name.startswith("faiss") else "usearch.index")
    __import__(module)
    gc.collect()
    baseline = peers.rss_bytes()
    held = peers.LOADERS[name](path, dim)
    queries = np.random.default_rng(SEED).standard_normal((MEMORY_QUERIES, dim), dtype=np.float32)
    peers.QUERIERS[name](held, queries, K)
    gc.collect()
    print(json.dumps({"baseline": baseline, "after": peers.rss_bytes()}))
    del held


class Workload:
    """One data shape: vectors, queries, metadata, ground truth and the filter plans."""

    def __init__(self, shape: Shape, size: Size, filters: Sequence[FilterCase] = FILTERS,
                 metadata: Callable[[int], dict] = metadata_for) -> None:
        rng = np.random.default_rng(SEED + shape.n + shape.dim)
        centres = rng.standard_normal((shape.clusters, shape.dim), dtype=np.float32)
        self.shape = shape
        self.data = mixture(rng, shape.n, centres, shape.spread)
        self.queries = mixture(rng, size.queries, centres, shape.spread)
        self.truth = exact_top_k(self.data, self.queries, K)
        self.metas = [metadata(i) for i in range(shape.n)]
        ids = np.arange(shape.n)
        self.filters = {}
        for case in filters:
            groups = sorted({j % case.groups for j in range(size.filtered)})
            members = {g: ids[case.allows(ids, g)] for g in groups}
            subsets = {g: self.data[m] for g, m in members.items()}
            plan = []
            for j in range(size.filtered):
                g, q = j % case.groups, self.queries[j % len(self.queries)]
                plan.append((q, g, members[g][np.argsort(-(subsets[g] @ q))[:K]].tolist()))
            self.filters[case.label] = (case, plan, members, subsets)


def measure_ours(work: Workload, workdir: Path) -> tuple[dict, Any]:
    result: dict[str, Any] = {"build_wall_s": {}}
    lib = peers.Threadrecall(work.shape.dim, workdir / "two", threads=2)
    result["build_wall_s"]["2"] = build_wall(lib, work)
    lib.close()
    lib = peers.Threadrecall(work.shape.dim, workdir)
    start, wall = time.process_time(), time.perf_counter()
    lib.upsert(work.data, work.metas)
    result["upsert_s"] = time.process_time() - start
    fresh_wall, fresh_cpu = time.perf_counter(), time.thread_time()
    fresh(lib, work, result)
    fresh_wall, fresh_cpu = time.perf_counter() - fresh_wall, time.thread_time() - fresh_cpu
    lib.link()
    # Whole-process CPU (the background linker and DuckDB threads too), minus this thread's
    # during the fresh queries (the queries and the sweep's own work around them).
    result["build_s"] = time.process_time() - start - fresh_cpu
    result["build_wall_s"]["1"] = time.perf_counter() - wall - fresh_wall
    result["link_s"] = result["build_s"] - result["upsert_s"]
    lib.store.flush()  # the index file written now, not during the timings below
    measure_queries(lib, work, result)
    lib.set_ef(None)
    found, secs = cpu(lambda: [lib.query(q, K) for q in work.queries], REPEAT)
    result["default"] = {"recall": recall(found, work.truth), "us": secs / len(work.queries) * 1e6}
    return result, lib


def build_wall(lib: Any, work: Workload) -> float:
    """Wall seconds of the bulk upsert and link of ``work`` into ``lib``."""
    start = time.perf_counter()
    lib.upsert(work.data, work.metas)
    lib.link()
    return time.perf_counter() - start


def close_ours(lib: Any, result: dict, work: Workload, workdir: Path) -> None:
    """Close the store and measure its memory in a fresh process, and the fixed part of it:
    the same store over a file whose index is empty."""
    lib.close()
    result["memory"] = memory(lib.name, lib.path, work.shape.dim)
    empty = peers.Threadrecall(work.shape.dim, workdir / "empty")
    empty.close()
    result["memory_empty"] = memory(lib.name, empty.path, work.shape.dim)


def fresh(lib: Any, work: Workload, result: dict) -> None:
    """Queries right after the bulk insert, at matched recall: the sweep over the first
    ``FRESH_QUERIES`` queries up to recall@10 ``TARGETS[0]``, every library alike. Records the
    last breadth's CPU µs per query and recall."""
    qs = work.queries[:FRESH_QUERIES]
    points = sweep(lib, qs, work.truth[:FRESH_QUERIES], until=TARGETS[0])
    result["fresh_ef"], result["fresh_recall"], result["fresh_us"] = points[-1]


def measure_queries(lib: Any, work: Workload, result: dict) -> None:
    result["sweep"] = sweep(lib, work.queries, work.truth)
    result["matched"] = matched(lib, result["sweep"], work.queries, work.truth)


def measure_peer(cls: type, work: Workload, size: Size, workdir: Path) -> tuple[dict, Any]:
    lib = cls(work.shape.dim)
    result: dict[str, Any] = {}
    start = time.process_time()
    lib.build(work.data)
    result["build_s"] = time.process_time() - start
    fresh(lib, work, result)
    measure_queries(lib, work, result)
    result["filtered"] = {}
    if lib.filtered is not None:
        m99 = result["matched"].get(str(TARGETS[-1]))
        base = max(FILTERED_EF, m99["ef"] if m99 else 0)
        limit = size.callback_filtered if cls is peers.Hnswlib else size.filtered
        for label, (case, plan, members, _) in work.filters.items():
            share = float(case.selectivity.rstrip(" %")) / 100
            ef = min(EFS[-1], int(base * max(1.0, 0.1 / share) ** 0.5))
            lib.set_ef(ef)
            allowed = {g: lib.prepare(m) for g, m in members.items()}  # prebuilt, untimed
            sub = plan[:limit]
            failures = []

            def run():
                out = []
                for q, g, _ in sub:
                    try:
                        out.append(lib.filtered(q, K, allowed[g]))
                    except RuntimeError:  # hnswlib: fewer than k results found
                        failures.append(1)
                        out.append([])
                return out

            found, secs = cpu(run)
            result["filtered"][label] = {"recall": recall(found, [t for _, _, t in sub]),
                                         "us": secs / len(sub) * 1e6, "ef": ef,
                                         "queries": len(sub), "failures": len(failures)}
    path = workdir / cls.__name__
    lib.save(str(path))
    result["memory"] = memory(cls.name, path, work.shape.dim)
    path.unlink(missing_ok=True)
    return result, lib


def measure_numpy(work: Workload, size: Size) -> dict:
    out: dict[str, Any] = {}
    qs = work.queries[:size.numpy_exact]
    ids = np.arange(work.shape.n)
    _, secs = cpu(lambda: [numpy_subset_query(work.data, ids, q) for q in qs], REPEAT)
    out["exact_us"] = secs / len(qs) * 1e6
    return out


def run(size_name: str, out_dir: Path, shapes: list[str] | None = None,
        chosen: list[str] | None = None) -> None:
    """Measure every shape of ``size_name`` (or those labelled in ``shapes``) with every
    installed peer (or those named in ``chosen``); the report's file name carries the
    selection when there is one."""
    size = SIZES[size_name]
    found, skipped = peers.available()
    if chosen is not None:
        skipped += [f"{cls.name}: not selected in this run" for cls in found if cls.name not in chosen]
        found = [cls for cls in found if cls.name in chosen]
    todo = [s for s in size.shapes if shapes is None or s.label in shapes]
    stem = f"compare_vectors_{size_name}" + (
        "" if shapes is None and chosen is None else
        "_" + "_".join(s.label.replace(" ", "") for s in todo) + ("" if chosen is None else "_selected"))
    report: dict[str, Any] = {"size": size_name, "stem": stem, "skipped": skipped, "shapes": [],
                              "commit": _commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    workdir = peers.temporary_dir()
    started = time.time()
    try:
        for shape in todo:
            print(f"[{time.time() - started:6.0f} s] {shape.label}: data and ground truth", flush=True)
            work = Workload(shape, size)
            entry: dict[str, Any] = {"shape": shape.__dict__, "queries": size.queries, "memory_queries": MEMORY_QUERIES,
                                     "filtered_queries": size.filtered, "libraries": {},
                                     "filter_selectivity": [(c.label, c.selectivity) for c in FILTERS]}
            entry["numpy"] = measure_numpy(work, size)
            print(f"[{time.time() - started:6.0f} s] {shape.label}: threadrecall", flush=True)
            ours = workdir / shape.label.replace(" ", "")
            entry["libraries"]["threadrecall"], store = measure_ours(work, ours)
            libs = {"threadrecall": store}
            for cls in found:
                print(f"[{time.time() - started:6.0f} s] {shape.label}: {cls.name}", flush=True)
                entry["libraries"][cls.name], libs[cls.name] = measure_peer(cls, work, size, workdir)
            print(f"[{time.time() - started:6.0f} s] {shape.label}: matched breadths, in turn", flush=True)
            interleaved(libs, entry["libraries"], work.queries)
            filters_in_turn(store, work, entry["libraries"]["threadrecall"], entry["numpy"])
            close_ours(store, entry["libraries"]["threadrecall"], work, ours)
            del libs, store
            report["shapes"].append(entry)
            report["seconds"] = time.time() - started
            report["partial"] = len(report["shapes"]) < len(todo)
            write(report, out_dir)  # each finished shape is kept, should a later one not finish
            del work
            gc.collect()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print((out_dir / f"{stem}.md").read_text())
    plot(report, out_dir / f"{stem}.png")


def write(report: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = report["stem"]
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=1))
    (out_dir / f"{stem}.md").write_text(render(report))


def _commit() -> str:
    """The commit measured (with ``+dirty`` when the tree has changes), or ``unknown``."""
    try:
        here = Path(__file__).parent
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def plot(report: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # optional
        return
    shapes = report["shapes"]
    fig, axes = plt.subplots(1, len(shapes), figsize=(6 * len(shapes), 4), squeeze=False)
    for ax, entry in zip(axes[0], shapes):
        for name, res in entry["libraries"].items():
            pts = res["sweep"]
            ax.plot([p[1] for p in pts], [1e6 / p[2] for p in pts], marker="o", ms=3, label=name)
        ax.set_xlabel("recall@10")
        ax.set_ylabel("queries per CPU second (1 thread)")
        ax.set_yscale("log")
        ax.set_title(entry["shape"]["label"])
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--memory":
        memory_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--shapes", nargs="+", metavar="LABEL",
                        help="only these shapes, by label (e.g. '100k x 384')")
    parser.add_argument("--peers", nargs="+", metavar="NAME",
                        help="only these peers, by name (e.g. hnswlib 'faiss HNSWFlat')")
    args = parser.parse_args()
    labels = [s.label for s in SIZES[args.size].shapes]
    names = [cls.name for cls in peers.PEERS]
    for label in args.shapes or []:
        if label not in labels:
            parser.error(f"no shape {label!r} in size {args.size}; shapes: {labels}")
    for name in args.peers or []:
        if name not in names:
            parser.error(f"no peer {name!r}; peers: {names}")
    run(args.size, args.out, args.shapes, args.peers)


if __name__ == "__main__":
    main()
