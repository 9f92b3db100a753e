"""Bad input to a public call raises one of threadrecall.errors naming the cause, and writes
nothing: every table of the database file holds the same rows before and after the call."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from threadrecall import Memory
from threadrecall.embedders import HashEmbedder
from threadrecall.errors import (
    InvalidArgumentError,
    ResourceMismatchError,
    ThreadNotFoundError,
    ThreadRecallError,
    UnsupportedValueError,
)
from threadrecall.storage import DuckDBStorage
from threadrecall.vector import HnswVectorStore

TABLES = ("threads", "messages", "resources", "vector_rows")


@pytest.fixture
def memory(tmp_path):
    memory = Memory(
        storage=DuckDBStorage(tmp_path / "m.duckdb"), embedder=HashEmbedder(dim=32),
        options={"semantic_recall": {"top_k": 2}, "working_memory": {
            "enabled": True, "schema": {"type": "object", "properties": {"name": {"type": "string"}}}}},
    )
    memory.create_thread("r1", thread_id="t1", title="first", metadata={"topic": "a"})
    memory.create_thread("r2", thread_id="t2")
    memory.save_messages([{"id": "m1", "thread_id": "t1", "role": "user", "content": "hello"}])
    yield memory
    memory.close()


def rows(memory: Memory) -> dict[str, list]:
    cur = memory.storage.db.cursor()
    return {t: sorted(map(repr, cur.execute(f"SELECT * FROM {t}").fetchall())) for t in TABLES}


def msg(**fields):
    return {"thread_id": "t1", "role": "user", "content": "text", **fields}


# A NUL character in an identifier or a title (PostgreSQL's text cannot hold one); in message
# text and metadata it is stored.
NUL = "cannot contain a NUL character"
NUL_WRITES = [
    ("NUL in message id", lambda m: m.save_messages([msg(id="m\0")]), InvalidArgumentError, NUL),
    ("NUL in thread id", lambda m: m.save_messages([msg(thread_id="t\0", resource_id="r1")]),
     InvalidArgumentError, NUL),
    ("NUL in resource id", lambda m: m.save_messages([msg(thread_id="new", resource_id="r\0")]),
     InvalidArgumentError, NUL),
    ("NUL in message type", lambda m: m.save_messages([msg(type="t\0")]), InvalidArgumentError, NUL),
    ("NUL in a title", lambda m: m.create_thread("r1", thread_id="t3", title="a\0"), InvalidArgumentError, NUL),
    ("NUL in a created thread id", lambda m: m.create_thread("r1", thread_id="t\0"), InvalidArgumentError, NUL),
    ("NUL in an updated title", lambda m: m.update_thread("t1", title="a\0"), InvalidArgumentError, NUL),
    ("NUL in an updated resource", lambda m: m.update_messages([{"id": "m1", "resource_id": "r\0"}]),
     InvalidArgumentError, NUL),
    ("NUL in a deleted id", lambda m: m.delete_messages(["m1", "m\0"]), InvalidArgumentError, NUL),
    ("NUL in a working memory thread", lambda m: m.update_working_memory("t\0", "x", resource_id="r1"),
     InvalidArgumentError, NUL),
]
NUL_READS = [
    ("NUL in a recalled thread", lambda m: m.recall("t\0"), InvalidArgumentError, NUL),
    ("NUL in a recalled resource", lambda m: m.recall("t1", resource_id="r\0"), InvalidArgumentError, NUL),
    ("NUL in a cursor", lambda m: m.recall("t1", before_id="m\0"), InvalidArgumentError, NUL),
    ("NUL in an include", lambda m: m.recall("t1", include=[{"id": "m\0"}]), InvalidArgumentError, NUL),
    ("NUL in a lookup", lambda m: m.get_thread_by_id("t\0"), InvalidArgumentError, NUL),
    ("NUL in list_threads", lambda m: m.list_threads(resource_id="r\0"), InvalidArgumentError, NUL),
]

WRITES = [
    # (name, call, error class, a fragment of the message naming the cause)
    ("int metadata key", lambda m: m.save_messages([msg(metadata={1: "a"})]), UnsupportedValueError, "key 1"),
    ("object metadata", lambda m: m.save_messages([msg(metadata={"o": object()})]),
     UnsupportedValueError, "'o'"),
    ("datetime metadata", lambda m: m.save_messages([msg(metadata={"when": datetime.now(timezone.utc)})]),
     UnsupportedValueError, "'when'"),
    ("bytes metadata", lambda m: m.save_messages([msg(metadata={"raw": b"x"})]), UnsupportedValueError, "'raw'"),
    ("nested set metadata", lambda m: m.save_messages([msg(metadata={"tags": [{"s": {1}}]})]),
     UnsupportedValueError, "'tags'"),
    ("bad second message", lambda m: m.save_messages([msg(id="ok"), msg(metadata={"o": object()})]),
     UnsupportedValueError, "'o'"),
    ("datetime in a part", lambda m: m.save_messages(
        [msg(content={"parts": [{"type": "tool-invocation", "at": datetime.now()}]})]),
     UnsupportedValueError, "'at'"),
    ("surrogate in message id", lambda m: m.save_messages([msg(id="m\ud800")]), InvalidArgumentError, "surrogate"),
    ("surrogate in text", lambda m: m.save_messages([msg(content="a\udc00b")]), InvalidArgumentError, "surrogate"),
    ("surrogate in content.text", lambda m: m.save_messages([msg(content={"parts": [], "text": "\ud800"})]),
     InvalidArgumentError, "surrogate"),
    ("surrogate in thread id", lambda m: m.save_messages([msg(thread_id="t\ud800", resource_id="r1")]),
     InvalidArgumentError, "surrogate"),
    ("surrogate in resource id", lambda m: m.save_messages([msg(thread_id="new", resource_id="r\ud800")]),
     InvalidArgumentError, "surrogate"),
    ("surrogate metadata key", lambda m: m.save_messages([msg(metadata={"k\ud800": 1})]),
     InvalidArgumentError, "surrogate"),
    ("non-str type", lambda m: m.save_messages([msg(type=3)]), InvalidArgumentError, "type"),
    ("time out of range", lambda m: m.save_messages([msg(created_at=1e20)]), InvalidArgumentError, "range"),
    ("unknown thread", lambda m: m.save_messages([msg(thread_id="nope")]), ThreadNotFoundError, "nope"),
    ("create over another resource", lambda m: m.create_thread("r2", thread_id="t1", title="mine"),
     ResourceMismatchError, "Thread with id t1 is for resource with id r1 but resource r2"),
    ("thread metadata object", lambda m: m.create_thread("r1", thread_id="t3", metadata={"o": object()}),
     UnsupportedValueError, "'o'"),
    ("thread title int", lambda m: m.create_thread("r1", thread_id="t3", title=7), InvalidArgumentError, "title"),
    ("thread title surrogate", lambda m: m.create_thread("r1", thread_id="t3", title="\ud800"),
     InvalidArgumentError, "surrogate"),
    ("thread id surrogate", lambda m: m.create_thread("r1", thread_id="\ud800"), InvalidArgumentError, "surrogate"),
    ("update_thread metadata", lambda m: m.update_thread("t1", metadata={"when": datetime.now()}),
     UnsupportedValueError, "'when'"),
    ("update_thread title", lambda m: m.update_thread("t1", title=b"x"), InvalidArgumentError, "title"),
    ("update_messages metadata", lambda m: m.update_messages([{"id": "m1", "metadata": {2: "x"}}]),
     UnsupportedValueError, "key 2"),
    ("update_messages content", lambda m: m.update_messages([{"id": "m1", "content": "\ud800"}]),
     InvalidArgumentError, "surrogate"),
    ("update_messages type", lambda m: m.update_messages([{"id": "m1", "type": 1}]), InvalidArgumentError, "type"),
    ("update_messages resource", lambda m: m.update_messages([{"id": "m1", "resource_id": 5}]),
     InvalidArgumentError, "resource_id"),
    ("delete_messages surrogate", lambda m: m.delete_messages(["m1", "\ud800"]), InvalidArgumentError, "surrogate"),
    ("working memory surrogate", lambda m: m.update_working_memory("t1", "\ud800", resource_id="r1"),
     InvalidArgumentError, "surrogate"),
    ("working memory patch", lambda m: m.merge_working_memory("t1", {"name": object()}, resource_id="r1"),
     UnsupportedValueError, "'name'"),
    *NUL_WRITES,
]


@pytest.mark.parametrize("name, call, error, fragment", WRITES, ids=[w[0] for w in WRITES])
def test_a_bad_write_raises_and_writes_nothing(memory, name, call, error, fragment):
    before = rows(memory)
    with pytest.raises(error, match=re.escape(fragment)):
        call(memory)
    assert rows(memory) == before
    assert [m.id for m in memory.recall("t1", per_page=False).messages] == ["m1"]


def test_nothing_of_a_refused_save_comes_back_on_reopen(tmp_path):
    path = tmp_path / "m.duckdb"
    with Memory(storage=DuckDBStorage(path)) as memory:
        memory.create_thread("r1", thread_id="t1")
        with pytest.raises(UnsupportedValueError):
            memory.save_messages([msg(id="x", metadata={1: "a"})])
        assert memory.recall("t1").messages == []
    with Memory(storage=DuckDBStorage(path)) as memory:
        assert memory.recall("t1").messages == []
        memory.delete_messages(["x"])


def test_create_thread_keeps_the_other_resources_thread(memory):
    with pytest.raises(ResourceMismatchError):
        memory.create_thread("r2", thread_id="t1", title="taken")
    thread = memory.get_thread_by_id("t1")
    assert (thread.resource_id, thread.title, thread.metadata) == ("r1", "first", {"topic": "a"})
    assert memory.recall("t1", resource_id="r1").total == 1
    assert memory.create_thread("r1", thread_id="t1", title="renamed").title == "renamed"


READS = [
    ("huge page", lambda m: m.recall("t1", page=10**30, per_page=10), InvalidArgumentError, "page"),
    ("huge per_page", lambda m: m.recall("t1", per_page=10**30), InvalidArgumentError, "page"),
    ("huge thread page", lambda m: m.list_threads(page=10**30), InvalidArgumentError, "page"),
    ("surrogate thread id", lambda m: m.recall("t\ud800"), InvalidArgumentError, "surrogate"),
    ("surrogate resource id", lambda m: m.recall("t1", resource_id="\ud800"), InvalidArgumentError, "surrogate"),
    ("surrogate query", lambda m: m.recall("t1", resource_id="r1", vector_search_string="\ud800"),
     InvalidArgumentError, "surrogate"),
    ("query not a string", lambda m: m.recall("t1", resource_id="r1", vector_search_string=5),
     InvalidArgumentError, "vector_search_string"),
    ("surrogate cursor", lambda m: m.recall("t1", after_id="\ud800"), InvalidArgumentError, "surrogate"),
    ("surrogate lookup", lambda m: m.get_thread_by_id("\ud800"), InvalidArgumentError, "surrogate"),
    ("surrogate list_threads", lambda m: m.list_threads(resource_id="\ud800"), InvalidArgumentError, "surrogate"),
    ("date out of range", lambda m: m.recall("t1", filter={"date_range": {"start": 1e20}}),
     InvalidArgumentError, "start"),
    ("surrogate in a filter value", lambda m: m.recall("t1", filter={"metadata": {"k": "\ud800"}}),
     InvalidArgumentError, "surrogate"),
    ("surrogate in an include", lambda m: m.recall("t1", include=[{"id": "\ud800"}]),
     InvalidArgumentError, "surrogate"),
    ("surrogate in a thread filter", lambda m: m.list_threads(metadata={"k\ud800": 1}),
     InvalidArgumentError, "surrogate"),
    ("surrogate in a working memory thread", lambda m: m.get_working_memory("\ud800", resource_id="r1"),
     InvalidArgumentError, "surrogate"),
    *NUL_READS,
]


@pytest.mark.parametrize("name, call, error, fragment", READS, ids=[r[0] for r in READS])
def test_a_bad_read_raises_a_library_error(memory, name, call, error, fragment):
    with pytest.raises(error, match=re.escape(fragment)):
        call(memory)


def test_every_error_above_is_a_library_error():
    assert all(issubclass(case[2], ThreadRecallError) for case in WRITES + READS)
    assert issubclass(UnsupportedValueError, TypeError)


VECTOR_CALLS = [
    ("surrogate id", lambda v: v.upsert("x", [[1, 0]], ids=["\ud800"]), InvalidArgumentError, "surrogate"),
    ("object metadata", lambda v: v.upsert("x", [[1, 0]], ids=["a"], metadata=[{"o": object()}]),
     UnsupportedValueError, "vector a key 'o'"),
    ("surrogate filter", lambda v: v.query("x", [1, 0], filter={"k": "\ud800"}), InvalidArgumentError,
     "surrogate"),
    ("surrogate filter key", lambda v: v.query("x", [1, 0], filter={"$and": [{"k\udc00": 1}]}),
     InvalidArgumentError, "surrogate"),
    ("surrogate in a filter list", lambda v: v.query("x", [1, 0], filter={"k": {"$in": ["a", "\ud800"]}}),
     InvalidArgumentError, "surrogate"),
    ("surrogate delete", lambda v: v.delete_vectors("x", ids=["\ud800"]), InvalidArgumentError, "surrogate"),
    ("NUL in an id", lambda v: v.upsert("x", [[1, 0]], ids=["a\0"]), InvalidArgumentError, NUL),
    ("NUL in a deleted id", lambda v: v.delete_vectors("x", ids=["kept\0"]), InvalidArgumentError, NUL),
]


@pytest.mark.parametrize("name, call, error, fragment", VECTOR_CALLS, ids=[c[0] for c in VECTOR_CALLS])
def test_bad_vector_calls_raise_and_write_nothing(tmp_path, name, call, error, fragment):
    store = HnswVectorStore(tmp_path / "v.duckdb")
    store.create_index("x", 2)
    store.upsert("x", [[0, 1]], ids=["kept"])
    cur = store.rows.db.cursor()
    before = cur.execute("SELECT * FROM vector_rows").fetchall()
    with pytest.raises(error, match=re.escape(fragment)):
        call(store)
    assert cur.execute("SELECT * FROM vector_rows").fetchall() == before
    store.close()


def test_a_huge_top_k_returns_every_match():
    store = HnswVectorStore()
    store.create_index("x", 2)
    store.upsert("x", [[0, 1], [1, 0]], ids=["a", "b"])
    assert sorted(r.id for r in store.query("x", [1, 0], top_k=10**30)) == ["a", "b"]



@pytest.mark.parametrize("name, call, error, fragment", NUL_WRITES + NUL_READS,
                         ids=[c[0] for c in NUL_WRITES + NUL_READS])
def test_a_nul_in_an_identifier_is_refused_alike_on_every_backend(storage, name, call, error, fragment):
    memory = Memory(storage=storage, options={"working_memory": {"enabled": True}})
    memory.create_thread("r1", thread_id="t1", title="first")
    memory.save_messages([{"id": "m1", "thread_id": "t1", "role": "user", "content": "a\0b",
                           "metadata": {"k": "v\0"}}])  # text and metadata hold it
    with pytest.raises(error, match=re.escape(fragment)):
        call(memory)
    assert [(m.id, m.text) for m in memory.recall("t1", per_page=False).messages] == [("m1", "a\0b")]
    assert [t.id for t in memory.list_threads().threads] == ["t1"]
