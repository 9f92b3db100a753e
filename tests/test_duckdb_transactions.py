"""DuckDB transactions: BEGIN sent before the first statement, deferred writes, auto-commit of
a transaction whose only statement is a deferred write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import duckdb
import pytest
from conftest import kill_after_acks

from threadrecall import Memory
from threadrecall.storage import DuckDBStorage
from threadrecall.storage.duckdb import Database


@pytest.fixture
def db(tmp_path):
    database = Database(tmp_path / "t.duckdb")
    with database.transaction() as tx:
        tx.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    yield database
    database.close()


def values(db: Database) -> list[int]:
    return [r[0] for r in db.cursor().execute("SELECT x FROM t ORDER BY x").fetchall()]


def test_a_transaction_reads_its_deferred_writes(db):
    with db.transaction() as tx:
        db.defer("INSERT INTO t VALUES (?)", [1])
        assert tx.execute("SELECT count(*) FROM t").fetchall() == [(1,)]
        db.defer("INSERT INTO t VALUES (?)", [2])
    assert values(db) == [1, 2]


def test_a_failing_deferred_write_rolls_back_the_whole_transaction(db):
    with db.transaction():
        db.defer("INSERT INTO t VALUES (?)", [1])
    with pytest.raises(duckdb.ConstraintException), db.transaction() as tx:
        tx.execute("INSERT INTO t VALUES (2)")
        db.defer("INSERT INTO t VALUES (?)", [1])  # a duplicate: raises when the transaction ends
    assert values(db) == [1]
    with pytest.raises(duckdb.ConstraintException), db.transaction():
        db.defer("INSERT INTO t VALUES (?)", [1])  # alone: raises from its auto-commit
    assert values(db) == [1]


def test_commit_callbacks_run_only_once_a_lone_deferred_write_has_committed(db):
    seen = []
    with pytest.raises(duckdb.ConstraintException), db.transaction():
        db.defer("INSERT INTO t VALUES (?)", [5])
        db.defer("INSERT INTO t VALUES (?)", [5])
        db.on_commit(lambda: seen.append("bad"))
    with db.transaction():
        db.defer("INSERT INTO t VALUES (?)", [6])
        db.on_commit(lambda: seen.append(values(db)))
    assert seen == [[6]]


def test_rows_deferred_one_after_another_run_as_one_insert(db):
    with db.transaction() as tx:
        db.defer_rows("t", "(?)", [1])
        db.defer_rows("t", "(?)", [2, 3])
        assert [rows.sql for rows in tx.deferred] == ["INSERT INTO t VALUES (?), (?), (?)"]
        db.defer("DELETE FROM t WHERE x = ?", [2])
        db.defer_rows("t", "(?)", [4])  # after another statement: a statement of its own
        assert len(tx.deferred) == 3
    assert values(db) == [1, 3, 4]
    with pytest.raises(duckdb.ConstraintException), db.transaction():
        db.defer_rows("t", "(?)", [5])
        db.defer_rows("t", "(?)", [1])  # a duplicate in the merged insert: nothing of it lands
    assert values(db) == [1, 3, 4]


def test_rows_with_expressions_run_as_one_insert_statement(db):
    with db.transaction() as tx:
        db.defer_rows("t", "(? + 10)", [1])
        db.defer_rows("t", "(? + 10)", [2])
        assert [rows.sql for rows in tx.deferred] == ["INSERT INTO t VALUES (? + 10), (? + 10)"]
    assert values(db) == [11, 12]
    assert not db._appenders  # an expression is no plain value: nothing was appended


def test_appended_rows_land_exactly_and_a_failing_batch_lands_nothing(tmp_path):
    """Rows of plain values go in through the table's appender: alone in an auto-commit, or
    inside a transaction that also reads them; a batch with a duplicate lands nothing."""
    from datetime import datetime, timedelta, timezone

    db = Database(tmp_path / "a.duckdb")
    with db.transaction() as tx:
        tx.execute("CREATE TABLE r (id TEXT PRIMARY KEY, stamp TIMESTAMPTZ, body JSON, n BIGINT)")
    at = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
    db.defer_rows("r", "(?, ?, ?, ?)", ["a", at, '{"k": [1, 2]}', 2**40])  # alone: auto-commit
    assert db._appenders  # it went through the appender, not an INSERT statement
    with db.transaction() as tx:
        db.defer_rows("r", "(?, ?, ?, ?)", ["b", None, "{}", None, "c", at, "[]", -1])
        assert tx.execute("SELECT count(*) FROM r").fetchall() == [(3,)]  # its own rows, before commit
    with pytest.raises(duckdb.ConstraintException):
        db.defer_rows("r", "(?, ?, ?, ?)", ["d", at, "{}", 1, "a", at, "{}", 1])  # "a" exists
    with pytest.raises(duckdb.ConstraintException), db.transaction():
        db.defer_rows("r", "(?, ?, ?, ?)", ["e", at, "{}", 1])
        db.defer("INSERT INTO r VALUES ('b', NULL, '{}', NULL)")  # fails: the appended row goes too
    db.defer_rows("r", "(?, ?, ?, ?)", ["f", at, "{}", 0])  # the appender works on after failures
    db.close()
    reopened = Database(tmp_path / "a.duckdb")
    rows = reopened.cursor().execute("SELECT id, stamp, body, n FROM r ORDER BY id").fetchall()
    assert [r[0] for r in rows] == ["a", "b", "c", "f"]
    assert rows[0][1] == at and rows[0][2] == '{"k": [1, 2]}' and rows[0][3] == 2**40
    assert rows[1][1:] == (None, "{}", None)
    reopened.close()


def test_saves_of_one_transaction_share_one_insert(tmp_path):
    memory = Memory(storage=DuckDBStorage(tmp_path / "m.duckdb"))
    memory.create_thread("r", thread_id="a")
    memory.create_thread("r", thread_id="b")
    db = memory.storage.db
    with memory.transaction():
        memory.save_messages([{"thread_id": "a", "role": "user", "content": "one"}])
        memory.save_messages([{"thread_id": "b", "role": "user", "content": "two"},
                              {"thread_id": "a", "role": "assistant", "content": "three"}])
        assert len(db._writer.deferred) == 1
    memory.close()
    reopened = Memory(storage=DuckDBStorage(tmp_path / "m.duckdb"))
    assert [m.text for m in reopened.recall("a").messages] == ["one", "three"]
    assert [m.text for m in reopened.recall("b").messages] == ["two"]
    reopened.close()


# A process saving to the database of its first argument, printing each acknowledged save.
WRITER_START = textwrap.dedent(
    """
    import sys
    from threadrecall import Memory
    from threadrecall.storage import DuckDBStorage

    memory = Memory(storage=DuckDBStorage(sys.argv[1]))
    memory.create_thread("r1", thread_id="t1")
    """
)

WRITER = WRITER_START + textwrap.dedent(
    """
    n = 0
    while True:  # one message per save: a lone deferred insert, auto-committed
        memory.save_messages([{"id": f"m{n}", "thread_id": "t1", "role": "user", "content": f"m {n}"}])
        print(n, flush=True)
        n += 1
    """
)


def test_sigkill_keeps_every_acknowledged_one_message_save(tmp_path):
    db = tmp_path / "crash.duckdb"
    acked = kill_after_acks(WRITER, db, 40)
    memory = Memory(storage=DuckDBStorage(db))
    ids = [m.id for m in memory.recall("t1", per_page=False).messages]
    assert len(ids) >= acked + 1
    assert ids == [f"m{n}" for n in range(len(ids))]


MERGING_WRITER = WRITER_START + textwrap.dedent(
    """
    memory.create_thread("r1", thread_id="t2")
    n = 0
    while True:  # two saves in one transaction: one merged insert, auto-committed
        with memory.transaction():
            memory.save_messages([{"id": f"a{n}", "thread_id": "t1", "role": "user", "content": "a"}])
            memory.save_messages([{"id": f"b{n}", "thread_id": "t2", "role": "user", "content": "b"}])
        print(n, flush=True)
        n += 1
    """
)


def test_sigkill_keeps_every_acknowledged_merged_save(tmp_path):
    db = tmp_path / "crash.duckdb"
    acked = kill_after_acks(MERGING_WRITER, db, 40)
    memory = Memory(storage=DuckDBStorage(db))
    a = [m.id for m in memory.recall("t1", per_page=False).messages]
    b = [m.id for m in memory.recall("t2", per_page=False).messages]
    assert len(a) >= acked + 1 and len(a) == len(b)  # each pair landed whole or not at all
    assert a == [f"a{n}" for n in range(len(a))] and b == [f"b{n}" for n in range(len(b))]


def test_an_empty_transaction_sends_nothing(db):
    with db.transaction() as tx:
        assert not tx.begun
    with db.transaction() as tx:
        db.defer("INSERT INTO t VALUES (?)", [4])
        assert not tx.begun  # nothing has run yet
    assert values(db) == [4]


def run_then_kill(script: str, db) -> list[str]:
    """Run ``script`` on ``db`` in a child Python; SIGKILL it once it prints ``done``; return
    the lines it printed before."""
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(db)],
                             stdout=subprocess.PIPE, text=True)
    lines = []
    for line in child.stdout:
        if line.strip() == "done":
            break
        lines.append(line.strip())
    else:
        raise AssertionError("the child died on its own")
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    return lines


def test_thread_touches_of_a_killed_process_are_recovered_on_open(tmp_path):
    """Saves set ``updated_at`` through the message rows; a process killed before folding them
    into the threads table leaves them to the next open, which reads them back exactly, and a
    later write of the thread itself (an older ``updated_at``) is not overridden by them."""
    db = tmp_path / "touch.duckdb"
    printed = run_then_kill("""
        import sys
        from datetime import datetime, timezone
        from threadrecall import Memory, Thread
        from threadrecall.storage import DuckDBStorage

        memory = Memory(storage=DuckDBStorage(sys.argv[1]))
        for t in ("a", "b", "c"):
            memory.create_thread("r1", thread_id=t)
            for n in range(3):
                memory.save_messages([{"thread_id": t, "role": "user", "content": f"{t}{n}"}])
        old = datetime(2020, 1, 2, tzinfo=timezone.utc)
        b = memory.get_thread_by_id("b")
        memory.storage.save_thread(Thread(b.id, b.resource_id, "renamed", {}, b.created_at, old))
        with memory.transaction():  # a touch, then the thread's own write: the write is current
            memory.save_messages([{"thread_id": "c", "role": "user", "content": "c3"}])
            c = memory.get_thread_by_id("c")
            memory.storage.save_thread(Thread(c.id, c.resource_id, "named", {}, c.created_at, old))
        for t in ("a", "b", "c"):
            print(memory.get_thread_by_id(t).updated_at.isoformat(), flush=True)
        print("done", flush=True)
        import time
        time.sleep(60)
        """, db)
    memory = Memory(storage=DuckDBStorage(db))
    got = [memory.get_thread_by_id(t).updated_at.isoformat() for t in ("a", "b", "c")]
    assert got == printed
    assert got[1] == got[2] == "2020-01-02T00:00:00+00:00"
    assert memory.get_thread_by_id("a").updated_at > memory.get_thread_by_id("a").created_at
    listed = memory.list_threads(resource_id="r1", order_by={"field": "updated_at", "direction": "DESC"})
    assert [t.id for t in listed.threads] == ["a", "c", "b"]  # b and c tie: by id, descending
    assert [t.updated_at.isoformat() for t in sorted(listed.threads, key=lambda t: t.id)] == printed


def test_listing_threads_orders_by_the_touches_not_yet_folded(tmp_path):
    memory = Memory(storage=DuckDBStorage(tmp_path / "order.duckdb"))
    for t in ("x", "y", "z"):
        memory.create_thread("r1", thread_id=t)
    for t in ("z", "x", "y"):
        memory.save_messages([{"thread_id": t, "role": "user", "content": t}])
    order = {"field": "updated_at", "direction": "DESC"}
    assert [t.id for t in memory.list_threads(resource_id="r1", order_by=order).threads] == ["y", "x", "z"]
    with memory.transaction():  # a touch of the open transaction, listed inside it
        memory.save_messages([{"thread_id": "z", "role": "user", "content": "again"}])
        assert [t.id for t in memory.list_threads(resource_id="r1", order_by=order).threads] == ["z", "y", "x"]
    assert [t.id for t in memory.list_threads(resource_id="r1", order_by=order).threads] == ["z", "y", "x"]
    memory.storage.close()


def test_a_database_of_the_schema_before_touch_rows_opens_with_its_threads_as_they_were(tmp_path):
    from threadrecall.storage.duckdb.schema import MIGRATIONS

    path = tmp_path / "old.duckdb"
    old = Database(path)
    old.migrate("memory", MIGRATIONS[:1])
    with old.transaction() as tx:
        tx.execute("INSERT INTO threads VALUES ('t1', 'r1', 'T', '{}', '2021-01-01 00:00:00+00', "
                   "'2021-06-01 00:00:00+00')")
        tx.execute("INSERT INTO messages VALUES ('m1', 't1', 'r1', 'user', 'text', "
                   "'{\"format\": 2, \"parts\": [{\"type\": \"text\", \"text\": \"hi\"}]}', '{}', "
                   "'2021-01-01 00:00:00+00', 1)")
    old.close()
    memory = Memory(storage=DuckDBStorage(path))
    thread = memory.get_thread_by_id("t1")
    assert (thread.title, thread.updated_at.isoformat()) == ("T", "2021-06-01T00:00:00+00:00")
    assert [m.text for m in memory.recall("t1").messages] == ["hi"]
    memory.save_messages([{"thread_id": "t1", "role": "user", "content": "new"}])
    assert memory.get_thread_by_id("t1").updated_at.year > 2021
    assert [m.text for m in memory.recall("t1").messages] == ["hi", "new"]
    memory.storage.close()
