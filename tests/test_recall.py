"""recall(): history, paging, ordering, ownership, includes and filters, through the public API."""

from __future__ import annotations

import math
import threading
from dataclasses import replace
from datetime import timedelta

import pytest

from threadrecall import Memory, Thread
from threadrecall.errors import (
    FilterTypeError,
    InvalidArgumentError,
    InvalidFilterError,
    ResourceMismatchError,
    ThreadNotFoundError,
)
from threadrecall.storage import DuckDBStorage

from conftest import T0, seed, texts


# ----------------------------------------------------------------------------- history and order

def test_newest_window_with_desc_order_comes_back_ascending(memory):
    seed(memory, "t1", 15)
    result = memory.recall("t1", per_page=10, order_by={"field": "created_at", "direction": "DESC"})
    assert texts(result) == [f"Message {i}" for i in range(6, 16)]


def test_per_page_equal_to_size_returns_everything(memory):
    seed(memory, "t1", 15)
    result = memory.recall("t1", per_page=15)
    assert len(result.messages) == 15
    assert result.messages[0].text == "Message 1" and result.messages[-1].text == "Message 15"


def test_conversation_roles_in_order(memory):
    seed(memory, "t1", 4)
    assert [m.role for m in memory.recall("t1").messages] == ["user", "assistant", "user", "assistant"]


def test_tool_messages_keep_storage_order(memory):
    memory.create_thread("r1", thread_id="t1")
    call = {"type": "tool-invocation", "tool_invocation": {"tool_call_id": "c1", "tool_name": "weather",
                                                           "args": {"city": "Paris"}, "state": "call"}}
    result_part = {"type": "tool-invocation", "tool_invocation": {"tool_call_id": "c1", "state": "result",
                                                                  "result": {"temp": 21}}}
    memory.save_messages([
        {"id": "u", "thread_id": "t1", "role": "user", "content": "Weather?", "created_at": T0},
        {"id": "a", "thread_id": "t1", "role": "assistant", "content": {"parts": [call]}, "created_at": T0},
        {"id": "t", "thread_id": "t1", "role": "tool", "content": {"parts": [result_part]}, "created_at": T0},
    ])
    messages = memory.recall("t1").messages
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert messages[1].content.parts[0] == call


@pytest.mark.parametrize("parts", [
    [{"type": "text", "text": "Hello"}],
    [{"type": "text", "text": "Part 1"}, {"type": "reasoning", "text": "why", "details": [1, 2]},
     {"type": "file", "data": "aGk=", "mime_type": "text/plain"}, {"type": "data-custom", "x": {"y": None}}],
])
def test_parts_round_trip_exactly(memory, parts):
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"thread_id": "t1", "role": "user", "content": {"parts": parts}}])
    assert list(memory.recall("t1").messages[0].content.parts) == parts


# ----------------------------------------------------------------------------- ownership

def test_owner_can_recall(memory):
    seed(memory, "t1", 3)
    assert len(memory.recall("t1", resource_id="r1").messages) == 3


def test_wrong_owner_is_refused(memory):
    seed(memory, "t1", 3)
    with pytest.raises(ResourceMismatchError,
                       match="Thread with id t1 is for resource with id r1 but resource wrong-resource was queried"):
        memory.recall("t1", resource_id="wrong-resource")


def test_the_owner_check_follows_thread_changes(memory):
    seed(memory, "t1", 2)
    assert len(memory.recall("t1", resource_id="r1").messages) == 2
    moved = replace(memory.get_thread_by_id("t1"), resource_id="r2")
    memory.storage.save_thread(moved)
    with pytest.raises(ResourceMismatchError, match="is for resource with id r2"):
        memory.recall("t1", resource_id="r1")
    memory.recall("t1", resource_id="r2")  # its messages keep their own resource
    memory.delete_thread("t1")
    with pytest.raises(ThreadNotFoundError):
        memory.recall("t1", resource_id="r2")


