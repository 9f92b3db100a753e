"""The PostgreSQL change feed is pruned behind a horizon, and a replica that lags behind it
rebuilds from a scan instead of missing what was pruned."""

from __future__ import annotations

from datetime import timedelta

import psycopg
from conftest import T0
from psycopg import sql

from threadrecall.storage import PostgresStorage
from threadrecall.types import Message, MessageContent, Thread


def msg(i: int, text: str | None = None, thread: str = "t1") -> Message:
    return Message(id=f"m{i}", thread_id=thread, resource_id="r1", role="user",
                   content=MessageContent(text=text or f"message {i}"), created_at=T0 + timedelta(minutes=i))


def held(store: PostgresStorage) -> dict[str, str]:
    """What the store's replica holds: id -> payload."""
    timeline = store.replica.timeline
    return {f"m{i}": row[5] for i in range(10) if (row := timeline.get(f"m{i}")) is not None}


def entries(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql.SQL("SELECT count(*) FROM {}.changes").format(sql.Identifier(schema))).fetchone()[0]


def test_a_replica_behind_the_pruned_horizon_misses_no_change(pg_dsn, pg_schema):
    writer = PostgresStorage(pg_dsn, schema=pg_schema)
    reader = PostgresStorage(pg_dsn, schema=pg_schema)
    writer.save_threads([Thread("t1", "r1"), Thread("t2", "r1")])
    writer.save_messages([msg(i) for i in range(5)])
    writer.save_messages([msg(9, thread="t2")])
    assert set(held(reader)) == {"m0", "m1", "m2", "m3", "m4", "m9"}  # the reader is caught up here
    lagging_at = reader.replica.position

    writer.save_messages([msg(5), msg(6)])           # new rows
    writer.save_messages([msg(1, "rewritten")])      # an update
    writer.delete_messages(["m2"])                   # a delete
    writer.delete_thread("t2")                       # a whole thread
    writer.prune_changes(keep=0)
    assert entries(pg_dsn, pg_schema) == 0
    head = writer.changes_since(0).position
    assert writer.changes_since(lagging_at).reset  # the feed no longer reaches back there

    expected = {r[0]: r[5] for batch in writer.scan_messages() for r in batch}
    got = held(reader)
    assert got == expected
    assert "m2" not in got and "rewritten" in got["m1"] and {"m5", "m6"} <= set(got)
    assert reader.replica.timeline.get("m9") is None
    assert reader.replica.position == head
    writer.close()
    reader.close()


def test_pruning_keeps_the_entries_within_reach_and_readers_there_read_incrementally(pg_dsn, pg_schema):
    store = PostgresStorage(pg_dsn, schema=pg_schema)
    store.save_threads([Thread("t1", "r1")])
    for i in range(6):
        store.save_messages([msg(i)])
    head = store.changes_since(0).position
    store.prune_changes(keep=2)
    assert entries(pg_dsn, pg_schema) == 2
    recent = store.changes_since(head - 2)
    assert not recent.reset and [r[0] for r in recent.upserted] == ["m4", "m5"]
    assert store.changes_since(head - 3).reset
    store.prune_changes(keep=10)  # the horizon never moves back
    assert store.changes_since(head - 3).reset
    store.close()


def test_writes_prune_the_feed_as_they_go(pg_dsn, pg_schema):
    store = PostgresStorage(pg_dsn, schema=pg_schema, keep_changes=10)
    store.save_threads([Thread("t1", "r1")])
    for i in range(1005):
        store.save_messages([msg(i % 7)])
    assert entries(pg_dsn, pg_schema) <= 10 + 5
    assert store.changes_since(store.changes_since(0).position - 3).upserted
    store.close()


def test_a_feed_numbered_by_the_former_counter_migrates_and_misses_nothing(pg_dsn, pg_schema):
    from threadrecall.storage.postgres.schema import MIGRATIONS, migrate

    ident = sql.Identifier(pg_schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the schema and rows as they were
        migrate(conn, pg_schema, steps=MIGRATIONS[:2])
        conn.execute(sql.SQL("INSERT INTO {}.threads (id, resource_id, created_at, updated_at) "
                             "VALUES ('t1', 'r1', now(), now())").format(ident))
        conn.execute(sql.SQL("INSERT INTO {}.messages (id, thread_id, resource_id, role, content, created_at, seq) "
                             "VALUES ('m0', 't1', 'r1', 'user', '{{\"text\":\"old\"}}', 0, 1), "
                             "('m9', 't1', 'r1', 'user', '{{\"text\":\"kept\"}}', 1, 2)").format(ident))
        conn.execute(sql.SQL("INSERT INTO {}.changes (position, n, kind, ref) VALUES "
                             "(1, 0, 'u', 'm0'), (2, 0, 'u', 'm9')").format(ident))
        conn.execute(sql.SQL("UPDATE {}.feed SET position = 2").format(ident))
    store = PostgresStorage(pg_dsn, schema=pg_schema)
    old = held(store)  # a replica from the beginning reads the entries numbered the old way
    assert set(old) == {"m0", "m9"} and "old" in old["m0"] and not store.changes_since(0).reset
    position = store.replica.position
    store.save_messages([msg(1)])
    store.delete_messages(["m0"])
    later = store.changes_since(position)
    assert [r[0] for r in later.upserted] == ["m1"] and later.deleted == ["m0"] and not later.reset
    assert set(held(store)) == {"m1", "m9"}
    with psycopg.connect(pg_dsn) as conn:
        version = conn.execute(sql.SQL("SELECT version FROM {}.schema_version").format(ident)).fetchone()[0]
    assert version == len(MIGRATIONS)
    store.close()


def test_a_transaction_that_commits_after_a_newer_one_reaches_the_reader_once(pg_dsn, pg_schema):
    import threading

    store = PostgresStorage(pg_dsn, schema=pg_schema)
    store.save_threads([Thread("t1", "r1"), Thread("t2", "r1")])
    written, release = threading.Event(), threading.Event()

    def slow() -> None:
        with store.transaction():  # takes its transaction id first, commits last
            store.save_messages([msg(1)])
            written.set()
            release.wait(30)

    older = threading.Thread(target=slow)
    older.start()
    assert written.wait(30)
    store.save_messages([msg(2, thread="t2")])  # a newer transaction, committed first
    first = store.changes_since(0)
    assert [r[0] for r in first.upserted] == ["m2"]
    release.set()
    older.join()
    second = store.changes_since(first.position)
    assert [r[0] for r in second.upserted] == ["m1"]  # not skipped, and m2 not handed out again
    assert not store.changes_since(second.position)
    store.close()
