"""What a recall's ownership check costs on DuckDB for a thread this process has not read yet.

    python benches/owner_check.py STORE.duckdb [--build]

``--build`` writes 10,000 threads of 100 resources with 10 messages each. Then, in a new
process, ``Memory.recall(thread, resource_id=..., per_page=0, include=[one message with a
neighbour each side])`` for 600 threads picked at random, each recalled once: every call has
to learn the thread's owner, none finds it in the thread cache. To compare two checkouts, run
it once per side with ``PYTHONPATH`` at each side's ``python/`` (see ``compare_checkouts.py``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from threadrecall import Memory
from threadrecall.storage import DuckDBStorage

THREADS, RESOURCES, PER_THREAD = 10_000, 100, 10


def build(path: Path) -> None:
    memory = Memory(storage=DuckDBStorage(path))
    for t in range(THREADS):
        memory.create_thread(f"r{t % RESOURCES}", thread_id=f"t{t}")
    for start in range(0, THREADS * PER_THREAD, 10_000):
        memory.save_messages([{"id": f"m{i}", "thread_id": f"t{i % THREADS}", "role": "user",
                               "resource_id": f"r{i % THREADS % RESOURCES}", "content": f"message {i}"}
                              for i in range(start, start + 10_000)])
    memory.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--build", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.build:
        build(args.store)
    memory = Memory(storage=DuckDBStorage(args.store))
    times = []
    for t in random.Random(args.seed).sample(range(THREADS), 600):
        include = [{"id": f"m{t + 3 * THREADS}", "with_previous_messages": 1, "with_next_messages": 1}]
        started = time.perf_counter()
        memory.recall(f"t{t}", resource_id=f"r{t % RESOURCES}", per_page=0, include=include)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    print(f"first recall of a thread: p50 {statistics.median(times):.3f} ms, "
          f"p95 {times[int(0.95 * len(times))]:.3f} ms")
    memory.close()


if __name__ == "__main__":
    main()
