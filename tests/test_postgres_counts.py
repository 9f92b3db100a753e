"""The message counts PostgreSQL keeps per thread and resource (``thread_counts``): after
every kind of write, in one process and in several at once, and after the migration that adds
them to a schema holding messages, they equal a count of the rows, and so do the totals of
the pages that read them."""

from __future__ import annotations

import multiprocessing
import random
from datetime import timedelta

import psycopg
import pytest
from conftest import T0
from psycopg import errors, sql

from threadrecall import Memory
from threadrecall.storage import PostgresStorage
from threadrecall.storage.postgres.schema import MIGRATIONS, migrate
from threadrecall.types import Message, MessageContent, Thread

THREADS = [f"t{i}" for i in range(5)]
RESOURCES = ["r1", "r2", None]


def _message(mid: str, thread: str, resource: str | None, n: int = 0) -> Message:
    return Message(id=mid, thread_id=thread, resource_id=resource, role="user",
                   content=MessageContent(text=f"{mid} {n}"), created_at=T0 + timedelta(seconds=n))


def _kept_and_counted(dsn: str, schema: str) -> tuple[dict, dict]:
    ident = sql.Identifier(schema)
    with psycopg.connect(dsn) as conn:
        kept = {(t, r): n for t, r, n in conn.execute(sql.SQL(
            "SELECT thread_id, resource_id, sum(n) FROM {}.thread_counts GROUP BY 1, 2 HAVING sum(n) <> 0")
            .format(ident))}
        counted = {(t, r): n for t, r, n in conn.execute(sql.SQL(
            "SELECT thread_id, coalesce(resource_id, ''), count(*) FROM {}.messages GROUP BY 1, 2")
            .format(ident))}
    return kept, counted


def _check(store: PostgresStorage, dsn: str, schema: str) -> None:
    kept, counted = _kept_and_counted(dsn, schema)
    assert kept == counted
    for thread in THREADS:
        every = store.thread_messages(thread)
        assert store.page(thread, descending=True, limit=2)[1] == len(every)
        for resource in ("r1", "r2"):
            mine = sum(1 for m in every if m.resource_id == resource)
            assert store.page(thread, resource_id=resource, limit=1)[1] == mine


def test_counts_follow_inserts_upserts_moves_deletes_and_rollbacks(pg_dsn, pg_schema):
    store = PostgresStorage(pg_dsn, schema=pg_schema)
    store.save_threads([Thread(t, "r1") for t in THREADS])
    steps = [
        lambda: store.save_messages([_message(f"m{i}", "t0", "r1", i) for i in range(6)]),
        lambda: store.save_messages([_message("m0", "t0", "r1", 9)]),  # the same again: no change
        lambda: store.save_messages([_message("m1", "t1", "r1"), _message("m2", "t1", "r2")]),  # moved
        lambda: store.save_messages([_message("m3", "t0", None), _message("m3", "t2", "r2")]),  # last wins
        lambda: store.delete_messages(["m4", "m4", "nope"]),
        lambda: store.save_messages([_message("m9", "no-thread", "r1")]),  # a thread with no row
        lambda: store.delete_thread("t1"),
    ]
    for step in steps:
        step()
        _check(store, pg_dsn, pg_schema)
    with pytest.raises(RuntimeError), store.transaction():
        store.save_messages([_message("x1", "t3", "r1"), _message("m5", "t3", "r1")])
        store.delete_messages(["m0"])
        raise RuntimeError("rolled back")
    _check(store, pg_dsn, pg_schema)
    with store.transaction():
        store.save_messages([_message("x1", "t3", "r1"), _message("m5", "t3", "r2")])
        store.delete_messages(["m0", "x1"])
        store.save_messages([_message("x1", "t4", "r1")])
    _check(store, pg_dsn, pg_schema)
    memory = Memory(storage=store)
    memory.save_messages([{"id": "y1", "thread_id": "t5", "resource_id": "r2", "role": "user", "content": "hi"}])
    assert memory.recall("t5").total == 1 and memory.recall("t5", resource_id="r2").total == 1
    _check(store, pg_dsn, pg_schema)
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(sql.SQL("TRUNCATE {}.messages").format(sql.Identifier(pg_schema)))
    assert _kept_and_counted(pg_dsn, pg_schema) == ({}, {})
    assert memory.recall("t5").total == 0
    store.close()


