"""Saving, updating and reopening: what is acknowledged is what comes back."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from threadrecall import Memory, Message, MessageContent
from threadrecall.embedders import HashEmbedder
from threadrecall.errors import InvalidArgumentError, ThreadNotFoundError
from threadrecall.storage import DuckDBStorage

from conftest import T0, seed, texts


def test_ids_and_times_are_filled_in(memory):
    memory.create_thread("r1", thread_id="t1")
    before = datetime.now(timezone.utc)
    saved = memory.save_messages([{"thread_id": "t1", "role": "user", "content": "hi"}])[0]
    assert saved.id and saved.created_at >= before and saved.resource_id == "r1"
    assert saved.content == MessageContent(parts=[{"type": "text", "text": "hi"}])


def test_message_objects_and_dicts_are_both_accepted(memory):
    memory.create_thread("r1", thread_id="t1")
    obj = Message(id="a", thread_id="t1", resource_id="r1", role="user",
                  content=MessageContent.coerce("from object"), created_at=T0)
    memory.save_messages([obj, {"id": "b", "thread_id": "t1", "role": "assistant",
                                "content": {"parts": [{"type": "text", "text": "from dict"}]},
                                "created_at": (T0 + timedelta(seconds=1)).isoformat()}])
    assert texts(memory.recall("t1")) == ["from object", "from dict"]
    assert memory.recall("t1").messages[0] == obj


def test_an_id_saved_twice_in_one_transaction_keeps_the_later_version(memory):
    memory.create_thread("r1", thread_id="t1")
    with memory.transaction():
        memory.save_messages([{"id": "a", "thread_id": "t1", "role": "user", "content": "first"}])
        memory.save_messages([{"id": "a", "thread_id": "t1", "role": "user", "content": "second"}])
    assert texts(memory.recall("t1")) == ["second"]


def test_upsert_keeps_created_at_and_position(memory):
    seed(memory, "t1", 3)
    memory.save_messages([{"id": "t1-1", "thread_id": "t1", "role": "user", "content": "edited",
                           "created_at": T0 + timedelta(days=9)}])
    result = memory.recall("t1")
    assert texts(result) == ["edited", "Message 2", "Message 3"]
    assert result.messages[0].created_at == T0


def test_upsert_keeps_the_position_among_messages_of_the_same_time(memory):
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"id": i, "thread_id": "t1", "role": "user", "content": i, "created_at": T0}
                          for i in "abc"])
    memory.save_messages([{"id": "a", "thread_id": "t1", "role": "user", "content": "a2", "created_at": T0},
                          {"id": "d", "thread_id": "t1", "role": "user", "content": "d", "created_at": T0}])
    memory.save_messages([{"id": "b", "thread_id": "t1", "role": "user", "content": "b2", "created_at": T0}])
    assert texts(memory.recall("t1")) == ["a2", "b2", "c", "d"]


def test_repeated_id_in_one_batch_keeps_the_last(memory):
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"id": "x", "thread_id": "t1", "role": "user", "content": c} for c in "abc"])
    assert texts(memory.recall("t1")) == ["c"]


def test_system_messages_are_not_stored(memory):
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"thread_id": "t1", "role": "system", "content": "be brief"},
                          {"thread_id": "t1", "role": "user", "content": "hello"}])
    assert texts(memory.recall("t1")) == ["hello"]


def test_saving_into_a_missing_thread_creates_it_when_the_resource_is_known(memory):
    memory.save_messages([{"thread_id": "new", "resource_id": "r9", "role": "user", "content": "x"}])
    assert memory.get_thread_by_id("new").resource_id == "r9"
    with pytest.raises(ThreadNotFoundError):
        memory.save_messages([{"thread_id": "other", "role": "user", "content": "x"}])


@pytest.mark.parametrize("bad, match", [
    ({"thread_id": "", "role": "user", "content": "x"}, "threadId must be a non-empty string"),
    ({"thread_id": "t1", "role": "robot", "content": "x"}, "role must be one of"),
    ({"thread_id": "t1", "role": "user", "content": 42}, "content"),
    ({"thread_id": "t1", "role": "user", "content": "x", "created_at": "yesterday"}, "created_at|isoformat|Invalid"),
    ({"thread_id": "t1", "role": "user", "content": "x", "metadata": [1]}, "metadata must be a dict"),
])
def test_bad_messages_are_refused_and_nothing_is_written(memory, bad, match):
    memory.create_thread("r1", thread_id="t1")
    good = {"thread_id": "t1", "role": "user", "content": "fine"}
    with pytest.raises(InvalidArgumentError, match=match):
        memory.save_messages([good, bad])
    assert memory.recall("t1").messages == []


def test_a_failed_write_leaves_no_trace(memory, monkeypatch):
    seed(memory, "t1", 2)

    written = memory.storage.save_turn

    def boom(messages):  # the rows are written, then the transaction fails
        with memory.storage.transaction():
            written(messages)
            raise RuntimeError("disk full")

    monkeypatch.setattr(memory.storage, "save_turn", boom)
    with pytest.raises(RuntimeError):
        memory.save_messages([{"thread_id": "t1", "role": "user", "content": "lost"}])
    monkeypatch.undo()
    assert texts(memory.recall("t1")) == ["Message 1", "Message 2"]
    assert sum(len(rows) for rows in memory.storage.scan_messages()) == 2


def test_update_messages_merges_metadata_and_replaces_text(memory):
    seed(memory, "t1", 2, metadata=lambda i: {"a": i, "keep": True})
    updated = memory.update_messages([{"id": "t1-1", "content": "changed", "metadata": {"a": 10}},
                                      {"id": "unknown", "content": "ignored"}])
    assert [m.id for m in updated] == ["t1-1"]
    first = memory.recall("t1").messages[0]
    assert first.text == "changed" and first.metadata == {"a": 10, "keep": True}
    assert first.created_at == T0
    assert memory.update_messages([]) == []


def test_update_can_move_a_message_to_another_thread(memory):
    seed(memory, "t1", 2)
    memory.create_thread("r1", thread_id="t2")
    stamp = memory.get_thread_by_id("t2").updated_at
    memory.update_messages([{"id": "t1-1", "thread_id": "t2"}])
    assert texts(memory.recall("t1")) == ["Message 2"]
    assert texts(memory.recall("t2")) == ["Message 1"]
    assert memory.get_thread_by_id("t2").updated_at > stamp


def test_delete_thread_removes_its_messages(memory):
    seed(memory, "t1", 3)
    seed(memory, "t2", 2)
    memory.delete_thread("t1")
    memory.delete_thread("never-existed")
    assert memory.get_thread_by_id("t1") is None
    assert memory.recall("t1", per_page=False).messages == []
    assert len(memory.recall("t2").messages) == 2


def test_reopening_a_file_gives_everything_back(tmp_path):
    path = tmp_path / "m.duckdb"
    first = Memory(storage=DuckDBStorage(path))
    seed(first, "t1", 30, metadata=lambda i: {"n": i})
    first.delete_messages(["t1-5"])
    first.update_messages([{"id": "t1-6", "content": "six"}])
    expected = first.recall("t1", per_page=False).messages
    first.storage.close()
    second = Memory(storage=DuckDBStorage(path))
    assert second.recall("t1", per_page=False).messages == expected
    seed(second, "t1", 1, first=31, start=T0 + timedelta(days=1))
    assert second.recall("t1", per_page=1).messages[0].text == "Message 31"
    assert [t.id for t in second.list_threads().threads] == ["t1"]


@pytest.mark.parametrize("odd", [None, float("nan")], ids=["json", "nan"])
def test_a_reopened_store_filters_metadata_as_before(tmp_path, odd):
    """Reopening rebuilds the in-memory mirror from the stored JSON (NaN, which only Python's
    JSON reads, takes the slow path); metadata filters answer as before."""
    path = tmp_path / "m.duckdb"
    first = Memory(storage=DuckDBStorage(path))
    seed(first, "t1", 12, metadata=lambda i: {"n": i, "even": i % 2 == 0, "tag": f"k{i % 3}",
                                             "ratio": i / 4, "nested": {"a": i}, "odd": odd})
    filters = [{"n": 3}, {"even": True}, {"tag": "k1"}, {"ratio": 0.5}, {"tag": "k2", "even": False}]
    before = [first.recall("t1", per_page=False, filter={"metadata": f}).messages for f in filters]
    first.storage.close()
    second = Memory(storage=DuckDBStorage(path))
    after = [second.recall("t1", per_page=False, filter={"metadata": f}).messages for f in filters]
    assert [len(m) for m in before] == [1, 6, 4, 1, 2]
    assert [[m.id for m in ms] for ms in after] == [[m.id for m in ms] for ms in before]


def test_ties_keep_insertion_order(memory):
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"id": f"m{i}", "thread_id": "t1", "role": "user", "content": str(i),
                           "created_at": T0} for i in (3, 1, 2)])
    memory.save_messages([{"id": "m0", "thread_id": "t1", "role": "user", "content": "0", "created_at": T0}])
    assert texts(memory.recall("t1")) == ["3", "1", "2", "0"]


def test_async_twins(memory):
    async def run():
        await memory.acreate_thread("r1", thread_id="t1")
        await memory.asave_messages([{"thread_id": "t1", "role": "user", "content": "async"}])
        result = await memory.arecall("t1")
        threads = await memory.alist_threads(resource_id="r1")
        return result, threads

    result, threads = asyncio.run(run())
    assert texts(result) == ["async"] and threads.total == 1
    assert Memory.arecall.__name__ == "arecall"


def test_dict_round_trip_of_the_types(memory):
    saved = seed(memory, "t1", 1, metadata=lambda i: {"x": [1, {"y": None}]})[0]
    assert Message.from_dict(saved.to_dict()) == saved
    result = memory.recall("t1")
    assert result.to_dict()["messages"][0]["content"] == {"parts": [{"type": "text", "text": "Message 1"}]}


def test_close_saves_the_index_and_a_reopen_finds_everything(tmp_path):
    path = tmp_path / "m.duckdb"
    with Memory(storage=DuckDBStorage(path), embedder=HashEmbedder(dim=16),
                options={"semantic_recall": {"scope": "thread", "top_k": 1, "message_range": 0}}) as memory:
        seed(memory, "t1", 5)
    assert (tmp_path / "m.duckdb.mastra_memory_hash_v1_16.hnsw").exists()
    with Memory(storage=DuckDBStorage(path), embedder=HashEmbedder(dim=16),
                options={"semantic_recall": {"scope": "thread", "top_k": 1, "message_range": 0}}) as memory:
        assert [m.id for m in memory.recall("t1", per_page=0, vector_search_string="Message 3").messages] == ["t1-3"]


def test_a_thread_read_after_a_save_is_the_stored_one(tmp_path):
    path = tmp_path / "m.duckdb"
    memory = Memory(storage=DuckDBStorage(path))
    created = memory.create_thread("r1", thread_id="t1", title="x", metadata={"a": 1})
    memory.save_messages([{"thread_id": "t1", "role": "user", "content": "hi"}])
    touched = memory.get_thread_by_id("t1")
    assert touched.updated_at > created.updated_at
    memory.close()
    with Memory(storage=DuckDBStorage(path)) as reopened:
        assert reopened.get_thread_by_id("t1") == touched


def test_a_thread_created_by_its_messages_reads_back_as_stored(tmp_path):
    path = tmp_path / "m.duckdb"
    memory = Memory(storage=DuckDBStorage(path))
    memory.save_messages([{"thread_id": "new", "resource_id": "r9", "role": "user", "content": "x"}])
    created = memory.get_thread_by_id("new")  # from the cache filled at commit
    assert created.resource_id == "r9" and created.title == "" and created.metadata == {}
    assert created.created_at == created.updated_at
    memory.close()
    with Memory(storage=DuckDBStorage(path)) as reopened:
        assert reopened.get_thread_by_id("new") == created


def test_a_thread_created_in_a_rolled_back_transaction_is_gone(memory):
    with pytest.raises(RuntimeError), memory.transaction():
        memory.save_messages([{"thread_id": "new", "resource_id": "r9", "role": "user", "content": "x"}])
        assert memory.get_thread_by_id("new").resource_id == "r9"  # seen by its own transaction
        raise RuntimeError("abandon")
    assert memory.get_thread_by_id("new") is None
    with pytest.raises(ThreadNotFoundError):
        memory.save_messages([{"thread_id": "new", "role": "user", "content": "x"}])


def test_a_thread_changed_after_its_creation_in_one_transaction_is_read_as_changed(memory):
    with memory.transaction():
        memory.save_messages([{"thread_id": "new", "resource_id": "r9", "role": "user", "content": "x"}])
        memory.update_thread("new", title="named")
        memory.save_messages([{"thread_id": "new", "role": "user", "content": "y"}])
        assert memory.get_thread_by_id("new").title == "named"
    assert memory.get_thread_by_id("new").title == "named"
    assert len(memory.recall("new").messages) == 2


def test_a_touched_thread_is_read_as_touched_inside_its_transaction_and_as_before_after_a_rollback(memory):
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"thread_id": "t1", "role": "user", "content": "first"}])
    before = memory.get_thread_by_id("t1")  # cached
    with pytest.raises(RuntimeError), memory.transaction():
        memory.save_messages([{"thread_id": "t1", "role": "user", "content": "second"}])
        assert memory.get_thread_by_id("t1").updated_at > before.updated_at
        raise RuntimeError("abandon")
    assert memory.get_thread_by_id("t1") == before
    memory.save_messages([{"thread_id": "t1", "role": "user", "content": "third"}])
    after = memory.get_thread_by_id("t1")
    assert after.updated_at > before.updated_at
    if isinstance(memory.storage, DuckDBStorage):  # the cached thread is the stored one
        memory.storage._threads.drop(["t1"])
        assert memory.get_thread_by_id("t1") == after  # read from the database
        assert memory.list_threads(resource_id="r1").threads == [after]  # the threads table itself
        stored = memory.storage.db.fetch_one("SELECT updated_at FROM threads WHERE id = 't1'")[0]
        assert stored == after.updated_at
