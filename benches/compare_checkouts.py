"""recall() on PostgreSQL from two checkouts of threadrecall, and the SQL query that fetches
the same rows, in lockstep: before/after numbers of a change on a shared, noisy machine.

Run: ``python benches/compare_checkouts.py --before ../old --after . [--size 100000]``. Each
checkout needs its own ``.venv`` with threadrecall installed from it. One PostgreSQL server
(durable defaults) is loaded as ``bench_postgres.py`` loads it; then three worker processes
(before, after, and plain SQL through psycopg) each hold one connection, and the driver calls
them one after the other, call by call, in alternating order, so that whatever else the
machine does falls on all three alike. Per path: p50 of latency, of the client's CPU and of
the server backend's CPU (read from ``/proc``), in µs, and the ratios to SQL.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

PATHS = ("last20", "last20_resource", "long", "page50", "metadata")


def worker(dsn: str, schema: str, threads: int, kind: str) -> None:
    """Answer ``<path> <i>`` lines on stdin with ``<client ns> <server ns> <wall ns>``."""
    import psycopg
    from psycopg import sql

    rng = random.Random(3)
    pick = [f"t{rng.randrange(threads)}" for _ in range(5000)]
    owner = lambda t: f"r{int(t[1:]) % 100}"  # noqa: E731  (as bench_postgres.load assigns them)
    if kind == "sql":
        conn = psycopg.connect(dsn, autocommit=True)
        backend = conn.info.backend_pid
        s = sql.Identifier(schema).as_string(conn)
        cols = "id, thread_id, resource_id, role, type, content, metadata, created_at, seq"
        last = f"SELECT {cols} FROM {s}.messages WHERE thread_id = %s ORDER BY created_at DESC, seq DESC LIMIT 20"
        page = (f"SELECT {cols} FROM {s}.messages WHERE thread_id = %s "
                "ORDER BY created_at DESC, seq DESC LIMIT 50 OFFSET 50")
        meta = (f"SELECT {cols} FROM {s}.messages WHERE thread_id = %s AND filter @> %s::jsonb "
                "ORDER BY created_at DESC, seq DESC LIMIT 20")
        calls = {"last20": lambda i: conn.execute(last, [pick[i]]).fetchall(),
                 "last20_resource": lambda i: conn.execute(last, [pick[i]]).fetchall(),
                 "long": lambda i: conn.execute(last, ["long"]).fetchall(),
                 "page50": lambda i: conn.execute(page, [pick[i]]).fetchall(),
                 "metadata": lambda i: conn.execute(meta, [pick[i], '{"topic":"billing"}']).fetchall()}
    else:
        from threadrecall import Memory
        from threadrecall.storage import PostgresStorage

        memory = Memory(storage=PostgresStorage(dsn, schema=schema, max_connections=1))
        with memory.storage.connection() as pooled:
            backend = pooled.info.backend_pid
        calls = {"last20": lambda i: memory.recall(pick[i], per_page=20),
                 "last20_resource": lambda i: memory.recall(pick[i], per_page=20, resource_id=owner(pick[i])),
                 "long": lambda i: memory.recall("long", per_page=20),
                 "page50": lambda i: memory.recall(pick[i], per_page=50, page=1),
                 "metadata": lambda i: memory.recall(pick[i], per_page=20,
                                                     filter={"metadata": {"topic": "billing"}})}
    stat = open(f"/proc/{backend}/schedstat")

    def on_cpu() -> int:
        stat.seek(0)
        return int(stat.read().split()[0])

    for line in sys.stdin:
        name, i = line.split()
        server, wall, client = on_cpu(), time.perf_counter_ns(), time.process_time_ns()
        calls[name](int(i) % len(pick))
        client, wall, server = time.process_time_ns() - client, time.perf_counter_ns() - wall, on_cpu() - server
        sys.stdout.write(f"{client} {server} {wall}\n")
        sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--size", type=int, action="append")
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_postgres import load
    from postgres_server import PostgresServer

    with PostgresServer(durable=True) as server:
        for size in args.size or [100_000]:
            schema = f"bench_{size}"
            threads = load(server.dsn, schema, size)
            sides = {"before": args.before, "after": args.after, "sql": args.after}
            procs = {k: subprocess.Popen(
                [str(tree.resolve() / ".venv" / "bin" / "python"), str(Path(__file__).resolve()), "--worker",
                 server.dsn, schema, str(threads), "sql" if k == "sql" else "memory"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/") for k, tree in sides.items()}

            def call(side: str, name: str, i: int) -> tuple[float, ...]:
                procs[side].stdin.write(f"{name} {i}\n")  # type: ignore[union-attr]
                procs[side].stdin.flush()  # type: ignore[union-attr]
                return tuple(int(x) / 1000 for x in procs[side].stdout.readline().split())  # type: ignore[union-attr]

            print(f"## {size:,} messages; 1-minute load average {os.getloadavg()[0]:.1f} at the start", flush=True)
            print("| path | before p50 | after p50 | SQL p50 | before / SQL | after / SQL | after / before "
                  "| client CPU before / after / SQL | server CPU before / after / SQL |")
            print("|---|---|---|---|---|---|---|---|---|")
            for name in PATHS:
                order = list(sides)
                for i in range(50):
                    for side in order:
                        call(side, name, i)
                got: dict[str, list[tuple[float, ...]]] = {side: [] for side in order}
                for i in range(args.calls):
                    for side in (order if i % 2 else order[::-1]):
                        got[side].append(call(side, name, i))
                p50 = {side: [statistics.median(x[j] for x in xs) for j in range(3)] for side, xs in got.items()}
                b, a, s = p50["before"], p50["after"], p50["sql"]
                print(f"| {name} | {b[2]:.0f} | {a[2]:.0f} | {s[2]:.0f} | {b[2] / s[2]:.2f} | {a[2] / s[2]:.2f} "
                      f"| {a[2] / b[2]:.2f} | {b[0]:.0f} / {a[0]:.0f} / {s[0]:.0f} | {b[1]:.0f} / {a[1]:.0f} / {s[1]:.0f} |",
                      flush=True)
            print(f"\n1-minute load average at the end: {os.getloadavg()[0]:.1f}\n", flush=True)
            for proc in procs.values():
                proc.stdin.close()  # type: ignore[union-attr]
                proc.wait()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        main()
