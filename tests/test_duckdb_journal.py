"""The journal beside a DuckDB file: acknowledged writes survive a SIGKILL before, during and
after they are applied to DuckDB, a torn last record is dropped, and a failed apply loses
nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest
from conftest import kill_after_acks

from threadrecall import Memory
from threadrecall.errors import StorageError
from threadrecall.storage import DuckDBStorage
from threadrecall.storage.duckdb import Database
from threadrecall.storage.duckdb.journal import Journal
from threadrecall.types import Message, MessageContent

WRITER = textwrap.dedent(
    """
    import sys
    from threadrecall import Memory
    from threadrecall.storage import DuckDBStorage
    from threadrecall.storage.duckdb import database

    database.JOURNAL_BYTES = 1 << 40  # nothing reaches DuckDB before the kill
    memory = Memory(storage=DuckDBStorage(sys.argv[1]))
    memory.create_thread("r1", thread_id="t1")
    n = 0
    while True:
        memory.save_messages([{"id": f"m{n}", "thread_id": "t1", "role": "user", "content": f"m {n}"}])
        print(n, flush=True)
        n += 1
    """
)


def recalled(path: Path) -> list[str]:
    with Memory(storage=DuckDBStorage(path)) as memory:
        return [m.id for m in memory.recall("t1", per_page=False).messages]


def counted(path: Path) -> int:
    db = Database(path)
    try:
        return db.fetch_one("SELECT count(*) FROM messages")[0]
    finally:
        db.close()


def test_sigkill_before_any_apply_keeps_every_acknowledged_save_once_in_order(tmp_path):
    path = tmp_path / "m.duckdb"
    acked = kill_after_acks(WRITER, path, 60)
    assert len(Journal(Path(f"{path}.journal")).records()) >= acked + 1  # all still in the journal
    ids = recalled(path)
    assert len(ids) >= acked + 1
    assert ids == [f"m{n}" for n in range(len(ids))]
    assert recalled(path) == ids and counted(path) == len(ids)  # replayed once, not again
    assert not Path(f"{path}.journal").exists()  # a clean close leaves no journal


def killed_at(tmp_path: Path, patch: str) -> tuple[Path, str]:
    """Run a writer that journals 200 saves, then applies them with ``patch`` (which kills
    the process at some point of the apply) in force; returns the database and the output."""
    path = tmp_path / "m.duckdb"
    script = textwrap.dedent(
        """
        import os, signal, sys
        from threadrecall import Memory
        from threadrecall.storage import DuckDBStorage
        from threadrecall.storage.duckdb import database, journal

        database.JOURNAL_BYTES = 1 << 40
        memory = Memory(storage=DuckDBStorage(sys.argv[1]))
        memory.create_thread("r1", thread_id="t1")
        for n in range(200):
            memory.save_messages([{"id": f"m{n}", "thread_id": "t1", "role": "user", "content": "x"}])
        print("saved", flush=True)
        def die(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)
        """) + textwrap.dedent(patch) + "memory.storage.db.settle()\nprint('survived', flush=True)\n"
    result = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True)
    assert result.returncode == -signal.SIGKILL, result.stderr
    return path, result.stdout


@pytest.mark.parametrize("patch", [
    # after the rows are appended inside the apply's transaction, before its COMMIT
    """
    run = database._Rows.run
    def run_then_die(self, cursor, appenders):
        run(self, cursor, appenders)
        die()
    database._Rows.run = run_then_die
    """,
    # after the apply committed, before the journal is emptied
    "journal.Journal.clear = die\n",
], ids=["before-commit", "before-emptying"])
def test_sigkill_in_the_middle_of_an_apply_loses_and_repeats_nothing(tmp_path, patch):
    path, out = killed_at(tmp_path, patch)
    assert out == "saved\n"
    assert recalled(path) == [f"m{n}" for n in range(200)]
    assert counted(path) == 200


def test_a_torn_last_record_is_dropped_and_writing_goes_on(tmp_path):
    path = tmp_path / "m.duckdb"
    acked = kill_after_acks(WRITER, path, 20)
    journal = Path(f"{path}.journal")
    whole = Journal(journal).records()
    with journal.open("r+b") as file:  # the start of a record whose write was cut short
        file.seek(Journal(journal).size)
        file.write(b"\x40\x00\x00\x00\x12\x34")
    ids = recalled(path)
    assert len(ids) >= acked + 1
    assert ids == [f"m{n}" for n in range(len(whole) - 1)]  # the thread's record, then one per message
    with Memory(storage=DuckDBStorage(path)) as memory:
        memory.save_messages([{"id": "after", "thread_id": "t1", "role": "user", "content": "after"}])
    assert recalled(path) == [*ids, "after"]


def test_an_emptied_journal_is_written_again_from_its_start_and_reads_no_old_record(tmp_path):
    path = tmp_path / "m.journal"
    journal = Journal(path, reserve=4096)
    assert path.stat().st_size == 4096 and journal.records() == []
    for n in (1, 2, 3):
        journal.append(n, b"old record %d" % n)
    journal.clear()
    assert Journal(path).records() == [] and path.stat().st_size == 4096  # not truncated
    journal.append(4, b"new record 4")  # as long as an old one: it ends where old record 2 starts
    assert Journal(path).records() == [(4, b"new record 4")]
    journal.append(5, b"5")
    assert Journal(path).records() == [(4, b"new record 4"), (5, b"5")]  # old bytes after it: cut
    journal.close()


def test_old_records_that_come_back_after_an_emptying_are_not_applied_again(tmp_path):
    """The emptying zeroes the first header without waiting for the disk: records it hid may be
    read again after a crash, and the database's number of the last applied skips them."""
    path = tmp_path / "m.duckdb"
    memory = Memory(storage=DuckDBStorage(path))
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"id": f"m{n}", "thread_id": "t1", "role": "user", "content": "x"} for n in range(3)])
    journal = memory.storage.db._journal
    old = Path(f"{path}.journal").read_bytes()[:journal.size]
    memory.storage.db.settle()  # applied, and the journal emptied
    memory.save_messages([{"id": "m3", "thread_id": "t1", "role": "user", "content": "y"}])
    memory.storage.db.settle()
    memory.close()
    Path(f"{path}.journal").write_bytes(old)  # as if the zeroed header had not reached the disk
    assert recalled(path) == ["m0", "m1", "m2", "m3"] and counted(path) == 4


