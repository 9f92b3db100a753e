"""Semantic recall over PostgreSQL with the HNSW cache: in steady state the cache is searched as
held and its freshness is checked in the same statement that reads the hits back (one round
trip); a write committed elsewhere before the call makes that check fail, and the call then
catches up, searches again and reads again, so it still finds the write."""

from __future__ import annotations

import pytest

from threadrecall import Memory
from threadrecall.embedders import HashEmbedder
from threadrecall.errors import ResourceMismatchError
from threadrecall.storage import PostgresStorage
from threadrecall.vector import HnswVectorStore

OPTIONS = {"last_messages": 0, "semantic_recall": {"top_k": 1, "message_range": 1, "scope": "resource"}}
TEXTS = ["the kettle arrived broken", "a refund was issued", "my passport expires in June",
         "book a table in Lisbon"]


def _memory(pg_dsn: str, pg_schema: str) -> tuple[Memory, PostgresStorage]:
    storage = PostgresStorage(pg_dsn, schema=pg_schema)
    memory = Memory(storage=storage, vector=HnswVectorStore(storage), embedder=HashEmbedder(dim=64),
                    options=OPTIONS)
    return memory, storage


def _count(monkeypatch: pytest.MonkeyPatch, target: object, name: str,
           calls: list[int] | None = None) -> list[int]:
    """Count the calls of ``target.name`` (still calling through), in ``calls`` when given."""
    calls = [0] if calls is None else calls
    original = getattr(target, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, counted)
    return calls


def _statements(monkeypatch: pytest.MonkeyPatch, storage: PostgresStorage) -> list[int]:
    """Count the statements ``storage`` runs: through a cursor (``_fetch``) or prepared by
    name (``run_named``)."""
    from threadrecall.storage.postgres import storage as module

    return _count(monkeypatch, module, "run_named", _count(monkeypatch, storage, "_fetch"))


@pytest.fixture
def two_stores(pg_dsn, pg_schema):
    """A reader and a writer on one schema, each with its own storage and HNSW cache (two
    processes, as far as the database can tell)."""
    reader, reader_storage = _memory(pg_dsn, pg_schema)
    writer, _ = _memory(pg_dsn, pg_schema)
    reader.create_thread("r1", thread_id="t0")
    reader.save_messages([{"id": f"m{i}", "thread_id": "t0", "role": "user", "content": text}
                          for i, text in enumerate(TEXTS)])
    yield reader, reader_storage, writer
    reader.close()
    writer.close()


def test_a_current_cache_costs_one_statement(two_stores, monkeypatch):
    reader, storage, _ = two_stores
    reader.recall("t0", resource_id="r1", vector_search_string="warm up")  # the cache is loaded
    statements = _statements(monkeypatch, storage)
    catch_ups = _count(monkeypatch, reader.vector.rows, "changes")
    for scope in ("resource", "thread"):
        got = reader.recall("t0", resource_id="r1", vector_search_string="my passport expires in June",
                            thread_config={"semantic_recall": {"scope": scope}})
        assert [m.id for m in got.messages] == ["m1", "m2", "m3"]
        assert set(got.scores) == {"m2"}
    got = reader.recall("t0", vector_search_string="the kettle arrived broken",
                        thread_config={"semantic_recall": {"scope": "thread"}})  # no owner to check
    assert [m.id for m in got.messages] == ["m0", "m1"]
    assert (statements[0], catch_ups[0]) == (3, 0)


def test_a_write_committed_elsewhere_is_found_by_the_next_call(two_stores, monkeypatch):
    reader, storage, writer = two_stores
    reader.recall("t0", resource_id="r1", vector_search_string="warm up")
    writer.save_messages([{"id": "new", "thread_id": "t0", "resource_id": "r1", "role": "user",
                           "content": "the train to Porto leaves at nine"}])
    statements = _statements(monkeypatch, storage)
    delta_reads = _count(monkeypatch, reader.vector.rows, "changes")
    got = reader.recall("t0", resource_id="r1", vector_search_string="the train to Porto leaves at nine")
    assert [m.id for m in got.messages] == ["m3", "new"] and set(got.scores) == {"new"}
    # The first statement brought the change with the stale check; the hits were read again.
    assert (statements[0], delta_reads[0]) == (2, 0)
    again = reader.recall("t0", resource_id="r1", vector_search_string="the train to Porto leaves at nine")
    assert [m.id for m in again.messages] == ["m3", "new"]
    assert (statements[0], delta_reads[0]) == (3, 0)  # current again: one statement


