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
