"""The speed report: one command, one process, one run, one markdown file with plots.

    python benches/report.py --size small     # CI-sized, under a minute
    python benches/report.py --size full      # 100,000 vectors and messages

Sections: the machine; vector search (threadrecall HNSW vs hnswlib vs numpy exact: recall@10,
QPS and latency percentiles per ``ef``); filtered vector search at 10 %, 1 % and 0.1 %
selectivity; ``recall()`` history paths vs the same questions in raw DuckDB SQL; semantic
recall end to end (HashEmbedder 384-d; vector, lexical and hybrid modes; thread and resource
scope); the cost of building the lexical index. Every latency is the median (with p95 / p99)
over many calls, every comparison a ratio of medians. Writes ``benchmark-report.md`` and
PNG plots (when matplotlib is installed) to ``--out`` (default ``benches/results``).
hnswlib and matplotlib come with ``pip install -e '.[bench]'``; without them their parts are
marked skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata as dist
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

HERE = Path(__file__).resolve().parent


def _load(name: str, file: str) -> Any:
    """A module of this folder by path (``conftest`` would clash with the tests' own)."""
    spec = importlib.util.spec_from_file_location(name, HERE / file)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cv = _load("vector_data", "vector_data.py")
fixtures = _load("bench_fixtures", "conftest.py")
# bench_recall.py (read for its SQL) imports ``conftest``: give it this folder's, even under pytest.
_outer_conftest = sys.modules.get("conftest")
sys.modules["conftest"] = fixtures
try:
    recall_sql = _load("bench_recall_sql", "bench_recall.py")
finally:
    if _outer_conftest is None:
        del sys.modules["conftest"]
    else:
        sys.modules["conftest"] = _outer_conftest

from threadrecall import Memory, _core  # noqa: E402
from threadrecall.cli import import_messages  # noqa: E402
from threadrecall.embedders import HashEmbedder  # noqa: E402
from threadrecall.storage import DuckDBStorage  # noqa: E402

try:
    import hnswlib
except ImportError:  # optional
    hnswlib = None


@dataclass(frozen=True)
class Size:
    vectors: int
    dim: int
    queries: int
    centres: int
    messages: int
    calls: int  # calls per measured recall path
    semantic_messages: int


SIZES = {
    "small": Size(10_000, 128, 200, 100, 10_000, 300, 5_000),
    "full": Size(100_000, 384, 1_000, 1_000, 100_000, 1_000, 100_000),
}
EFS = [16, 32, 64, 128, 256]
K = cv.K
# selectivity -> number of disjoint groups of that size (ten resources, one resource, one thread)
SELECTIVITY = {"10%": 10, "1%": 100, "0.1%": 1000}


def metadata_for(i: int) -> dict:
    return {"resource_id": f"r{i % 100}", "thread_id": f"t{i % 1000}"}


def group_filter(selectivity: str, g: int) -> dict:
    if selectivity == "10%":
        return {"resource_id": {"$in": [f"r{g + 10 * j}" for j in range(10)]}}
    if selectivity == "1%":
        return {"resource_id": f"r{g}"}
    return {"thread_id": f"t{g}"}


def group_members(selectivity: str, g: int, n: int) -> np.ndarray:
    ids = np.arange(n)
    if selectivity == "10%":
        return ids[(ids % 100) % 10 == g]
    if selectivity == "1%":
        return ids[ids % 100 == g]
    return ids[ids % 1000 == g]


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """The result of ``fn`` and the CPU seconds of this process it took."""
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start
SECTIONS = (
    "## Machine",
    "## Vector search, unfiltered",
    "## Vector search, filtered",
    "## recall() vs raw DuckDB SQL",
    "## Semantic recall end to end",
    "## Lexical index build",
)


# ---------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timing:
    """Per-call latencies of one measured path (seconds)."""

    seconds: np.ndarray

    @property
    def median_us(self) -> float:
        return float(np.median(self.seconds) * 1e6)

    def percentile_us(self, q: float) -> float:
        return float(np.percentile(self.seconds, q) * 1e6)

    @property
    def qps(self) -> float:
        """Calls per second at the median latency."""
        return 1e6 / self.median_us

    def cells(self) -> list[str]:
        return [f"{self.median_us:,.1f}", f"{self.percentile_us(95):,.1f}", f"{self.percentile_us(99):,.1f}"]


def measure(fn: Callable[[Any], Any], items: Sequence[Any], warmup: int = 5) -> tuple[list[Any], Timing]:
    """Call ``fn`` on each item, timing every call on its own; returns results and timings."""
    for item in items[:warmup]:
        fn(item)
    out, seconds = [], np.empty(len(items))
    for i, item in enumerate(items):
        start = time.perf_counter()
        out.append(fn(item))
        seconds[i] = time.perf_counter() - start
    return out, Timing(seconds)


def ratio(slow: Timing, fast: Timing) -> str:
    return f"{slow.median_us / fast.median_us:.1f}x"


# ---------------------------------------------------------------------------- sections


def machine() -> list[str]:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"

    def version(name: str) -> str:
        try:
            return dist.version(name)
        except dist.PackageNotFoundError:
            return "not installed"

    libs = ", ".join(f"{n} {version(n)}" for n in
                     ("threadrecall", "numpy", "duckdb", "pyarrow", "hnswlib", "matplotlib"))
    return [
        SECTIONS[0], "",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- CPU: {cpu}; {os.cpu_count()} logical cores; load average (1, 5, 15 min) at start: {load}",
        f"- Python {platform.python_version()} on {platform.system()} {platform.release()}",
        f"- libraries: {libs}",
        "- one process, one thread per search; latencies are medians over every call "
        "(p95 / p99 beside them), ratios are ratios of medians", "",
    ]


def vector_search(size: Size, curves: dict[str, list[tuple[float, float]]],
                  percentiles: dict[str, Timing]) -> list[str]:
    rng = np.random.default_rng(cv.SEED)
    centres = rng.standard_normal((size.centres, size.dim), dtype=np.float32)
    data = cv.mixture(rng, size.vectors, centres)
    queries = cv.mixture(rng, size.queries, centres)
    truth = cv.exact_top_k(data, queries, K)
    ids = [str(i) for i in range(size.vectors)]
    metas = [metadata_for(i) for i in range(size.vectors)]

    ours = _core.VectorIndex(size.dim, "cosine", m=16, ef_construction=200, seed=0)
    with tqdm(total=1, desc="build threadrecall HNSW", file=sys.stderr, leave=False):
        _, ours_build = timed(lambda: ours.add(ids, data, metas, link=True))
    assert ours.pending == 0, "the graph measured must be fully built"
    theirs = None
    if hnswlib is not None:
        theirs = hnswlib.Index(space="ip", dim=size.dim)
        theirs.init_index(max_elements=size.vectors, M=16, ef_construction=200, random_seed=0)
        theirs.set_num_threads(1)
        with tqdm(total=1, desc="build hnswlib", file=sys.stderr, leave=False):
            _, their_build = timed(lambda: theirs.add_items(data, np.arange(size.vectors), num_threads=1))

    qs = list(queries)
    found, exact = measure(lambda q: np.argsort(-(data @ q))[:K].tolist(), qs)
    percentiles["numpy exact"] = exact
    rows = [
        SECTIONS[1], "",
        f"{size.vectors:,} vectors x {size.dim} (seeded Gaussian mixture, cosine), {size.queries:,} queries, "
        f"M=16, ef_construction=200. Build: threadrecall {ours_build:.1f} s"
        + (f", hnswlib {their_build:.1f} s" if theirs is not None else ", hnswlib skipped (not installed)")
        + f". numpy exact scan: recall 1.000, median {exact.median_us:,.0f} µs, {exact.qps:,.0f} QPS.", "",
        "| ef | ours recall@10 | ours median µs | p95 | p99 | ours QPS | hnswlib recall@10 | hnswlib median µs "
        "| hnswlib QPS | ours vs hnswlib | ours vs numpy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    # The exact scan just streamed the whole matrix through the caches: walk both graphs once
    # before timing, so the first breadth measured is not the one that loads them back.
    for q in qs:
        ours.search(q, K, ef=EFS[0])
    if theirs is not None:
        theirs.set_ef(EFS[0])
        theirs.knn_query(qs, k=K, num_threads=1)
    for ef in tqdm(EFS, desc="unfiltered search by ef", file=sys.stderr, leave=False):
        found, ours_t = measure(lambda q: [int(i) for i, _ in ours.search(q, K, ef=ef)], qs)
        r_ours = cv.recall(found, truth)
        curves.setdefault("threadrecall", []).append((r_ours, ours_t.qps))
        if ef == 64:
            percentiles["threadrecall ef=64"] = ours_t
        them = ["skipped"] * 3 + ["-"]
        if theirs is not None:
            theirs.set_ef(ef)
            found, their_t = measure(lambda q: theirs.knn_query(q, k=K, num_threads=1)[0][0].tolist(), qs)
            r_them = cv.recall(found, truth)
            curves.setdefault("hnswlib", []).append((r_them, their_t.qps))
            if ef == 64:
                percentiles["hnswlib ef=64"] = their_t
            them = [f"{r_them:.3f}", f"{their_t.median_us:,.1f}", f"{their_t.qps:,.0f}", ratio(their_t, ours_t)]
        rows.append(f"| {ef} | {r_ours:.3f} | " + " | ".join(ours_t.cells()) + f" | {ours_t.qps:,.0f} | "
                    + " | ".join(them) + f" | {ratio(exact, ours_t)} |")
    curves["numpy exact"] = [(1.0, exact.qps)]
    rows.append("")
    rows += filtered_search(size, data, queries, ours, theirs)
    return rows


def filtered_search(size: Size, data: np.ndarray, queries: np.ndarray, ours: Any, theirs: Any) -> list[str]:
    rows = [
        SECTIONS[2], "",
        "A filter selects 10 %, 1 % or 0.1 % of the vectors (ten resources, one resource, one thread). "
        "threadrecall plans each query (exact scan of the allowed vectors or filtered graph search); "
        "hnswlib (ef=64) takes a Python filter callback; numpy scans only the allowed subset.", "",
        "| selectivity | ours recall@10 | ours median µs | p95 | p99 | hnswlib recall@10 | hnswlib median µs "
        "| numpy subset median µs | ours vs hnswlib | ours vs numpy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    if theirs is not None:
        theirs.set_ef(64)
    n = size.vectors
    for name, groups in tqdm(SELECTIVITY.items(), desc="filtered search", file=sys.stderr, leave=False):
        members = {g: group_members(name, g, n) for g in range(min(groups, size.queries))}
        subsets = {g: data[m] for g, m in members.items()}
        plan = [(q, j % len(members)) for j, q in enumerate(queries)]
        truth = np.array([members[g][np.argsort(-(subsets[g] @ q))[:K]].tolist() for q, g in plan])
        filters = {g: group_filter(name, g) for g in members}
        found, ours_t = measure(lambda p: [int(i) for i, _ in ours.search(p[0], K, filter=filters[p[1]])], plan)
        r_ours = cv.recall(found, truth)
        _, numpy_t = measure(lambda p: members[p[1]][np.argsort(-(subsets[p[1]] @ p[0]))[:K]].tolist(), plan)
        them = ["skipped", "skipped", "-"]
        if theirs is not None:
            allowed = {g: set(m.tolist()) for g, m in members.items()}
            found, their_t = measure(
                lambda p: theirs.knn_query(p[0], k=K, num_threads=1, filter=allowed[p[1]].__contains__)[0][0].tolist(),
                plan)
            them = [f"{cv.recall(found, truth):.3f}", f"{their_t.median_us:,.1f}", ratio(their_t, ours_t)]
        rows.append(f"| {name} | {r_ours:.3f} | " + " | ".join(ours_t.cells()) + f" | {them[0]} | {them[1]} | "
                    f"{numpy_t.median_us:,.1f} | {them[2]} | {ratio(numpy_t, ours_t)} |")
    rows.append("")
    return rows


def history_paths(size: Size, workdir: Path) -> tuple[list[str], dict[str, Timing]]:
    memory = Memory(storage=DuckDBStorage(workdir / "history.duckdb"))
    import_messages(memory, fixtures.conversation(size.messages), total=size.messages, batch=10_000)
    threads = max(1, size.messages // 100)
    rng = random.Random(1)
    picks = [f"t{rng.randrange(threads)}" for _ in range(size.calls)]
    includes = [[f"m{rng.randrange(size.messages)}" for _ in range(5)] for _ in range(size.calls)]
    cur = memory.storage.db.cursor()
    paths: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any], Sequence[Any]]] = [
        ("last 20 messages", lambda t: memory.recall(t, per_page=20),
         lambda t: cur.execute(recall_sql.LAST_20, [t]).fetchall(), picks),
        ("page 2 of 50", lambda t: memory.recall(t, per_page=50, page=1),
         lambda t: cur.execute(recall_sql.PAGE, [t]).fetchall(), picks),
        ("metadata filter, 20", lambda t: memory.recall(t, per_page=20, filter={"metadata": {"topic": "billing"}}),
         lambda t: cur.execute(recall_sql.BY_META, [t]).fetchall(), picks),
        ("5 includes ±2", lambda ids: memory.recall("t0", per_page=0, include=[
            {"id": i, "with_previous_messages": 2, "with_next_messages": 2} for i in ids]),
         lambda ids: [cur.execute(recall_sql.WINDOW, [i]).fetchall() for i in ids], includes),
    ]
    rows = [
        SECTIONS[3], "",
        f"{size.messages:,} messages over {threads:,} threads in arrival order, in a DuckDB file; "
        f"{size.calls:,} calls per path on random threads. The SQL is the same question asked of the "
        "messages table directly (rows fetched, not decoded into messages).", "",
        "| path | recall() median µs | p95 | p99 | DuckDB SQL median µs | p95 | p99 | SQL / recall() |",
        "|---|---|---|---|---|---|---|---|",
    ]
    timings = {}
    for name, ours, sql, items in tqdm(paths, desc="recall() vs SQL", file=sys.stderr, leave=False):
        _, ours_t = measure(ours, items)
        _, sql_t = measure(sql, items)
        timings[f"recall(): {name}"] = ours_t
        rows.append(f"| {name} | " + " | ".join(ours_t.cells()) + " | " + " | ".join(sql_t.cells())
                    + f" | {ratio(sql_t, ours_t)} |")
    rows.append("")
    memory.storage.close()
    return rows, timings


INGEST_BATCH = 1_000
UPKEEP_BATCH = 1_000


def semantic_recall(size: Size) -> tuple[list[str], dict[str, Timing]]:
    n = size.semantic_messages
    memory = Memory(embedder=HashEmbedder(dim=384), options={"last_messages": 10, "semantic_recall": {
        "top_k": 4, "message_range": 1}})
    started = time.perf_counter()  # wall time: the graph links on a second thread meanwhile
    import_messages(memory, fixtures.conversation(n), total=n, batch=INGEST_BATCH)
    saved = time.perf_counter() - started
    memory.vector.link()  # measure the steady state: every vector in the graph
    threads = max(1, n // 100)
    rng = random.Random(2)
    topics = ["billing", "support", "travel", "books", "food"]
    asks = [(f"t{rng.randrange(threads)}", f"what about {rng.choice(topics)} and item {rng.randrange(1000)}")
            for _ in range(size.calls)]
    _, built = timed(memory.storage.lexical)
    rows = [
        SECTIONS[4], "",
        f"{n:,} messages saved in batches of {INGEST_BATCH:,} with semantic recall on (HashEmbedder, "
        f"384-d) in {saved:.1f} s of wall time: {n / saved:,.0f} messages/s, embedding and the DuckDB and "
        "HNSW writes included, while a background thread links the vectors into the graph. Once the "
        "graph holds them all, each call embeds the query (cached after its first use), searches, "
        "expands neighbours and reads the last 10 messages: `recall(thread, resource_id=..., "
        f"vector_search_string=...)` with top_k 4, message_range 1. {size.calls:,} calls per row.", "",
        "| mode | scope | median µs | p95 | p99 | calls/s |",
        "|---|---|---|---|---|---|",
    ]
    timings = {}
    for mode in tqdm(("vector", "lexical", "hybrid"), desc="semantic recall", file=sys.stderr, leave=False):
        for scope in ("thread", "resource"):
            config = {"semantic_recall": {"mode": mode, "scope": scope}}
            _, t = measure(lambda a: memory.recall(a[0], resource_id=f"r{int(a[0][1:]) % 100}",
                                                   vector_search_string=a[1], thread_config=config), asks)
            timings[f"semantic {mode}, {scope}"] = t
            rows.append(f"| {mode} | {scope} | " + " | ".join(t.cells()) + f" | {t.qps:,.0f} |")
    without, with_index = lexical_upkeep(size)
    rows += ["", SECTIONS[5], "",
             f"The BM25 index is built on the first lexical or hybrid recall: {n:,} messages in "
             f"{built * 1e3:,.0f} ms ({n / built:,.0f} messages/s), then kept up to date after each commit. "
             f"Saving messages in batches of {UPKEEP_BATCH:,} (no embedder; median per batch) runs at "
             f"{without.qps * UPKEEP_BATCH:,.0f} messages/s without the index and "
             f"{with_index.qps * UPKEEP_BATCH:,.0f} messages/s with it "
             f"({with_index.median_us / without.median_us - 1:+.0%}). Keeping it is cheap; building it "
             "would slow every open, so it is built on the first lexical or hybrid recall, not at open.", ""]
    return rows, timings


def lexical_upkeep(size: Size) -> tuple[Timing, Timing]:
    """Per-batch save latency of two fresh stores, the second keeping a lexical index; batches
    alternate between the two so drift in the machine's load hits both alike."""
    n = max(UPKEEP_BATCH * 10, size.messages // 2)
    rows = list(fixtures.conversation(n))
    batches = [rows[i:i + UPKEEP_BATCH] for i in range(0, n, UPKEEP_BATCH)]
    plain, indexed = Memory(), Memory()
    indexed.storage.lexical()
    seconds = np.empty((len(batches), 2))
    for i, batch in enumerate(tqdm(batches, desc="saves with/without the lexical index", file=sys.stderr,
                                   leave=False)):
        for j, memory in enumerate((plain, indexed) if i % 2 else (indexed, plain)):
            start = time.perf_counter()
            memory.save_messages(batch)
            seconds[i, j if i % 2 else 1 - j] = time.perf_counter() - start
    plain.storage.close()
    indexed.storage.close()
    return Timing(seconds[:, 0]), Timing(seconds[:, 1])


def plots(out: Path, curves: dict[str, list[tuple[float, float]]], timings: dict[str, Timing]) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["(plots skipped: matplotlib is not installed)", ""]
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, points in curves.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xlabel("recall@10")
    ax.set_ylabel("queries per second (1 thread)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "recall-vs-qps.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(timings) + 1))
    names = list(timings)
    for i, name in enumerate(names):
        t = timings[name]
        ax.plot([t.median_us, t.percentile_us(95), t.percentile_us(99)], [i] * 3, color="grey", lw=1)
        ax.scatter([t.median_us], [i], color="C0", zorder=3, label="median" if i == 0 else None)
        ax.scatter([t.percentile_us(95)], [i], color="C1", zorder=3, label="p95" if i == 0 else None)
        ax.scatter([t.percentile_us(99)], [i], color="C3", zorder=3, label="p99" if i == 0 else None)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("latency per call (µs)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "latency-percentiles.png", dpi=110)
    plt.close(fig)
    return ["![recall@10 vs QPS](recall-vs-qps.png)", "", "![latency percentiles](latency-percentiles.png)", ""]


def run(size_name: str, out: Path) -> Path:
    """Measure everything at one size and write ``benchmark-report.md`` (+ plots) to ``out``."""
    size = SIZES[size_name]
    out.mkdir(parents=True, exist_ok=True)
    curves: dict[str, list[tuple[float, float]]] = {}
    timings: dict[str, Timing] = {}
    lines = [f"# threadrecall speed report ({size_name})", ""] + machine()
    lines += vector_search(size, curves, timings)
    with tempfile.TemporaryDirectory() as workdir:
        rows, more = history_paths(size, Path(workdir))
    lines += rows
    timings.update(more)
    rows, more = semantic_recall(size)
    lines += rows
    timings.update(more)
    lines += ["## Plots", ""] + plots(out, curves, timings)
    report = out / "benchmark-report.md"
    report.write_text("\n".join(lines), "utf-8")
    return report


def main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(list(argv) if argv is not None else None)
    report = run(args.size, args.out)
    print(report.read_text("utf-8"))
    print(f"wrote {report}", file=sys.stderr)


if __name__ == "__main__":
    main()