WRITER_EMPTYING = WRITER.replace("1 << 40  # nothing reaches DuckDB before the kill",
                                 "2048  # applied and emptied every few saves")


def test_sigkill_while_the_journal_is_emptied_and_refilled_keeps_every_save_once_in_order(tmp_path):
    path = tmp_path / "m.duckdb"
    acked = kill_after_acks(WRITER_EMPTYING, path, 150)
    ids = recalled(path)
    assert len(ids) >= acked + 1
    assert ids == [f"m{n}" for n in range(len(ids))]
    assert counted(path) == len(ids)


def test_a_record_cut_inside_its_payload_is_dropped(tmp_path):
    path = tmp_path / "m.duckdb"
    acked = kill_after_acks(WRITER, path, 20)
    journal = Path(f"{path}.journal")
    numbers = [n for n, _ in Journal(journal).records()]
    data = journal.read_bytes()
    journal.write_bytes(data[:Journal(journal).size - 1])  # the last record loses its final byte
    assert [n for n, _ in Journal(journal).records()] == numbers[:-1]
    ids = recalled(path)
    assert ids == [f"m{n}" for n in range(len(numbers) - 2)]  # the thread's record, then one per message
    assert acked + 1 <= len(numbers) - 1


def test_a_failed_apply_keeps_its_writes_and_raises_until_it_succeeds(tmp_path):
    path = tmp_path / "m.duckdb"
    memory = Memory(storage=DuckDBStorage(path))
    memory.create_thread("r1", thread_id="t1")
    db = memory.storage.db
    db.settle()
    memory.save_messages([{"id": "a", "thread_id": "t1", "role": "user", "content": "a"}])
    assert db._journalled  # acknowledged from the journal
    # A row the storage knows nothing of takes the journalled message's id: the apply fails.
    db._conn.execute("INSERT INTO messages SELECT 'a', 't1', NULL, 'user', 'text', '{}', '{}', now(), 99, NULL")
    with pytest.raises(StorageError, match="applying the journal"):
        memory.list_threads()
    with pytest.raises(StorageError, match="applying the journal"):
        memory.list_threads()  # still kept, still failing
    assert len(Journal(Path(f"{path}.journal")).records()) == 1
    with pytest.raises(StorageError, match="applying the journal"):
        memory.close()  # its lagging thread touch needs a statement, after the journal
    assert Path(f"{path}.journal").exists()  # not applied: kept for the next open
    with pytest.raises(StorageError, match="applying the journal"):
        DuckDBStorage(path)  # the open replays it, and fails the same way
    raw = duckdb.connect(str(path))
    raw.execute("DELETE FROM messages WHERE seq = 99")  # the stray row goes
    raw.close()
    assert recalled(path) == ["a"]