def test_the_owner_check_sees_the_open_transaction(memory):
    seed(memory, "t1", 1)
    with memory.transaction():
        memory.create_thread("r2", thread_id="t2")
        memory.save_messages([{"thread_id": "t2", "role": "user", "content": "new"}])
        assert [m.text for m in memory.recall("t2", resource_id="r2").messages] == ["new"]
        with pytest.raises(ResourceMismatchError):
            memory.recall("t2", resource_id="r1")
        memory.delete_thread("t1")
        with pytest.raises(ThreadNotFoundError):
            memory.recall("t1", resource_id="r1")
    assert len(memory.recall("t2", resource_id="r2").messages) == 1


def test_a_reopened_duckdb_store_checks_owners_without_a_query(tmp_path, monkeypatch):
    path = tmp_path / "owners.duckdb"
    memory = Memory(storage=DuckDBStorage(path))
    for t in range(3):
        seed(memory, f"t{t}", 2, resource_id=f"r{t}")
    memory.close()
    memory = Memory(storage=DuckDBStorage(path))  # nothing cached yet
    cursors = []  # every read outside a transaction takes the database's cursor
    original = memory.storage.db.cursor
    monkeypatch.setattr(memory.storage.db, "cursor", lambda: cursors.append(1) or original())
    assert len(memory.recall("t1", resource_id="r1").messages) == 2
    assert len(memory.recall("t2", resource_id="r2", per_page=0,
                             include=[{"id": "t2-1", "with_next_messages": 1}]).messages) == 2
    with pytest.raises(ResourceMismatchError):
        memory.recall("t0", resource_id="r1")
    with pytest.raises(ThreadNotFoundError):
        memory.recall("t9", resource_id="r1")
    assert cursors == []
    memory.close()


def test_no_resource_id_skips_validation(memory):
    seed(memory, "t1", 3)
    assert len(memory.recall("t1").messages) == 3


@pytest.mark.parametrize("config, raises", [
    ({}, True),
    ({"semantic_recall": {"scope": "thread"}}, True),
    ({"semantic_recall": True}, False),
    ({"semantic_recall": {"scope": "resource"}}, False),
])
def test_missing_thread_with_resource_id(memory, config, raises):
    if raises:
        with pytest.raises(ThreadNotFoundError, match="No thread found with id nope"):
            memory.recall("nope", resource_id="r1", thread_config=config)
    else:
        assert memory.recall("nope", resource_id="r1", thread_config=config).messages == []


def test_default_is_newest_ten_and_false_is_everything(memory):
    seed(memory, "t1", 25)
    assert texts(memory.recall("t1")) == [f"Message {i}" for i in range(16, 26)]
    everything = memory.recall("t1", per_page=False)
    assert texts(everything) == [f"Message {i}" for i in range(1, 26)]
    assert everything.per_page is False and everything.has_more is False


@pytest.mark.parametrize("last", [False, 0])
def test_history_disabled_returns_empty_without_touching_storage(tmp_path, last):
    memory = Memory(options={"last_messages": last})
    memory.storage.close()  # any storage access would now fail
    result = memory.recall("t1", resource_id="r1")
    assert (result.messages, result.total, result.per_page, result.has_more) == ([], 0, 0, False)


