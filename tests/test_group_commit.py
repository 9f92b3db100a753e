"""Grouped writes on DuckDB: writes that wait for the lock at the same time share one commit,
and each still behaves as if it had committed alone (its own result, its own error, its
order, durable once it returns, even when the process is killed)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from threadrecall import Memory
from threadrecall.errors import ThreadNotFoundError
from threadrecall.storage import DuckDBStorage
from threadrecall.storage.duckdb import database


@pytest.fixture
def commits(monkeypatch):
    """How many DuckDB transactions have committed (outermost ``transaction()`` exits)."""
    counted = {"n": 0}
    original = database.Database.transaction

    @contextlib.contextmanager
    def transaction(self):
        outer = not self.in_transaction
        with original(self) as tx:
            yield tx
        if outer:
            counted["n"] += 1

    monkeypatch.setattr(database.Database, "transaction", transaction)
    return counted


def save_job(memory, thread_id, *ids):
    def job():
        return [m.id for m in memory.save_messages(
            [{"id": i, "thread_id": thread_id, "resource_id": "r", "role": "user", "content": i}
             for i in ids])]
    return job


def queued_behind_a_writer(memory, jobs):
    """Start one thread per job, one after the other, while another transaction holds the
    lock, so they queue in the order given; release it once all wait. Returns each job's
    result or error, by index."""
    storage = memory.storage
    outcomes: dict[int, object] = {}

    def run(i, job):
        try:
            outcomes[i] = storage.grouped(job)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            outcomes[i] = exc

    workers = []
    with storage.transaction():
        for i, job in enumerate(jobs):
            workers.append(threading.Thread(target=run, args=(i, job)))
            workers[-1].start()
            deadline = time.monotonic() + 10
            while len(storage.db._queue) <= i and time.monotonic() < deadline:
                time.sleep(0.001)
        assert [queued.call for queued in storage.db._queue] == jobs
    for w in workers:
        w.join(10)
    return outcomes


def test_writes_waiting_together_share_one_commit_and_return_their_own_results(tmp_path, commits):
    memory = Memory(storage=DuckDBStorage(tmp_path / "g.duckdb"))
    jobs = [save_job(memory, f"t{i % 2}", f"m{i}a", f"m{i}b") for i in range(6)]
    before = commits["n"]
    outcomes = queued_behind_a_writer(memory, jobs)
    assert outcomes == {i: [f"m{i}a", f"m{i}b"] for i in range(6)}
    assert commits["n"] - before == 2  # the holder's own, then one for all six
    assert [m.id for m in memory.recall("t0", per_page=False).messages] == ["m0a", "m0b", "m2a", "m2b", "m4a", "m4b"]
    assert memory.recall("t1", per_page=False).total == 6


def test_a_failing_write_raises_at_its_own_caller_and_the_others_commit(tmp_path, commits):
    memory = Memory(storage=DuckDBStorage(tmp_path / "g.duckdb"))
    memory.create_thread("r", thread_id="t0")

    def failing():
        memory.save_messages([{"id": "half", "thread_id": "t0", "role": "user", "content": "x"}])
        memory.save_messages([{"id": "bad", "thread_id": "nowhere", "role": "user", "content": "x"}])

    jobs = [save_job(memory, "t0", "a"), failing, save_job(memory, "t0", "b")]
    outcomes = queued_behind_a_writer(memory, jobs)
    assert outcomes[0] == ["a"] and outcomes[2] == ["b"]
    assert isinstance(outcomes[1], ThreadNotFoundError)
    # the failed write left nothing, not even its first message; the others are in order
    assert [m.id for m in memory.recall("t0", per_page=False).messages] == ["a", "b"]
    assert memory.get_messages(["half"]) == []


def test_later_writes_see_earlier_ones_of_their_group(tmp_path):
    memory = Memory(storage=DuckDBStorage(tmp_path / "g.duckdb"))
    memory.save_messages([{"id": "old", "thread_id": "t1", "resource_id": "r", "role": "user", "content": "v0"}])
    seen = []

    def move():  # an earlier write of the group moves a committed message to another thread
        memory.save_messages([{"id": "old", "thread_id": "t2", "resource_id": "r", "role": "user",
                               "content": "v1"}])

    def look():
        seen.append(([m.id for m in memory.recall("t1", per_page=False).messages],
                     [m.text for m in memory.recall("t2", per_page=False).messages],
                     [m.text for m in memory.get_messages(["old"])]))

    queued_behind_a_writer(memory, [move, look])
    assert seen == [([], ["v1"], ["v1"])]
    assert [m.text for m in memory.recall("t2", per_page=False).messages] == ["v1"]


def test_inside_an_open_transaction_a_grouped_write_joins_it(tmp_path, commits):
    memory = Memory(storage=DuckDBStorage(tmp_path / "g.duckdb"))
    with pytest.raises(RuntimeError), memory.transaction():
        assert memory.storage.grouped(save_job(memory, "t0", "a")) == ["a"]
        raise RuntimeError("abort")
    assert memory.get_messages(["a"]) == []


WRITERS = textwrap.dedent(
    """
    import sys, threading
    from threadrecall import Memory
    from threadrecall.storage import DuckDBStorage

    memory = Memory(storage=DuckDBStorage(sys.argv[1]))
    acks = threading.Lock()

    def writer(w):
        for n in range(10**9):
            ids = [f"w{w}-{n}-{j}" for j in range(3)]
            memory.storage.grouped(lambda: memory.save_messages([
                {"id": i, "thread_id": f"t{w}", "resource_id": "r", "role": "user", "content": i}
                for i in ids]))
            with acks:
                print(w, n, flush=True)

    for w in range(4):
        threading.Thread(target=writer, args=(w,), daemon=True).start()
    threading.Event().wait()
    """
)


def test_sigkill_keeps_every_acknowledged_grouped_write_whole(tmp_path):
    db = tmp_path / "crash.duckdb"
    child = subprocess.Popen([sys.executable, "-c", WRITERS, str(db)], stdout=subprocess.PIPE, text=True)
    acked: dict[int, int] = {}
    while sum(n + 1 for n in acked.values()) < 120:
        line = child.stdout.readline()
        assert line, "the writers died on their own"
        w, n = map(int, line.split())
        acked[w] = max(acked.get(w, -1), n)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()

    memory = Memory(storage=DuckDBStorage(db))
    for w in range(4):
        ids = [m.id for m in memory.recall(f"t{w}", per_page=False).messages]
        assert len(ids) % 3 == 0, "a write landed half"
        assert ids == [f"w{w}-{n}-{j}" for n in range(len(ids) // 3) for j in range(3)]  # in order
        assert len(ids) // 3 >= acked.get(w, -1) + 1  # nothing acknowledged is lost
