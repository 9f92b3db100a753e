"""The markdown report of ``compare_vectors.py``: the targets first, every ratio, worst case next
to best, then the tables of each data shape."""

from __future__ import annotations

from typing import Any

OURS = "threadrecall"
TARGET_TEXT = {
    "qps": ">= 1.5x the best peer's QPS at matched recall",
    "filters": ">= 2x numpy over the prebuilt subset",
    "memory": "index RSS <= 0.5x raw vectors",
    "fresh": "fresh-after-upsert at least as fast as hnswlib",
    "build": "build with linking >= 1.5x faster than hnswlib",
}


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _verdict(ratio: float | None, wanted: float, higher: bool = True) -> str:
    if ratio is None:
        return "n/a"
    return "met" if (ratio >= wanted if higher else ratio <= wanted) else "**not met**"


def _best_peer(libs: dict, target: str, key: str) -> tuple[str | None, float | None]:
    """The peer with the lowest latency ``key`` at ``target`` (None when no peer reaches it)."""
    best = None
    for name, res in libs.items():
        m = res["matched"].get(target)
        if name == OURS or not m or key not in m:
            continue
        if best is None or m[key] < best[1]:
            best = (name, m[key])
    return best if best else (None, None)


def _target_rows(entry: dict) -> list[str]:
    libs = entry["libraries"]
    ours = libs[OURS]
    label = entry["shape"]["label"]
    raw = entry["shape"]["n"] * entry["shape"]["dim"] * 4
    rows = []
    for target in ("0.95", "0.99"):
        mine = ours["matched"].get(target)
        for key, what in (("us", "single queries"), ("batch_us", "ours single vs peer batch")):
            peer, us = _best_peer(libs, target, key)
            ratio = us / mine["us"] if mine and us else None
            note = f"vs {peer} (ef {libs[peer]['matched'][target]['ef']})" if peer else "no peer reaches it"
            if not mine:
                note = "threadrecall does not reach it"
            rows.append(f"| QPS at recall@10 {target}, {what} | {label} | {_f(ratio)}x {note} | "
                        f"1.5x | {_verdict(ratio, 1.5)} |")
    ratios = {k: entry["numpy"]["filtered"][k]["us"] / v["us"] for k, v in ours["filtered"].items()}
    if ratios:
        worst = min(ratios, key=ratios.get)
        best = max(ratios, key=ratios.get)
        rows.append(f"| filtered vs numpy subset, worst | {label} | {_f(ratios[worst])}x ({worst}) | 2x | "
                    f"{_verdict(ratios[worst], 2)} |")
        rows.append(f"| filtered vs numpy subset, best | {label} | {_f(ratios[best])}x ({best}) | 2x | "
                    f"{_verdict(ratios[best], 2)} |")
    mem = ours["memory"] / raw
    rows.append(f"| store RSS (DuckDB and index) / raw vectors | {label} | {_f(mem, 3)} | <= 0.5 | "
                f"{_verdict(mem, 0.5, False)} |")
    index_mem = (ours["memory"] - ours.get("memory_empty", 0)) / raw
    rows.append(f"| index RSS beyond the empty store / raw vectors | {label} | {_f(index_mem, 3)} | <= 0.5 | "
                f"{_verdict(index_mem, 0.5, False)} |")
    h = libs.get("hnswlib")
    fresh = h["fresh_us"] / ours["fresh_us"] if h else None
    rows.append(f"| fresh-after-upsert at matched recall, hnswlib µs / ours µs | {label} | {_f(fresh)}x | >= 1x | "
                f"{_verdict(fresh, 1.0)} |")
    build = h["build_s"] / ours["build_s"] if h else None
    rows.append(f"| build on one thread, hnswlib CPU s / ours | {label} | {_f(build)}x | 1.5x | "
                f"{_verdict(build, 1.5)} |")
    walls = ours.get("build_wall_s")
    if walls:
        two = walls["1"] / walls["2"]
        rows.append(f"| build, ours on one thread / on two, wall s ({walls['1']:.1f} / {walls['2']:.1f}) | "
                    f"{label} | {_f(two)}x | > 1x | {'met' if two > 1 else '**not met**'} |")
    return rows