def test_concurrent_batches_all_land(memory):
    memory.create_thread("r1", thread_id="t1")

    def save(batch):
        memory.save_messages([{"thread_id": "t1", "role": "user", "content": f"b{batch} m{i}"}
                              for i in range(2)])

    workers = [threading.Thread(target=save, args=(b,)) for b in range(5)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(memory.recall("t1", per_page=20).messages) == 10


def test_concurrent_single_saves_from_threads(memory):
    memory.create_thread("r1", thread_id="t1")
    workers = [threading.Thread(target=memory.save_messages,
                                args=([{"thread_id": "t1", "role": "user", "content": f"m{i}"}],))
               for i in range(20)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert memory.recall("t1", per_page=False).total == 20


# ----------------------------------------------------------------------------- paging (storage conformance)

ASC = {"field": "created_at", "direction": "ASC"}


def test_all_messages_without_paging(memory):
    seed(memory, "t1", 5)
    result = memory.recall("t1", per_page=False)
    assert (len(result.messages), result.total) == (5, 5)


def test_pages_of_two(memory):
    seed(memory, "t1", 5)
    pages = [memory.recall("t1", per_page=2, page=p, order_by=ASC) for p in range(3)]
    assert [len(p.messages) for p in pages] == [2, 2, 1]
    assert [p.has_more for p in pages] == [True, True, False]
    assert {p.total for p in pages} == {5}
    assert sum((texts(p) for p in pages), []) == [f"Message {i}" for i in range(1, 6)]


def test_resource_scope_excludes_foreign_rows_in_the_thread(memory):
    seed(memory, "t1", 3)
    memory.save_messages([{"id": "x", "thread_id": "t1", "resource_id": "r2", "role": "user",
                           "content": "foreign", "created_at": T0 + timedelta(hours=1)}])
    assert "foreign" not in texts(memory.recall("t1", resource_id="r1", per_page=False))
    assert "foreign" in texts(memory.recall("t1", per_page=False))


def test_date_range_start_is_inclusive(memory):
    seed(memory, "t1", 3)
    result = memory.recall("t1", per_page=False, filter={"date_range": {"start": T0 + timedelta(seconds=60)}})
    assert result.total == 2


@pytest.mark.parametrize("bounds, expected", [
    ({"start": T0 + timedelta(seconds=60)}, [2, 3, 4, 5]),
    ({"start": T0 + timedelta(seconds=60), "start_exclusive": True}, [3, 4, 5]),
    ({"end": T0 + timedelta(seconds=120)}, [1, 2, 3]),
    ({"end": T0 + timedelta(seconds=120), "end_exclusive": True}, [1, 2]),
    ({"start": T0 + timedelta(seconds=60), "end": T0 + timedelta(seconds=180),
      "start_exclusive": True, "end_exclusive": True}, [3]),
    ({"start": (T0 + timedelta(seconds=60)).replace(tzinfo=None)}, [2, 3, 4, 5]),  # naive means UTC
    ({"start": (T0 + timedelta(seconds=60)).isoformat()}, [2, 3, 4, 5]),
])
def test_date_range_bounds(memory, bounds, expected):
    seed(memory, "t1", 5)
    result = memory.recall("t1", per_page=False, filter={"date_range": bounds})
    assert texts(result) == [f"Message {i}" for i in expected]


@pytest.mark.parametrize("include, expected", [
    ({"id": "t1-2", "with_previous_messages": 1}, [1, 2, 9, 10]),
    ({"id": "t1-2", "with_next_messages": 1}, [2, 3, 9, 10]),
    ({"id": "t1-2", "with_previous_messages": 1, "with_next_messages": 1}, [1, 2, 3, 9, 10]),
    ({"id": "t1-8", "with_next_messages": 2}, [8, 9, 10]),  # overlaps the page: no duplicates
])
def test_include_context_is_deduplicated_against_the_page(memory, include, expected):
    seed(memory, "t1", 10)
    result = memory.recall("t1", per_page=2, include=[include])
    assert texts(result) == [f"Message {i}" for i in expected]


def test_cross_thread_include(memory):
    seed(memory, "t1", 5)
    seed(memory, "t2", 3, prefix="Other", start=T0 + timedelta(days=1))
    result = memory.recall("t1", per_page=False, include=[{"id": "t2-2", "thread_id": "t2"}])
    assert len(result.messages) == 6
    assert sum(m.thread_id == "t1" for m in result.messages) == 5
    assert result.total == 5


AWKWARD_IDS = ['say "hi"', "back\\slash", "a,b", "{braces}", "NULL", " spaced ", "ümlaut", "'quote'"]


def test_includes_with_awkward_ids_on_an_owned_thread(memory):
    """Ids that need quoting in an array come back as stored, neighbours and all, when the
    window is read together with the owner check."""
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"id": mid, "thread_id": "t1", "resource_id": "r1", "role": "user",
                           "content": f"Message {k}", "created_at": T0 + timedelta(minutes=k)}
                          for k, mid in enumerate(AWKWARD_IDS)])
    for k, mid in enumerate(AWKWARD_IDS):
        result = memory.recall("t1", resource_id="r1", per_page=0, include=[
            {"id": mid, "with_previous_messages": 1, "with_next_messages": 1}])
        assert [m.id for m in result.messages] == AWKWARD_IDS[max(0, k - 1):k + 2]
    result = memory.recall("t1", resource_id="r1", per_page=0, include=[{"id": mid} for mid in AWKWARD_IDS])
    assert [m.id for m in result.messages] == AWKWARD_IDS


