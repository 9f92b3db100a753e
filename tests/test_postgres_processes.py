"""Several processes on one PostgreSQL memory: fresh-schema migration at the same moment,
writers and readers side by side for a minute, and a writer killed in the middle of a batch."""

from __future__ import annotations

import multiprocessing
import os
import random
import subprocess
import sys
import time
from datetime import timedelta

import psycopg
from conftest import T0, kill_after_acks
from psycopg import sql
from psycopg.conninfo import make_conninfo

from threadrecall.storage import PostgresStorage
from threadrecall.storage.postgres.schema import MIGRATIONS
from threadrecall.types import Message, MessageContent, Thread

WORKERS = 4
RUN_SECONDS = float(os.environ.get("THREADRECALL_TEST_PG_SECONDS", 60))  # the minute, shorter for a quick check


def _message(mid: str, thread: str, n: int) -> Message:
    return Message(id=mid, thread_id=thread, resource_id="r1", role="user",
                   content=MessageContent(text=f"{mid} says {n}"),
                   created_at=T0 + timedelta(milliseconds=n), metadata={"n": n})


def test_processes_opening_a_fresh_schema_at_once_migrate_it_once(pg_dsn, pg_schema):
    script = (
        "import sys, time\n"
        "from threadrecall.storage import PostgresStorage\n"
        "dsn, schema, at = sys.argv[1], sys.argv[2], float(sys.argv[3])\n"
        "time.sleep(max(0.0, at - time.time()))\n"
        "store = PostgresStorage(dsn, schema=schema)\n"
        "store.save_thread(__import__('threadrecall.types', fromlist=['Thread']).Thread(sys.argv[4], 'r1'))\n"
        "store.close()\n"
    )
    at = time.time() + 2.0
    children = [subprocess.Popen([sys.executable, "-c", script, pg_dsn, pg_schema, str(at), f"t{i}"],
                                 stderr=subprocess.PIPE, text=True) for i in range(3)]
    errors = [child.communicate(timeout=60)[1] for child in children]
    assert [child.returncode for child in children] == [0, 0, 0], errors
    with psycopg.connect(pg_dsn) as conn:
        ident = sql.Identifier(pg_schema)
        versions = conn.execute(sql.SQL("SELECT component, version FROM {}.schema_version").format(ident)).fetchall()
        feed = conn.execute(sql.SQL("SELECT count(*) FROM {}.feed").format(ident)).fetchone()[0]
        horizon = conn.execute(sql.SQL("SELECT count(*) FROM {}.feed_horizon").format(ident)).fetchone()[0]
        threads = conn.execute(sql.SQL("SELECT count(*) FROM {}.threads").format(ident)).fetchone()[0]
    assert versions == [("memory", len(MIGRATIONS))] and feed == 1 and horizon == 1 and threads == 3


def _worker(dsn: str, schema: str, me: int, acked, start, results) -> None:
    """Write messages to this worker's thread (alone, or three in a transaction) and, between
    writes, check that what the other workers acknowledged before each read is visible, both
    to a page read and through the change feed."""
    store = PostgresStorage(dsn, schema=schema, max_connections=2)
    results.put(("ready", me))
    start.wait()
    stop_at = time.time() + RUN_SECONDS
    thread = f"t{me}"
    position, seen = 0, set()
    n = stale = reads = 0
    while time.time() < stop_at:
        if n % 5 == 4:
            with store.transaction():
                for k in range(3):
                    store.save_messages([_message(f"p{me}-{n + k}", thread, n + k)])
            n += 3
        else:
            store.save_messages([_message(f"p{me}-{n}", thread, n)])
            n += 1
        acked[me] = n  # every message below n is acknowledged
        other = (me + 1 + n % (WORKERS - 1)) % WORKERS
        before = acked[other]  # acknowledged before the read begins
        if before:
            rows, total = store.page(f"t{other}", descending=True, limit=1)
            reads += 1
            if total < before or rows[0][0] < f"p{other}-":  # a message it acknowledged is missing
                stale += 1
            changes = store.changes_since(position)
            position = changes.position
            seen.update(r[0] for r in changes.upserted)
            if f"p{other}-{before - 1}" not in seen:
                stale += 1
    final = [acked[i] for i in range(WORKERS)]
    seen.update(r[0] for r in store.changes_since(position).upserted)
    missed = sum(1 for i in range(WORKERS) for k in range(final[i]) if f"p{i}-{k}" not in seen)
    store.close()
    results.put((me, n, reads, stale, missed))


def test_four_processes_write_and_read_one_memory_for_a_minute(pg_dsn, pg_schema):
    store = PostgresStorage(pg_dsn, schema=pg_schema)
    store.save_threads([Thread(f"t{i}", "r1") for i in range(WORKERS)])
    context = multiprocessing.get_context("spawn")
    acked = context.Array("q", WORKERS)
    results = context.Queue()
    start = context.Event()
    workers = [context.Process(target=_worker, args=(pg_dsn, pg_schema, i, acked, start, results))
               for i in range(WORKERS)]
    for worker in workers:
        worker.start()
    assert sorted(results.get(timeout=120) for _ in workers) == [("ready", i) for i in range(WORKERS)]
    start.set()  # all four run for the same minute
    reports = sorted(results.get(timeout=RUN_SECONDS + 120) for _ in workers)
    for worker in workers:
        worker.join(timeout=30)
    assert [w.exitcode for w in workers] == [0] * WORKERS
    written = {me: n for me, n, *_ in reports}
    assert all(n >= 20 for n in written.values()), reports
    assert all(r[2] >= 20 for r in reports), reports  # reads made
    assert [r[3] for r in reports] == [0] * WORKERS, reports  # stale reads
    assert [r[4] for r in reports] == [0] * WORKERS, reports  # writes the feed missed
    for me, n in written.items():
        stored = [m.id for m in store.thread_messages(f"t{me}")]
        assert stored == [f"p{me}-{k}" for k in range(n)]  # nothing lost, nothing extra
    store.close()