def _churn(dsn: str, schema: str, seed: int, rounds: int, out) -> None:
    """Random saves (new ids, the same ids again, ids moved to other threads and resources),
    deletes and thread deletions over a few ids that every process shares."""
    rng = random.Random(seed)
    store = PostgresStorage(dsn, schema=schema, max_connections=2)
    conflicts = 0

    def write() -> None:
        kind = rng.random()
        if kind < 0.6:
            store.save_messages([_message(f"m{rng.randrange(40)}", rng.choice(THREADS), rng.choice(RESOURCES),
                                          rng.randrange(100)) for _ in range(rng.randint(1, 3))])
        elif kind < 0.95:
            store.delete_messages([f"m{rng.randrange(40)}" for _ in range(rng.randint(1, 3))])
        else:
            store.delete_thread(rng.choice(THREADS))

    for _ in range(rounds):
        try:
            if rng.random() < 0.2:
                with store.transaction():
                    for _ in range(3):
                        write()
            else:
                write()
        except errors.DeadlockDetected:  # a transaction chosen as the victim: rolled back whole
            conflicts += 1
    store.close()
    out.put(conflicts)


def test_counts_stay_exact_under_processes_writing_the_same_messages(pg_dsn, pg_schema):
    store = PostgresStorage(pg_dsn, schema=pg_schema)
    store.save_threads([Thread(t, "r1") for t in THREADS])
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    workers = [context.Process(target=_churn, args=(pg_dsn, pg_schema, 17 + i, 150, out)) for i in range(4)]
    for worker in workers:
        worker.start()
    [out.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert [w.exitcode for w in workers] == [0] * 4
    kept, counted = _kept_and_counted(pg_dsn, pg_schema)
    assert counted  # the churn left messages behind to count
    _check(store, pg_dsn, pg_schema)
    store.close()


def _unfolded(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql.SQL("SELECT count(*) FROM {}.thread_counts WHERE slot <> 0")
                            .format(sql.Identifier(schema))).fetchone()[0]


def test_a_fold_keeps_the_counts_and_leaves_the_rows_a_writer_holds(pg_dsn, pg_schema):
    store = PostgresStorage(pg_dsn, schema=pg_schema)
    other = PostgresStorage(pg_dsn, schema=pg_schema, max_connections=1)  # one server process: one slot
    store.save_threads([Thread(t, "r1") for t in THREADS])
    store.save_messages([_message(f"m{i}", THREADS[i % 3], "r1", i) for i in range(9)])
    other.save_messages([_message(f"m{i}", THREADS[i % 2], RESOURCES[i % 3], i) for i in range(5, 12)])
    assert _unfolded(pg_dsn, pg_schema) > 0
    store._tidy()
    assert _unfolded(pg_dsn, pg_schema) == 0
    _check(store, pg_dsn, pg_schema)
    other.save_messages([_message("m20", "t4", "r2")])
    assert _unfolded(pg_dsn, pg_schema) == 1
    with other.transaction():
        other.save_messages([_message("m21", "t4", "r2"), _message("m1", "t4", "r2")])  # one new, one moved
        store._tidy()  # leaves the row the open transaction holds, without waiting for it
        assert _unfolded(pg_dsn, pg_schema) == 1
        _check(store, pg_dsn, pg_schema)
    _check(store, pg_dsn, pg_schema)
    store._tidy()
    assert _unfolded(pg_dsn, pg_schema) == 0
    _check(store, pg_dsn, pg_schema)
    store.close()
    other.close()


@pytest.mark.parametrize("before", [-2, -1], ids=["before-counts", "before-count-slots"])
def test_the_migration_counts_the_messages_already_stored(pg_dsn, pg_schema, before):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn, pg_schema, steps=MIGRATIONS[:before])
        conn.execute(sql.SQL(
            "INSERT INTO {}.messages (id, thread_id, resource_id, role, content, created_at, seq) "
            "SELECT 'm' || i, 't' || (i % 3), CASE WHEN i % 4 = 0 THEN NULL ELSE 'r' || (i % 2) END, "
            "'user', '{{}}', i, i FROM generate_series(1, 50) i").format(sql.Identifier(pg_schema)))
    store = PostgresStorage(pg_dsn, schema=pg_schema)
    kept, counted = _kept_and_counted(pg_dsn, pg_schema)
    assert kept == counted and sum(counted.values()) == 50
    assert store.page("t1", limit=1)[1] == 17
    store.close()