def test_overlapping_include_windows_are_merged(memory):
    seed(memory, "t1", 10)
    result = memory.recall("t1", per_page=0, include=[
        {"id": "t1-4", "with_previous_messages": 2, "with_next_messages": 2},
        {"id": "t1-5", "with_previous_messages": 2, "with_next_messages": 2},
    ])
    assert texts(result) == [f"Message {i}" for i in range(2, 8)]


def test_explicit_order_picks_the_window(memory):
    seed(memory, "t1", 5)
    assert texts(memory.recall("t1", per_page=2, order_by=ASC)) == ["Message 1", "Message 2"]
    desc = {"field": "created_at", "direction": "DESC"}
    assert texts(memory.recall("t1", per_page=2, order_by=desc)) == ["Message 4", "Message 5"]
    assert texts(memory.recall("t1", per_page=False, order_by=desc)) == [f"Message {i}" for i in range(1, 6)]


def test_empty_thread(memory):
    memory.create_thread("r1", thread_id="t1")
    result = memory.recall("t1")
    assert (result.messages, result.total, result.has_more) == ([], 0, False)


def test_unknown_include_is_ignored(memory):
    seed(memory, "t1", 3)
    assert len(memory.recall("t1", include=[{"id": "nope", "with_next_messages": 3}]).messages) == 3


@pytest.mark.parametrize("thread_id", ["", "   ", None, 7])
def test_blank_thread_id_is_refused(memory, thread_id):
    with pytest.raises(InvalidArgumentError, match="threadId must be a non-empty string"):
        memory.recall(thread_id)


def test_include_reaching_past_the_page_clears_has_more(memory):
    seed(memory, "t1", 5)
    result = memory.recall("t1", per_page=3, order_by=ASC, include=[{"id": "t1-3", "with_next_messages": 10}])
    assert len(result.messages) == 5 and result.has_more is False


def test_page_with_date_filter(memory):
    seed(memory, "t1", 8)
    result = memory.recall("t1", per_page=3, filter={"date_range": {"start": T0 + timedelta(minutes=3)}})
    assert len(result.messages) == 3 and result.total == 5 and result.has_more is True


def test_per_page_false_returns_all_55(memory):
    seed(memory, "t1", 55)
    result = memory.recall("t1", per_page=False)
    assert len(result.messages) == 55 and result.per_page is False and result.has_more is False


def test_include_with_previous_on_first_page(memory):
    seed(memory, "t1", 6)
    result = memory.recall("t1", per_page=2, order_by=ASC, include=[{"id": "t1-3", "with_previous_messages": 1}])
    assert texts(result) == ["Message 1", "Message 2", "Message 3"]


def test_per_page_zero_and_negative(memory):
    seed(memory, "t1", 5)
    result = memory.recall("t1", per_page=0)
    assert (result.messages, result.per_page, result.total, result.has_more) == ([], 0, 0, False)
    with pytest.raises(InvalidArgumentError, match="perPage must be >= 0"):
        memory.recall("t1", per_page=-1)
    with pytest.raises(InvalidArgumentError, match="page must be >= 0"):
        memory.recall("t1", page=-1)


# ----------------------------------------------------------------------------- include resource scope