def test_a_write_of_this_process_is_found_by_its_next_call(two_stores):
    reader, _, _ = two_stores
    reader.recall("t0", resource_id="r1", vector_search_string="warm up")
    for i in range(20):
        reader.save_messages([{"id": f"own{i}", "thread_id": "t0", "resource_id": "r1", "role": "user",
                               "content": f"reminder {i}: water the plants in room {i * 7}"}])
        got = reader.recall("t0", resource_id="r1",
                            vector_search_string=f"reminder {i}: water the plants in room {i * 7}")
        assert got.scores and next(iter(got.scores)) == f"own{i}"


def test_a_deletion_committed_elsewhere_is_not_returned(two_stores):
    reader, _, writer = two_stores
    reader.recall("t0", resource_id="r1", vector_search_string="warm up")
    writer.delete_messages(["m2"])
    got = reader.recall("t0", resource_id="r1", vector_search_string="my passport expires in June")
    assert "m2" not in {m.id for m in got.messages} and "m2" not in got.scores


def test_the_owner_is_still_checked_on_the_one_statement(two_stores):
    reader, _, _ = two_stores
    reader.recall("t0", resource_id="r1", vector_search_string="warm up")
    with pytest.raises(ResourceMismatchError):
        reader.recall("t0", resource_id="someone-else", vector_search_string="a refund was issued",
                      thread_config={"semantic_recall": {"scope": "thread"}})


def test_a_cache_lagging_past_the_pruned_changes_is_rebuilt_by_recall(two_stores, monkeypatch):
    """The check brings no partial delta when the changes since the cache's generation are
    partly pruned: the call rebuilds the cache, and still sees every write and deletion."""
    from threadrecall.vector import rows_postgres

    monkeypatch.setattr(rows_postgres, "PRUNE_EVERY", 4)
    monkeypatch.setattr(rows_postgres, "PRUNE_KEEP", 6)
    reader, _, writer = two_stores
    reader.recall("t0", resource_id="r1", vector_search_string="warm up")
    writer.delete_messages(["m2"])
    for i in range(12):  # each its own transaction and generation
        writer.save_messages([{"id": f"w{i}", "thread_id": "t0", "resource_id": "r1", "role": "user",
                               "content": f"later note {i} on topic {i * 11}"}])
    got = reader.recall("t0", resource_id="r1", vector_search_string="my passport expires in June")
    assert "m2" not in {m.id for m in got.messages}
    got = reader.recall("t0", resource_id="r1", vector_search_string="later note 3 on topic 33")
    assert next(iter(got.scores)) == "w3"


def test_a_write_elsewhere_that_changes_no_hit_costs_one_statement(two_stores, monkeypatch):
    reader, storage, writer = two_stores
    reader.recall("t0", resource_id="r1", vector_search_string="warm up")
    writer.create_thread("r2", thread_id="other")
    writer.save_messages([{"id": "unrelated", "thread_id": "other", "role": "user",
                           "content": "my passport expires in June"}])  # the same text, another resource
    statements = _statements(monkeypatch, storage)
    catch_ups = _count(monkeypatch, reader.vector, "catch_up")
    got = reader.recall("t0", resource_id="r1", vector_search_string="my passport expires in June")
    assert [m.id for m in got.messages] == ["m1", "m2", "m3"] and set(got.scores) == {"m2"}
    assert (statements[0], catch_ups[0]) == (1, 1)  # caught up from the read; the hits unchanged
    got = reader.recall("other", resource_id="r2", vector_search_string="my passport expires in June")
    assert [m.id for m in got.messages] == ["unrelated"]