def _shape_tables(entry: dict) -> list[str]:
    libs = entry["libraries"]
    shape = entry["shape"]
    ours = libs[OURS]
    raw = shape["n"] * shape["dim"] * 4
    h_build = libs["hnswlib"]["build_s"] if "hnswlib" in libs else None
    out = [f"## {shape['label']}: {shape['n']:,} vectors, {shape['clusters']} clusters, spread "
           f"{shape['spread']}; {entry['queries']:,} queries, {entry['filtered_queries']} per filter\n",
           "### Build, fresh-after-upsert, memory\n",
           "| library | build CPU s | hnswlib build / this | fresh ef | fresh CPU µs/query "
           "| fresh recall@10 | index RSS MB | RSS / raw vectors |",
           "|---|---|---|---|---|---|---|---|"]
    for name, res in libs.items():
        build = f"{res['build_s']:.1f}"
        if name == OURS:
            build += f" (upsert {res['upsert_s']:.1f} + link {res['link_s']:.1f})"
        ratio = _f(h_build / res["build_s"]) + "x" if h_build else "-"
        out.append(f"| {name} | {build} | {ratio} | {res.get('fresh_ef', 64)} | {res['fresh_us']:.0f} | {res['fresh_recall']:.3f} | "
                   f"{res['memory'] / 2**20:.1f} | {res['memory'] / raw:.3f} |")
    fixed = ours.get("memory_empty", 0)
    out.append("\nFresh: the first 200 queries right after the bulk insert (before any explicit "
               "link), one pass at each breadth, narrowest first, up to the first whose recall@10 "
               "reaches 0.95 on them; the columns are that pass.")
    out.append(f"\nRSS of a fresh process that opens the index and runs {entry.get('memory_queries', 1000):,} "
               f"queries, minus its RSS before. threadrecall's includes the store's fixed cost (DuckDB and "
               f"the store over a file whose index is empty: {fixed / 2**20:.1f} MB); beyond it the index "
               f"takes {(ours['memory'] - fixed) / 2**20:.1f} MB, {(ours['memory'] - fixed) / raw:.3f} x raw "
               f"(its float vectors stay in its vectors file, read as re-ranking needs them).")
    out.append(f"\nRaw vectors: {raw / 2**20:.1f} MB. numpy exact scan of all vectors: "
               f"{entry['numpy']['exact_us']:.0f} µs/query. threadrecall with the planner's default "
               f"breadth (`ef_search=None`): recall@10 {ours['default']['recall']:.3f} at "
               f"{ours['default']['us']:.0f} µs/query.\n")
    out += ["### QPS at matched recall@10 (the lowest breadth reaching the target)\n",
            "Timed after every library of the shape was measured, all of them loaded: one pass of "
            "the queries per library in turn, seven rounds in rotating order, the median pass.\n",
            "| target | library | ef | recall@10 | µs/query | QPS | ours QPS / this | batch µs/query "
            "| batch QPS | ours single QPS / this batch |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for target in ("0.95", "0.99"):
        mine = ours["matched"].get(target)
        for name, res in libs.items():
            m = res["matched"].get(target)
            if not m:
                out.append(f"| {target} | {name} | not reached (ef <= {res['sweep'][-1][0]}, best recall "
                           f"{max(p[1] for p in res['sweep']):.3f}) | | | | | | | |")
                continue
            vs = _f(m["us"] / mine["us"]) + "x" if mine else "-"
            batch = m.get("batch_us")
            vs_batch = _f(batch / mine["us"]) + "x" if mine and batch else "-"
            out.append(f"| {target} | {name} | {m['ef']} | {m['recall']:.3f} | {m['us']:.0f} | "
                       f"{1e6 / m['us']:,.0f} | {vs} | {_f(batch, 0) if batch else '-'} | "
                       f"{f'{1e6 / batch:,.0f}' if batch else '-'} | {vs_batch} |")
    out += ["\n### Filtered recall@10 and latency\n",
            "threadrecall: `query(filter=...)` with the planner's default breadth. numpy: exact "
            "scan over the allowed rows, gathered beforehand (untimed); the two timed in turn "
            "with every library of the shape loaded (seven rounds, the order alternating; the "
            "median pass). Peers: their own filtered "
            "search at breadth max(64, their 0.99-matched one) x sqrt(10 % / selectivity), given the allowed ids prebuilt (untimed: an "
            "`IDSelectorBatch` for faiss, a Python set for hnswlib's callback); usearch's Python "
            "search takes no filter.\n",
            "| filter | selectivity | library | recall@10 | µs/query | this µs / ours µs |",
            "|---|---|---|---|---|---|"]
    for label, mine in ours["filtered"].items():
        sel = next(c for c in _filter_selectivity(entry) if c[0] == label)[1]
        out.append(f"| `{label}` | {sel} | threadrecall | {mine['recall']:.3f} | {mine['us']:.0f} | 1 |")
        npy = entry["numpy"]["filtered"][label]
        out.append(f"| | | numpy subset | {npy['recall']:.3f} | {npy['us']:.0f} | "
                   f"{npy['us'] / mine['us']:.2f}x |")
        for name, res in libs.items():
            f = res["filtered"].get(label) if name != OURS else None
            if f:
                extra = f" ({f['queries']} queries" + (f", {f['failures']} failed" if f["failures"] else "") + ")"
                out.append(f"| | | {name} (ef {f['ef']}){extra} | {f['recall']:.3f} | {f['us']:.0f} | "
                           f"{f['us'] / mine['us']:.2f}x |")
    out += ["\n### Recall@10 sweep (ef: recall / µs per query, one pass each)\n",
            "| library | points |", "|---|---|"]
    for name, res in libs.items():
        pts = "; ".join(f"{ef}: {r:.3f} / {us:.0f}" for ef, r, us in res["sweep"])
        out.append(f"| {name} | {pts} |")
    return out + [""]


def _filter_selectivity(entry: dict) -> list[tuple[str, str]]:
    return entry.get("filter_selectivity") or []


def render(report: dict[str, Any]) -> str:
    """The whole markdown report."""
    shapes = report["shapes"]
    lines = [f"# threadrecall vector store vs hnswlib, faiss, usearch ({report['size']})\n",
             "Produced by `benches/compare_vectors.py` in one run, every library on one thread "
             "(CPU seconds: build over the whole process, queries over the querying thread). "
             "threadrecall through its public API (`HnswVectorStore(threads=1)` over a DuckDB file, "
             "and once more with `threads=2` for the wall time of a build on two threads: "
             "`upsert`, `query` with metadata filters, `link`; the sweep sets its breadth through the "
             "store's `ef_search`; its public API has no batch query, so the batch columns compare "
             "its single queries with the peers' batch calls). M = 16, construction breadth 200 "
             "for all. Cosine over L2-normalised Gaussian-mixture vectors, exact ground truth by "
             "numpy.\n"]
    if report.get("commit"):
        lines.append(f"Code measured: commit {report['commit']}, {report['date']}.\n")
    if report.get("partial"):
        lines.append("**Partial: the run stopped before every shape was measured.**\n")
    if report["skipped"]:
        lines.append("Skipped: " + "; ".join(report["skipped"]) + ".\n")
    lines += ["## Targets (every ratio; each shape, worst case next to best)\n",
              "| measure | shape | ratio | target | verdict |", "|---|---|---|---|---|"]
    for entry in shapes:
        lines += _target_rows(entry)
    lines.append(f"\nRun time {report['seconds'] / 60:.1f} min.\n")
    for entry in shapes:
        lines += _shape_tables(entry)
    return "\n".join(lines) + "\n"