@pytest.fixture
def two_resources(memory):
    memory.create_thread("ra", thread_id="ta")
    memory.create_thread("rb", thread_id="tb")
    memory.save_messages([
        {"id": "a1", "thread_id": "ta", "role": "user", "content": "a1", "created_at": T0},
        {"id": "a2", "thread_id": "ta", "role": "assistant", "content": "a2", "created_at": T0 + timedelta(1)},
        {"id": "b1", "thread_id": "tb", "role": "user", "content": "b1", "created_at": T0 + timedelta(2)},
    ])
    return memory


def test_foreign_resource_include_is_dropped(two_resources):
    result = two_resources.recall("tb", resource_id="rb", include=[{"id": "a1", "with_next_messages": 1}])
    assert texts(result) == ["b1"]


def test_foreign_resource_include_dropped_on_the_fast_path(two_resources):
    result = two_resources.recall("tb", resource_id="rb", per_page=0, include=[{"id": "a1"}])
    assert result.messages == []


def test_without_resource_id_cross_resource_includes_stay(two_resources):
    assert texts(two_resources.recall("tb", include=[{"id": "a1"}])) == ["a1", "b1"]


def test_same_resource_cross_thread_include(memory):
    memory.create_thread("r", thread_id="t1")
    memory.create_thread("r", thread_id="t2")
    memory.save_messages([
        {"id": f"a{i}", "thread_id": "t1" if i <= 2 else "t2", "role": "user", "content": f"a{i}",
         "created_at": T0 + timedelta(minutes=i)} for i in range(1, 5)
    ])
    result = memory.recall("t1", resource_id="r", include=[{"id": "a3", "with_next_messages": 1}])
    assert texts(result) == ["a1", "a2", "a3", "a4"]


def test_window_comes_from_the_targets_own_thread(two_resources):
    result = two_resources.recall("tb", per_page=0, include=[{"id": "a2", "thread_id": "tb",
                                                              "with_previous_messages": 1}])
    assert texts(result) == ["a1", "a2"]


def test_empty_resource_id_is_unscoped(two_resources):
    two_resources.save_messages([{"id": "x", "thread_id": "tb", "resource_id": "other", "role": "user",
                                  "content": "x", "created_at": T0 + timedelta(3)}])
    assert texts(two_resources.recall("tb", resource_id="", per_page=False)) == ["b1", "x"]


def test_has_more_with_includes_outside_a_date_filter(memory):
    seed(memory, "t1", 6)
    after = {"date_range": {"start": T0 + timedelta(minutes=2)}}  # messages 3..6 pass
    first = memory.recall("t1", per_page=2, order_by=ASC, filter=after,
                          include=[{"id": "t1-1", "with_next_messages": 1}])
    assert texts(first) == ["Message 1", "Message 2", "Message 3", "Message 4"]
    assert first.has_more is True
    last = memory.recall("t1", per_page=2, page=1, order_by=ASC, filter=after)
    assert last.has_more is False
    covering = memory.recall("t1", per_page=2, order_by=ASC, filter=after,
                             include=[{"id": "t1-5", "with_next_messages": 1}])
    assert covering.has_more is False


# ----------------------------------------------------------------------------- metadata filter

def _meta(i):
    return [
        {"category": "billing", "priority": 1},
        {"category": "billing", "priority": "1"},
        {"category": "support", "priority": 1, "flag": 1},
        {"category": "billing", "priority": 1, "flag": True, "archived": None},
        {},
        {"category": "billing", "priority": 1.0, "archived": "no"},
    ][i - 1]


@pytest.mark.parametrize("where, expected", [
    ({"category": "billing", "priority": 1}, [1, 4, 6]),
    ({"priority": 1}, [1, 3, 4, 6]),
    ({"priority": "1"}, [2]),
    ({"flag": True}, [4]),
    ({"flag": 1}, [3]),
    ({"archived": None}, [4]),
    ({}, [1, 2, 3, 4, 5, 6]),
    ({"category": "nothing"}, []),
])
def test_metadata_filter_semantics(memory, where, expected):
    seed(memory, "t1", 6, metadata=_meta)
    result = memory.recall("t1", per_page=False, filter={"metadata": where})
    assert texts(result) == [f"Message {i}" for i in expected]
    assert result.total == len(expected)


