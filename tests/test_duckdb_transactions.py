"""DuckDB transactions: BEGIN sent before the first statement, deferred writes, auto-commit of
a transaction whose only statement is a deferred write."""

from __future__ import annotations

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


WRITER = textwrap.dedent(
    """
    import sys
    from threadrecall import Memory
    from threadrecall.storage import DuckDBStorage

    memory = Memory(storage=DuckDBStorage(sys.argv[1]))
    memory.create_thread("r1", thread_id="t1")
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


def test_an_empty_transaction_sends_nothing(db):
    with db.transaction() as tx:
        assert not tx.begun
    with db.transaction() as tx:
        db.defer("INSERT INTO t VALUES (?)", [4])
        assert not tx.begun  # nothing has run yet
    assert values(db) == [4]
