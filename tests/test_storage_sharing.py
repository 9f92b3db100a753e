"""One DuckDB file per process: shared by every user in the process, refused to a second
process; the change feed and the replica that follows it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from threadrecall import Memory
from threadrecall.embedders import HashEmbedder
from threadrecall.errors import ConfigurationError
from threadrecall.storage import Changes, DuckDBStorage, Replica
from threadrecall.vector import HnswVectorStore

SEMANTIC = {"semantic_recall": {"top_k": 1, "message_range": 0, "scope": "thread"}}


def _memory(path):
    return Memory(storage=DuckDBStorage(path), embedder=HashEmbedder(), options=SEMANTIC)


def _found(memory, query):
    return [m.id for m in memory.recall("t", per_page=0, vector_search_string=query).messages]


def test_two_stores_on_one_path_are_one_database(tmp_path):
    a = DuckDBStorage(tmp_path / "m.duckdb")
    b = DuckDBStorage(str(tmp_path / "." / "m.duckdb"))
    assert a is b
    a.close()
    Memory(storage=b).create_thread("r", thread_id="t")  # still open for its other user
    b.close()
    reopened = DuckDBStorage(tmp_path / "m.duckdb")
    assert reopened is not a and reopened.get_thread("t") is not None
    reopened.close()


def test_two_memories_on_one_path_never_diverge(tmp_path):
    path = tmp_path / "m.duckdb"
    first, second = _memory(path), _memory(path)
    first.create_thread("r", thread_id="t")
    first.save_messages([
        {"id": "a", "thread_id": "t", "role": "user", "content": "renew the passport before June"},
        {"id": "b", "thread_id": "t", "role": "user", "content": "a table for two in Lisbon"},
    ])
    assert [m.id for m in second.recall("t").messages] == ["a", "b"]
    assert _found(second, "renew the passport before June") == ["a"]
    second.delete_messages(["a"])  # a delete of the other's message takes effect for both
    assert [m.id for m in first.recall("t").messages] == ["b"]
    assert _found(first, "renew the passport before June") == ["b"]
    second.save_messages([{"id": "c", "thread_id": "t", "role": "user", "content": "book the ferry"}])
    first.close()
    second.close()
    reopened = _memory(path)  # the index file holds both users' vectors
    assert reopened.vector.describe_index(reopened.index.name).count == 2
    assert _found(reopened, "book the ferry") == ["c"]
    reopened.close()


def test_vector_stores_on_one_database_are_shared_with_the_same_settings(tmp_path):
    storage = DuckDBStorage(tmp_path / "m.duckdb")
    store = HnswVectorStore(storage)
    assert HnswVectorStore(storage) is store
    with pytest.raises(ConfigurationError, match="other settings"):
        HnswVectorStore(storage, m=8)
    store.close()
    store.close()
    storage.close()


def test_a_second_process_is_refused_with_a_pointer_to_postgres(tmp_path):
    path = tmp_path / "m.duckdb"
    storage = DuckDBStorage(path)
    script = (
        "import sys\n"
        "from threadrecall.storage import DuckDBStorage\n"
        "from threadrecall.errors import ConfigurationError\n"
        "try:\n"
        "    DuckDBStorage(sys.argv[1])\n"
        "except ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True,
                         timeout=60)
    assert "PostgresStorage" in out.stdout, out.stderr
    storage.close()


def test_change_feed_replays_commits_in_order(tmp_path):
    storage = DuckDBStorage(tmp_path / "m.duckdb")
    memory = Memory(storage=storage)
    start = storage.changes_since(0)
    memory.create_thread("r", thread_id="t")
    memory.save_messages([{"id": "a", "thread_id": "t", "role": "user", "content": "one"}])
    memory.delete_messages(["a"])
    memory.save_messages([{"id": "a", "thread_id": "t", "role": "user", "content": "again"},
                          {"id": "b", "thread_id": "t", "role": "user", "content": "two"}])
    changes = storage.changes_since(start.position)
    assert [r[0] for r in changes.upserted] == ["a", "b"] and changes.deleted == []
    assert storage.changes_since(changes.position) == Changes(changes.position)
    replica = Replica()
    replica.catch_up(storage)  # from position 0 of a feed that starts later: a full rebuild
    assert [r[0] for r in replica.timeline.page("t")[0]] == ["a", "b"]
    memory.delete_thread("t")
    replica.catch_up(storage)
    assert replica.timeline.page("t") == ([], 0)
    storage.close()


def test_merged_changes_keep_the_last_write_of_each_id():
    row = lambda mid, thread="t": (mid, thread, None, 0, 1, "{}")  # noqa: E731
    merged = Changes.merged(4, [
        Changes(1, upserted=[row("a"), row("b")]),
        Changes(2, deleted=["a"]),
        Changes(3, deleted_threads=["t"]),
        Changes(4, upserted=[row("c")]),
    ])
    assert [r[0] for r in merged.upserted] == ["c"]
    assert merged.deleted == ["a"] and merged.deleted_threads == ["t"]