def test_metadata_filter_runs_before_paging(memory):
    seed(memory, "t1", 6, metadata=_meta)
    result = memory.recall("t1", per_page=2, order_by=ASC, filter={"metadata": {"priority": 1}})
    assert texts(result) == ["Message 1", "Message 3"]
    assert result.total == 4 and result.has_more is True
    tail = memory.recall("t1", per_page=2, page=1, order_by=ASC, filter={"metadata": {"priority": 1}})
    assert texts(tail) == ["Message 4", "Message 6"] and tail.has_more is False


def test_includes_bypass_the_metadata_filter(memory):
    seed(memory, "t1", 6, metadata=_meta)
    result = memory.recall("t1", per_page=False, filter={"metadata": {"priority": "1"}},
                           include=[{"id": "t1-5"}])
    assert texts(result) == ["Message 2", "Message 5"] and result.total == 1


@pytest.mark.parametrize("bad", [None, [], ["a"], "x", 3])
def test_metadata_filter_must_be_a_mapping(memory, bad):
    with pytest.raises(FilterTypeError, match="Metadata filter must be an object."):
        memory.recall("t1", filter={"metadata": bad})


@pytest.mark.parametrize("key", ["1abc", "a-b", "__proto__", "constructor", "prototype", "k" * 129, ""])
def test_bad_metadata_keys(memory, key):
    with pytest.raises(InvalidFilterError) as info:
        memory.recall("t1", filter={"metadata": {key: 1}})
    assert str(info.value) == f'Invalid metadata filter key "{key}".'


def test_key_of_128_characters_is_fine(memory):
    seed(memory, "t1", 2)
    assert memory.recall("t1", filter={"metadata": {"k" * 128: 1}}).messages == []


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, {}, [], {"a": 1}, (1,), object()])
def test_bad_metadata_values(memory, value):
    with pytest.raises(InvalidFilterError) as info:
        memory.recall("t1", filter={"metadata": {"k": value}})
    assert str(info.value) == ('Invalid metadata filter value for key "k". '
                               "Values must be string, finite number, boolean, or null.")


def test_filter_validation_precedes_storage_access(tmp_path):
    memory = Memory()
    memory.storage.close()
    with pytest.raises(InvalidFilterError):
        memory.recall("t1", filter={"metadata": {"a-b": 1}})


# ----------------------------------------------------------------------------- deletion and threads

def test_delete_message(memory):
    seed(memory, "t1", 4)
    memory.delete_messages(["t1-2"])
    assert texts(memory.recall("t1")) == ["Message 1", "Message 3", "Message 4"]


def test_delete_unknown_id_is_fine(memory):
    seed(memory, "t1", 2)
    memory.delete_messages(["nope", {"id": "t1-1"}])
    assert texts(memory.recall("t1")) == ["Message 2"]


def test_delete_bumps_updated_at_and_spares_other_threads(memory):
    seed(memory, "t1", 3)
    seed(memory, "t2", 3)
    before = memory.get_thread_by_id("t1").updated_at
    memory.delete_messages(["t1-1"])
    assert memory.get_thread_by_id("t1").updated_at > before
    assert len(memory.recall("t2").messages) == 3


@pytest.mark.parametrize("ids, message", [
    ([""], "All message IDs must be non-empty strings"),
    (["  "], "All message IDs must be non-empty strings"),
    ([{"id": ""}], "All message IDs must be non-empty strings"),
    ([3], "Invalid input: array items must be strings or objects with an id property"),
    ("abc", "Invalid input: must be an array of message IDs or message objects"),
    (None, "Invalid input: must be an array of message IDs or message objects"),
])
def test_delete_validation(memory, ids, message):
    with pytest.raises(InvalidArgumentError, match=message):
        memory.delete_messages(ids)