KILLED_WRITER = """
import sys
from datetime import datetime, timedelta, timezone
from threadrecall.storage import PostgresStorage
from threadrecall.types import Message, MessageContent
dsn, schema = sys.argv[1].split("|")
store = PostgresStorage(dsn, schema=schema)
t0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
batch = 0
while True:
    with store.transaction():  # one batch: five calls of ten messages, committed together
        for part in range(5):
            store.save_messages([
                Message(id=f"b{batch}-{part * 10 + i}", thread_id="batches", resource_id="r1", role="user",
                        content=MessageContent(text="x" * 200), created_at=t0 + timedelta(seconds=batch))
                for i in range(10)])
    print(batch, flush=True)
    batch += 1
"""


def _wait_for_backends_to_end(dsn: str, application_name: str) -> None:
    """Wait until the server has no backend left for ``application_name``: a client killed
    after sending COMMIT leaves a backend that still commits, then notices the closed socket."""
    deadline = time.monotonic() + 60
    with psycopg.connect(dsn, autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                           (application_name,)).fetchone()[0]:
            assert time.monotonic() < deadline, f"the backends of {application_name} did not end"
            time.sleep(0.05)


def test_a_writer_killed_mid_batch_leaves_whole_batches_and_the_others_carry_on(pg_dsn, pg_schema):
    store = PostgresStorage(pg_dsn, schema=pg_schema)
    store.save_threads([Thread("batches", "r1"), Thread("steady", "r1")])
    steady = subprocess.Popen([sys.executable, "-c", KILLED_WRITER.replace('"batches"', '"steady"')
                               .replace('id=f"b', 'id=f"s'), f"{pg_dsn}|{pg_schema}"],
                              stdout=subprocess.DEVNULL)
    try:
        killed_dsn = make_conninfo(pg_dsn, application_name="killed-writer")
        acked = kill_after_acks(KILLED_WRITER, f"{killed_dsn}|{pg_schema}", 20)
        _wait_for_backends_to_end(pg_dsn, "killed-writer")  # a COMMIT it sent may still be running
        position = store.changes_since(0).position
        later, upserted = store.changes_since(position), []
        deadline = time.monotonic() + 60
        while True:  # the other writer goes on committing, and the feed past the killed writer
            upserted += later.upserted
            if later.upserted and later.position > position:
                break
            assert time.monotonic() < deadline, "the feed did not go on past the killed writer"
            time.sleep(0.05)
            later = store.changes_since(position)
    finally:
        steady.kill()
        steady.wait()
    ids = [m.id for m in store.thread_messages("batches")]
    batches: dict[str, int] = {}
    for mid in ids:
        batch = mid.split("-")[0]
        batches[batch] = batches.get(batch, 0) + 1
    assert all(count == 50 for count in batches.values()), batches  # no half-written batch
    assert {f"b{i}" for i in range(acked + 1)} <= set(batches)  # every acknowledged batch
    assert len(batches) <= acked + 2
    assert all(r[1] == "steady" for r in upserted)
    store.close()


def _overlapping_writer(dsn: str, schema: str, seed: int, start) -> None:
    """Lone writes over ids every writer shares, in random order: turns (threads created as
    needed), message upserts moving messages between threads, deletes, thread deletions."""
    from threadrecall import Memory

    rng = random.Random(seed)
    memory = Memory(storage=PostgresStorage(make_conninfo(dsn, application_name="overlapping-writers"),
                                            schema=schema, max_connections=2))
    ids = [f"m{i}" for i in range(30)]
    start.wait()
    for n in range(200):
        kind = rng.random()
        chosen = rng.sample(ids, rng.randint(2, 6))
        if kind < 0.45:
            memory.save_messages([{"id": i, "thread_id": f"t{rng.randrange(4)}", "resource_id": "r1",
                                   "role": "user", "content": f"{i} {n}"} for i in chosen])
        elif kind < 0.6:
            memory.storage.save_messages([_message(i, f"t{rng.randrange(4)}", n) for i in chosen])
        elif kind < 0.95:
            memory.storage.delete_messages(chosen)
        else:
            memory.storage.delete_thread(f"t{rng.randrange(4)}")
    memory.storage.close()


def test_lone_writes_of_overlapping_messages_from_four_processes_never_deadlock(pg_dsn, pg_schema):
    store = PostgresStorage(pg_dsn, schema=pg_schema)
    store.save_threads([Thread(f"t{i}", "r1") for i in range(4)])
    store.save_messages([_message(f"m{i}", "t0", i) for i in range(30)])

    def deadlocks() -> int:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            return conn.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
                                ).fetchone()[0]

    before = deadlocks()
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    writers = [context.Process(target=_overlapping_writer, args=(pg_dsn, pg_schema, 31 + i, start))
               for i in range(WORKERS)]
    for writer in writers:
        writer.start()
    start.set()
    for writer in writers:
        writer.join(timeout=300)
    assert [w.exitcode for w in writers] == [0] * WORKERS
    _wait_for_backends_to_end(pg_dsn, "overlapping-writers")  # their statistics reach the server as they end
    assert deadlocks() - before == 0
    store.close()