def test_two_stores_on_one_path_share_the_journal(tmp_path):
    path = tmp_path / "m.duckdb"
    first, second = DuckDBStorage(path), DuckDBStorage(path)
    a, b = Memory(storage=first), Memory(storage=second)
    a.create_thread("r1", thread_id="t1")
    a.save_messages([{"id": "x", "thread_id": "t1", "role": "user", "content": "x"}])
    assert first.db._journalled
    assert [m.id for m in b.recall("t1").messages] == ["x"]  # from the shared replica
    assert [t.id for t in b.list_threads().threads] == ["t1"]  # a query: applied first
    assert not first.db._journalled
    b.save_messages([{"id": "y", "thread_id": "t1", "role": "user", "content": "y"}])
    a.close()
    b.close()
    assert recalled(path) == ["x", "y"]


def test_a_second_database_open_on_the_same_path_replays_nothing(tmp_path):
    path = tmp_path / "m.duckdb"
    memory = Memory(storage=DuckDBStorage(path))
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"id": "x", "thread_id": "t1", "role": "user", "content": "x"}])
    other = Database(path)  # the same DuckDB instance, while the journal has a record
    assert other._journal is None
    other.close()
    memory.close()
    assert recalled(path) == ["x"] and counted(path) == 1


def test_a_message_with_a_missing_value_is_not_journalled(tmp_path):
    path = tmp_path / "m.duckdb"
    storage = DuckDBStorage(path)
    Memory(storage=storage).create_thread("r1", thread_id="t1")
    storage.db.settle()
    bad = Message("b", "t1", "r1", None, MessageContent.coerce("b"), datetime.now(timezone.utc))
    with pytest.raises(duckdb.ConstraintException, match="NOT NULL"):  # as without a journal
        storage.save_messages([bad])
    assert not storage.db._journalled and not Journal(Path(f"{path}.journal")).records()
    assert storage.get_message("b") is None
    storage.close()
    assert recalled(path) == []


def test_the_journal_is_applied_in_batches_of_its_size(tmp_path, monkeypatch):
    from threadrecall.storage.duckdb import database

    monkeypatch.setattr(database, "JOURNAL_BYTES", 4096)
    path = tmp_path / "m.duckdb"
    memory = Memory(storage=DuckDBStorage(path))
    memory.create_thread("r1", thread_id="t1")
    db = memory.storage.db
    sizes = []
    for n in range(100):
        memory.save_messages([{"id": f"m{n}", "thread_id": "t1", "role": "user", "content": "x" * 100}])
        sizes.append(db._journal.size)
    assert max(sizes) < 4096 + 1024 and sizes.count(0) >= 3  # emptied whenever it grew past the size
    applied = db.cursor().execute("SELECT count(*) FROM messages").fetchall()[0][0]
    assert applied == 100
    memory.close()
    assert os.path.getsize(path) > 0


def test_a_read_applies_the_journal_while_another_thread_holds_the_write_lock(tmp_path):
    # The writer waits, inside its transaction, for a reader that needs the journal applied:
    # the apply must not wait for the write lock.
    import threading

    db = Database(tmp_path / "m.duckdb")
    with db.transaction() as tx:
        tx.execute("CREATE TABLE t (x INTEGER)")
    db.defer_rows("t", "(?)", [1], journal=True)
    assert db._journalled
    seen: list[int] = []
    reader = threading.Thread(target=lambda: seen.append(db.cursor().execute("SELECT count(*) FROM t").fetchone()[0]))
    with db.transaction():
        reader.start()
        reader.join(timeout=10)
        assert not reader.is_alive(), "the read waited for the write transaction"
    assert seen == [1]
    db.close()
