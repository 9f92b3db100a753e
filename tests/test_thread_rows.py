"""Whole-thread reads caught up from the change feed (``ThreadRows``) give what a whole read
gives, after every kind of write between two reads."""

from __future__ import annotations

import random

import pytest

from threadrecall import Memory
from threadrecall.integrations.conversions import Conversions
from threadrecall.recall import thread_rows
from threadrecall.storage import DuckDBStorage
from threadrecall.storage.duckdb import storage as duckdb_storage


def whole(memory: Memory, thread_id: str, resource_id: str | None = None) -> list[tuple]:
    return thread_rows(memory.storage, thread_id, resource_id=resource_id)


@pytest.mark.parametrize("seed", range(6))
def test_caught_up_reads_equal_whole_reads_after_random_writes(tmp_path, seed):
    rng = random.Random(seed)  # seed 0-5: every kind of write below, in random order
    memory = Memory(storage=DuckDBStorage(tmp_path / "m.duckdb"))
    threads = ["t0", "t1"]
    for t in threads:
        memory.create_thread("u", thread_id=t)
    converted = Conversions(lambda m: (m.id, m.text, m.thread_id))
    n = 0
    for _ in range(120):
        op = rng.choice(["append", "append", "append", "early", "update", "move", "delete",
                         "delete_thread", "other_resource", "transaction", "read_in_transaction"])
        t = rng.choice(threads)
        ids = [r[0] for r in whole(memory, t)]
        if op in ("append", "early", "other_resource"):
            row = {"id": f"m{n}", "thread_id": t, "role": "user", "content": f"m{n}",
                   "resource_id": "v" if op == "other_resource" else "u"}
            if op == "early":
                row["created_at"] = 1_000_000_000 + n
            memory.save_messages([row])
            n += 1
        elif op == "update" and ids:
            memory.update_messages([{"id": rng.choice(ids), "content": f"changed {n}"}])
        elif op == "move" and ids:
            memory.update_messages([{"id": rng.choice(ids), "thread_id": [x for x in threads if x != t][0]}])
        elif op == "delete" and ids:
            memory.delete_messages([rng.choice(ids)])
        elif op == "delete_thread" and rng.random() < 0.2:
            memory.delete_thread(t)
            memory.create_thread("u", thread_id=t)
        elif op == "transaction":
            with memory.transaction():
                memory.save_messages([{"id": f"m{n}", "thread_id": t, "role": "user", "content": "tx"}])
                assert memory._thread_rows(t) == whole(memory, t)  # its own write, not yet committed
            n += 1
        elif op == "read_in_transaction":
            with memory.transaction():
                assert memory._thread_rows(t) == whole(memory, t)  # nothing written yet: committed rows
                memory.save_messages([{"id": f"m{n}", "thread_id": t, "role": "user", "content": "tx"}])
                assert memory._thread_rows(t) == whole(memory, t)
            n += 1
        for thread_id in threads:
            assert memory._thread_rows(thread_id) == whole(memory, thread_id), (seed, op)
            assert converted.of_rows(memory._thread_rows(thread_id), thread_id) == [
                (m.id, m.text, m.thread_id) for m in memory.recall(thread_id, per_page=False).messages]
            assert memory._thread_rows(thread_id, "u") == whole(memory, thread_id, "u"), (seed, op)
    memory.close()


def test_an_appended_read_reuses_the_rows_of_the_previous_one(tmp_path):
    memory = Memory(storage=DuckDBStorage(tmp_path / "m.duckdb"))
    memory.save_messages([{"id": "a", "thread_id": "t", "resource_id": "u", "role": "user", "content": "Hi"}])
    first = memory._thread_rows("t")
    memory.save_messages([{"id": "b", "thread_id": "t", "role": "assistant", "content": "Hello"}])
    again = memory._thread_rows("t")
    assert [r[0] for r in again] == ["a", "b"] and again[0] is first[0]
    memory.close()


def test_a_read_behind_the_whole_feed_reads_the_thread_again(tmp_path, monkeypatch):
    memory = Memory(storage=DuckDBStorage(tmp_path / "m.duckdb"))
    memory.save_messages([{"id": "a", "thread_id": "t", "resource_id": "u", "role": "user", "content": "Hi"}])
    memory._thread_rows("t")
    for n in range(duckdb_storage.FEED_COMMITS + 5):  # the feed no longer reaches the last read
        memory.save_messages([{"id": f"o{n}", "thread_id": "other", "resource_id": "u", "role": "user",
                               "content": "x"}])
    memory.save_messages([{"id": "b", "thread_id": "t", "role": "user", "content": "again"}])
    assert memory._thread_rows("t") == whole(memory, "t") and len(whole(memory, "t")) == 2
    memory.close()


def test_the_owner_is_checked_on_a_caught_up_read(tmp_path):
    from threadrecall.errors import ResourceMismatchError, ThreadNotFoundError

    memory = Memory(storage=DuckDBStorage(tmp_path / "m.duckdb"))
    memory.save_messages([{"id": "a", "thread_id": "t", "resource_id": "u", "role": "user", "content": "Hi"}])
    assert len(memory._thread_rows("t", "u")) == 1
    with pytest.raises(ResourceMismatchError):
        memory._thread_rows("t", "someone-else")
    memory.delete_thread("t")
    with pytest.raises(ThreadNotFoundError):
        memory._thread_rows("t", "u")
    memory.close()
