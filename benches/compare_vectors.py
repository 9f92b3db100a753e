"""Side-by-side: threadrecall's HNSW index against hnswlib and a numpy exact scan.

One run, one thread (times are CPU seconds of this process, medians of three passes over the
queries, since the machine is shared), release build (``maturin develop --release``). Data:
float32 vectors from a seeded Gaussian mixture, L2-normalised; queries from the same mixture; exact ground truth by
numpy. Measures build time, recall@10 and per-query latency for ef in 16..256, filtered queries
at 10 %, 1 % and 0.1 % selectivity, and index memory. Writes a markdown table and a
recall-QPS plot next to this file (``results/``).

    python benches/compare_vectors.py            # 100,000 x 384, 1,000 queries
    python benches/compare_vectors.py --size small

hnswlib and matplotlib are bench-only; without them their parts are skipped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from threadrecall._core import VectorIndex  # noqa: E402

try:
    import hnswlib
except ImportError:  # pragma: no cover - optional
    hnswlib = None

SIZES = {"full": (100_000, 384, 1_000, 1_000), "small": (10_000, 128, 200, 100)}
EFS = [16, 32, 64, 128, 256]
K = 10
SEED = 20240611
REPEAT = 3  # timings are the median of this many runs
HNSWLIB_FILTERED_QUERIES = 200
# selectivity -> number of disjoint groups of that size
SELECTIVITY = {"10%": 10, "1%": 100, "0.1%": 1000}


def mixture(rng: np.random.Generator, n: int, dim: int, centres: np.ndarray) -> np.ndarray:
    """Points around randomly chosen centres, L2-normalised."""
    which = rng.integers(0, len(centres), n)
    x = centres[which] + rng.standard_normal((n, dim), dtype=np.float32) * 0.5
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


def exact_top_k(data: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    out = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), 100):
        sims = queries[start : start + 100] @ data.T
        part = np.argpartition(-sims, k, axis=1)[:, :k]
        order = np.take_along_axis(sims, part, axis=1).argsort(axis=1)[:, ::-1]
        out[start : start + 100] = np.take_along_axis(part, order, axis=1)
    return out


def recall(found: list[list[int]], truth: np.ndarray) -> float:
    hits = sum(len(set(f) & set(t)) for f, t in zip(found, truth.tolist()))
    return hits / truth.size


def metadata_for(i: int) -> dict:
    # resource r{i % 100} (1 %), thread t{i % 1000} (0.1 %); 10 % is ten resources via $in.
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


def timed(fn, repeat: int = 1):
    """The result of ``fn`` and its median CPU time over ``repeat`` runs.

    CPU time of this process, not wall time: the machine is shared, and waiting for a core
    is not the library's cost. Everything measured here runs on one thread, so on a quiet
    machine the two agree."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        out = fn()
        times.append(time.process_time() - start)
    return out, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    n, dim, n_queries, n_centres = SIZES[args.size]
    rng = np.random.default_rng(SEED)
    centres = rng.standard_normal((n_centres, dim), dtype=np.float32)
    data = mixture(rng, n, dim, centres)
    queries = mixture(rng, n_queries, dim, centres)
    truth = exact_top_k(data, queries, K)
    ids = [str(i) for i in range(n)]
    metas = [metadata_for(i) for i in range(n)]
    rows: list[str] = []
    curves: dict[str, list[tuple[float, float]]] = {"threadrecall": [], "hnswlib": []}

    ours = VectorIndex(dim, "cosine", m=16, ef_construction=200, seed=0)
    _, ours_build = timed(lambda: ours.add(ids, data, metas, link=True))
    theirs = None
    if hnswlib is not None:
        theirs = hnswlib.Index(space="ip", dim=dim)
        theirs.init_index(max_elements=n, M=16, ef_construction=200, random_seed=0)
        theirs.set_num_threads(1)
        _, their_build = timed(lambda: theirs.add_items(data, np.arange(n), num_threads=1))
    raw = n * dim * 4
    rows.append(f"# threadrecall HNSW vs hnswlib vs numpy ({n:,} x {dim}, {n_queries:,} queries, 1 thread)\n")
    rows.append("## Build and memory\n")
    rows.append("| | threadrecall | hnswlib | ratio (hnswlib / ours) |")
    rows.append("|---|---|---|---|")
    their_b = f"{their_build:.1f} s" if theirs is not None else "skipped"
    ratio = f"{their_build / ours_build:.2f}x faster" if theirs is not None else "-"
    rows.append(f"| build | {ours_build:.1f} s | {their_b} | {ratio} |")
    parts = dict(ours.memory_bytes())
    core = parts["vectors"] + parts["codes"] + parts["graph"] + parts["ids"]
    rows.append(f"| index memory / raw vectors (vectors, codes, graph, ids) | {core / raw:.3f} | - | - |")
    rows.append(
        f"| index memory / raw vectors (all, with metadata records) | {sum(parts.values()) / raw:.3f} | - | - |\n"
    )

    rows.append("## Unfiltered recall@10 and latency (one query per call)\n")
    rows.append("| ef | ours recall | ours µs/query | hnswlib recall | hnswlib µs/query | QPS ratio (ours / hnswlib) |")
    rows.append("|---|---|---|---|---|---|")
    for ef in EFS:
        found, secs = timed(lambda: [[int(i) for i, _ in ours.search(q, K, ef=ef)] for q in queries], REPEAT)
        r_ours, us_ours = recall(found, truth), secs / n_queries * 1e6
        curves["threadrecall"].append((r_ours, 1e6 / us_ours))
        if theirs is not None:
            theirs.set_ef(ef)
            found, secs = timed(
                lambda: [theirs.knn_query(q, k=K, num_threads=1)[0][0].tolist() for q in queries], REPEAT
            )
            r_them, us_them = recall(found, truth), secs / n_queries * 1e6
            curves["hnswlib"].append((r_them, 1e6 / us_them))
            rows.append(
                f"| {ef} | {r_ours:.3f} | {us_ours:.0f} | {r_them:.3f} | {us_them:.0f} | {us_them / us_ours:.2f} |"
            )
        else:
            rows.append(f"| {ef} | {r_ours:.3f} | {us_ours:.0f} | - | - | - |")
    default, secs = timed(lambda: [[int(i) for i, _ in ours.search(q, K)] for q in queries], REPEAT)
    rows.append(
        f"\nPlanner's default breadth: recall {recall(default, truth):.3f} at "
        f"{secs / n_queries * 1e6:.0f} µs/query.\n"
    )

    rows.append("## Filtered recall@10 and latency\n")
    rows.append(
        "| selectivity | ours recall | ours µs | hnswlib recall (ef=64) | hnswlib µs | numpy subset µs |"
        " ours vs hnswlib | ours vs numpy |"
    )
    rows.append("|---|---|---|---|---|---|---|---|")
    if theirs is not None:
        theirs.set_ef(64)
    for name, groups in SELECTIVITY.items():
        members = {g: group_members(name, g, n) for g in range(min(groups, n_queries))}
        subsets = {g: data[m] for g, m in members.items()}
        plan = [(q, j % len(members), members[j % len(members)]) for j, q in enumerate(queries)]
        truth_f = np.array([m[np.argsort(-(subsets[g] @ q))[:K]].tolist() for q, g, m in plan])
        filters = [group_filter(name, g) for _, g, _ in plan]
        found, secs = timed(
            lambda: [[int(i) for i, _ in ours.search(q, K, filter=f)] for (q, _, _), f in zip(plan, filters)],
            REPEAT,
        )
        r_ours, us_ours = recall(found, truth_f), secs / n_queries * 1e6

        def numpy_query(q, g, members):
            sims = subsets[g] @ q
            top = np.argpartition(-sims, K)[:K] if len(sims) > K else np.arange(len(sims))
            return members[top[np.argsort(-sims[top])]].tolist()

        _, secs = timed(lambda: [numpy_query(q, g, m) for q, g, m in plan], REPEAT)
        us_numpy = secs / n_queries * 1e6
        if theirs is not None:
            allowed = {g: set(m.tolist()) for g, m in members.items()}
            # Its callback filter is slow at low selectivity: time the first queries only.
            sub = plan[:HNSWLIB_FILTERED_QUERIES]
            found, secs = timed(
                lambda: [
                    theirs.knn_query(q, k=K, num_threads=1, filter=allowed[g].__contains__)[0][0].tolist()
                    for q, g, _ in sub
                ]
            )
            r_them, us_them = recall(found, truth_f[: len(sub)]), secs / len(sub) * 1e6
            rows.append(
                f"| {name} | {r_ours:.3f} | {us_ours:.1f} | {r_them:.3f} | {us_them:.1f} | {us_numpy:.1f} |"
                f" {us_them / us_ours:.1f}x | {us_numpy / us_ours:.1f}x |"
            )
        else:
            rows.append(
                f"| {name} | {r_ours:.3f} | {us_ours:.1f} | - | - | {us_numpy:.1f} | - | {us_numpy / us_ours:.1f}x |"
            )

    args.out.mkdir(parents=True, exist_ok=True)
    table = "\n".join(rows) + "\n"
    (args.out / f"compare_vectors_{args.size}.md").write_text(table)
    print(table)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - optional
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, points in curves.items():
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xlabel("recall@10")
    ax.set_ylabel("queries per second (1 thread)")
    ax.set_yscale("log")
    ax.set_title(f"{n:,} x {dim}, M=16, efC=200")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / f"compare_vectors_{args.size}.png", dpi=120)


if __name__ == "__main__":
    main()
