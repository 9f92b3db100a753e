"""A new process's first semantic search over PostgreSQL, with and without a local index cache.

    python benches/pg_index_cache.py [--size 100000] [--dim 384] [--later 2000]

``--size`` clustered unit vectors (``vector_data.mixture``, metadata ``thread_id`` of 10 per
thread and ``resource_id`` of 1,000 per resource) are written to one PostgreSQL schema through
``HnswVectorStore.upsert`` (batches of 10,000). Then each case runs in a new process, as a
restarted worker would, on the same schema:

- ``no cache``: ``HnswVectorStore(pg)``, the graph built from the rows;
- ``cache, empty folder``: ``HnswVectorStore(pg, cache_dir=...)`` on a folder with no files
  (the first worker: it builds from the rows, links, and saves its set when it closes);
- ``cache, saved set``: the same folder, after another process wrote ``--later`` more vectors
  (the next worker: it loads the set and catches up with the changes).

Each reports the wall seconds to its first answer (a thread-scoped ``search_ids``), to its
graph having nothing left to link, the process's CPU seconds by then, and recall@10 of 200
unscoped and 200 resource-scoped searches then against an exact scan (the same query set in
every case). Without ``THREADRECALL_TEST_PG_DSN`` a throwaway server is started.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from vector_data import SEED, mixture  # noqa: E402

INDEX = "bench"
QUERIES = 200


def vectors(size: int, dim: int, later: int) -> tuple[np.ndarray, np.ndarray]:
    """The stored vectors (``size + later`` of them) and the queries, L2-normalised."""
    rng = np.random.default_rng(SEED + size + dim)
    centres = rng.standard_normal((200, dim), dtype=np.float32)
    data = mixture(rng, size + later, centres, 1.0)
    queries = mixture(rng, QUERIES, centres, 1.0)
    for x in (data, queries):
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    return data, queries


def metadata(start: int, stop: int) -> list[dict]:
    return [{"thread_id": f"t{i // 10}", "resource_id": f"r{i % 100}"} for i in range(start, stop)]


def write(dsn: str, schema: str, data: np.ndarray, start: int, stop: int, create: bool) -> None:
    from threadrecall.storage import PostgresStorage
    from threadrecall.vector import HnswVectorStore

    storage = PostgresStorage(dsn, schema=schema)
    with HnswVectorStore(storage) as store:
        if create:
            store.create_index(INDEX, data.shape[1])
        for at in range(start, stop, 10_000):
            end = min(stop, at + 10_000)
            store.upsert(INDEX, data[at:end], ids=[str(i) for i in range(at, end)],
                         metadata=metadata(at, end))
    storage.close()


def child(dsn: str, schema: str, cache: str, size: int, dim: int, later: int) -> None:
    """One case, in a new process: prints its figures as JSON."""
    from threadrecall.storage import PostgresStorage
    from threadrecall.vector import HnswVectorStore

    data, queries = vectors(size, dim, later)
    start, cpu = time.perf_counter(), time.process_time()
    storage = PostgresStorage(dsn, schema=schema)
    store = HnswVectorStore(storage, cache_dir=cache or None)
    store.search_ids(INDEX, queries[0], top_k=10, filter={"thread_id": "t7"})
    first = time.perf_counter() - start
    index = store._current(INDEX).index
    waiting = index.pending
    while index.pending:
        time.sleep(0.05)
    linked, cpu = time.perf_counter() - start, time.process_time() - cpu
    stored = data[: store.describe_index(INDEX).count]  # written in id order
    found = {"all": [], "resource": []}
    truth = {"all": [], "resource": []}
    resources = np.array([i % 100 for i in range(len(stored))])
    for j, q in enumerate(queries):
        found["all"].append([int(i) for i, _ in store.search_ids(INDEX, q, top_k=10)])
        truth["all"].append(np.argsort(-(stored @ q))[:10].tolist())
        r = j % 100
        members = np.flatnonzero(resources == r)
        found["resource"].append([int(i) for i, _ in store.search_ids(
            INDEX, q, top_k=10, filter={"resource_id": f"r{r}"})])
        truth["resource"].append(members[np.argsort(-(stored[members] @ q))[:10]].tolist())
    recall = {k: float(np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found[k], truth[k])]))
              for k in found}
    store.close()  # saves the set (with a cache folder)
    storage.close()
    print(json.dumps({"first_s": first, "waiting": waiting, "linked_s": linked, "cpu_s": cpu,
                      "recall_all": recall["all"], "recall_resource": recall["resource"]}))


def run_case(dsn: str, schema: str, cache: str, args: argparse.Namespace) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", dsn, schema, cache, str(args.size), str(args.dim),
         str(args.later)], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--later", type=int, default=2_000)
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        dsn, schema, cache, size, dim, later = args.child
        child(dsn, schema, cache, int(size), int(dim), int(later))
        return
    server = None
    dsn = os.environ.get("THREADRECALL_TEST_PG_DSN")
    if not dsn:
        from postgres_server import PostgresServer

        server = PostgresServer(settings={"shared_buffers": "2GB"})
        dsn = server.start()
    schema = f"cache_{uuid.uuid4().hex[:8]}"
    data, _ = vectors(args.size, args.dim, args.later)
    try:
        began = time.perf_counter()
        write(dsn, schema, data, 0, args.size, create=True)
        print(f"{args.size:,} x {args.dim} written in {time.perf_counter() - began:.0f} s", flush=True)
        rows = []
        with tempfile.TemporaryDirectory() as cache:
            rows.append(("no cache", run_case(dsn, schema, "", args)))
            rows.append(("cache, empty folder", run_case(dsn, schema, cache, args)))
            write(dsn, schema, data, args.size, args.size + args.later, create=False)
            rows.append((f"cache, saved set, {args.later:,} written since", run_case(dsn, schema, cache, args)))
            rows.append(("no cache, again", run_case(dsn, schema, "", args)))
            files = sorted(p.name for p in Path(cache).iterdir())
        load = os.getloadavg()[0]
        print(f"\n{args.size:,} x {args.dim} vectors, m 16, ef_construction 200; load average {load:.1f}; "
              f"cache folder after the runs: {', '.join(files)}\n")
        print("| new process | first answer s | waiting to link then | nothing left to link s "
              "| CPU s by then | recall@10 unscoped | recall@10 resource |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for label, r in rows:
            print(f"| {label} | {r['first_s']:.2f} | {r['waiting']:,} | {r['linked_s']:.1f} | "
                  f"{r['cpu_s']:.1f} | {r['recall_all']:.3f} | {r['recall_resource']:.3f} |")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