def _threads(memory, count, resource="r1"):
    for i in range(1, count + 1):
        memory.storage.save_thread(Thread(
            id=f"{resource}-thread-{i}", resource_id=resource, title=f"Thread {i}",
            created_at=T0 + timedelta(minutes=i), updated_at=T0 + timedelta(minutes=i)))


def test_list_threads_newest_first(memory):
    _threads(memory, 25)
    page = memory.list_threads(resource_id="r1", page=0, per_page=10)
    assert [t.title for t in page.threads] == [f"Thread {i}" for i in range(25, 15, -1)]
    assert page.total == 25 and page.has_more is True


def test_list_threads_unknown_resource_and_small_sets(memory):
    assert memory.list_threads(resource_id="nobody").total == 0
    _threads(memory, 5)
    assert memory.list_threads(resource_id="r1", per_page=10).has_more is False


def test_list_threads_pages(memory):
    _threads(memory, 15)
    one = memory.list_threads(resource_id="r1", page=1, per_page=7)
    two = memory.list_threads(resource_id="r1", page=2, per_page=7)
    assert (len(one.threads), one.has_more, len(two.threads), two.has_more) == (7, True, 1, False)


def test_list_threads_validation(memory):
    with pytest.raises(InvalidArgumentError, match="page must be >= 0"):
        memory.list_threads(page=-1)
    with pytest.raises(InvalidArgumentError, match="perPage must be >= 0"):
        memory.list_threads(per_page=-1)
    with pytest.raises(InvalidArgumentError, match="page must be 0 when perPage is false"):
        memory.list_threads(per_page=False, page=1)
    _threads(memory, 3)
    empty = memory.list_threads(per_page=0)
    assert empty.threads == [] and empty.per_page == 0


def test_update_thread_merges_metadata_and_keeps_title(memory):
    memory.create_thread("r1", thread_id="t1", title="Title", metadata={"a": 1})
    thread = memory.update_thread("t1", metadata={"b": 2})
    assert thread.title == "Title" and thread.metadata == {"a": 1, "b": 2}
    with pytest.raises(ThreadNotFoundError, match="Thread with id nope not found"):
        memory.update_thread("nope", title="x")


# ----------------------------------------------------------------------------- cursor paging

def test_cursor_pages_walk_back_and_forth(memory):
    seed(memory, "t1", 10)
    older = memory.recall("t1", per_page=3, before_id="t1-8")
    assert texts(older) == ["Message 5", "Message 6", "Message 7"]
    assert older.total == 7 and older.has_more is True
    newer = memory.recall("t1", per_page=3, after_id="t1-8")
    assert texts(newer) == ["Message 9", "Message 10"] and newer.has_more is False


def test_cursor_pages_do_not_shift_when_messages_arrive(memory):
    seed(memory, "t1", 10)
    first = memory.recall("t1", per_page=4)
    page_before = memory.recall("t1", per_page=4, before_id=first.messages[0].id)
    numbered = memory.recall("t1", per_page=4, page=1)
    seed(memory, "t1", 3, first=11, start=T0 + timedelta(hours=1))
    assert texts(memory.recall("t1", per_page=4, before_id=first.messages[0].id)) == texts(page_before)
    assert texts(memory.recall("t1", per_page=4, page=1)) != texts(numbered)  # numbered pages do shift


def test_cursor_paging_respects_filters(memory):
    seed(memory, "t1", 6, metadata=_meta)
    result = memory.recall("t1", per_page=2, after_id="t1-1", filter={"metadata": {"priority": 1}})
    assert texts(result) == ["Message 3", "Message 4"]


def test_unknown_cursor_is_an_error(memory):
    seed(memory, "t1", 3)
    with pytest.raises(InvalidArgumentError):
        memory.recall("t1", per_page=2, after_id="nope")
    with pytest.raises(InvalidArgumentError):
        memory.recall("t1", per_page=False, before_id="t1-2")
