"""The storage protocol's behaviour, checked identically on DuckDB and PostgreSQL."""

from __future__ import annotations

import math
import threading
from dataclasses import replace
from datetime import timedelta

import pytest
from conftest import T0
from threadrecall.errors import (
    FilterTypeError,
    InvalidArgumentError,
    InvalidFilterError,
    ThreadNotFoundError,
)
from threadrecall.storage import Storage
from threadrecall.types import Message, MessageContent, Thread


@pytest.fixture
def store(storage):
    """The backend under test (conftest's ``storage``: DuckDB, then PostgreSQL)."""
    return storage


def msg(i, thread="t1", *, resource="r1", at=None, text=None, metadata=None, role="user"):
    return Message(
        id=f"m{i}", thread_id=thread, resource_id=resource, role=role,
        content=MessageContent(parts=({"type": "text", "text": text or f"text {i}"},)),
        created_at=at if at is not None else T0 + timedelta(seconds=i), metadata=metadata or {},
    )


def ids(rows):
    return [r[0] for r in rows]


# ----------------------------------------------------------------------------- threads


def test_every_backend_implements_the_protocol(store):
    assert isinstance(store, Storage)


def test_threads_round_trip_and_keep_created_at_on_save(store):
    first = store.save_thread(Thread("t1", "r1", title="one", metadata={"k": [1, {"a": None}]}))
    assert store.get_thread("t1") == first
    again = store.save_thread(Thread("t1", "r2", title="two", created_at=T0))
    assert again.created_at == first.created_at and again.resource_id == "r2" and again.title == "two"
    assert store.get_thread("nope") is None
    assert set(store.get_threads(["t1", "nope", "t1"])) == {"t1"}


def test_update_thread_merges_metadata_and_a_missing_thread_is_an_error(store):
    store.save_thread(Thread("t1", "r1", title="a", metadata={"x": 1, "y": 2}))
    updated = store.update_thread("t1", metadata={"y": 3, "z": 4})
    assert updated.metadata == {"x": 1, "y": 3, "z": 4} and updated.title == "a"
    assert store.update_thread("t1", title="b").title == "b"
    assert store.get_thread("t1").metadata == {"x": 1, "y": 3, "z": 4}
    with pytest.raises(ThreadNotFoundError, match="Thread with id gone not found"):
        store.update_thread("gone", title="x")


def test_delete_thread_takes_its_messages_and_nothing_else(store):
    store.save_threads([Thread("t1", "r1"), Thread("t2", "r1")])
    store.save_messages([msg(1), msg(2), msg(3, "t2")])
    store.delete_thread("t1")
    store.delete_thread("never-was")
    assert store.get_thread("t1") is None and store.thread_messages("t1") == []
    assert [m.id for m in store.thread_messages("t2")] == ["m3"]
    assert store.get_message("m1") is None


def test_list_threads_pages_orders_and_filters(store):
    store.save_threads([
        Thread(f"t{i}", "r1" if i % 2 else "r2", metadata={"n": i, "even": i % 2 == 0, "tag": f"k{i % 3}",
                                                           "big": 2**70 + i, "r": i / 4, "none": None},
               created_at=T0 + timedelta(minutes=i), updated_at=T0 + timedelta(minutes=10 - i))
        for i in range(6)
    ])
    page = store.list_threads(per_page=2, page=1)
    assert [t.id for t in page.threads] == ["t3", "t2"] and page.total == 6 and page.has_more
    asc = store.list_threads(order_by={"field": "updated_at", "direction": "asc"}, per_page=False)
    assert [t.id for t in asc.threads] == ["t5", "t4", "t3", "t2", "t1", "t0"]
    assert store.list_threads(resource_id="r1").total == 3
    cases = [({"n": 2}, ["t2"]), ({"n": 2.0}, ["t2"]), ({"even": True}, ["t4", "t2", "t0"]),
             ({"tag": "k1", "even": False}, ["t1"]), ({"big": 2**70 + 3}, ["t3"]), ({"r": 0.5}, ["t2"]),
             ({"none": None}, ["t5", "t4", "t3", "t2", "t1", "t0"]), ({"missing": None}, []),
             ({"n": True}, []), ({"even": 1}, []), ({"n": "2"}, [])]
    for wanted, expected in cases:
        assert [t.id for t in store.list_threads(metadata=wanted).threads] == expected, wanted
    empty = store.list_threads(per_page=0)
    assert empty.threads == [] and empty.total == 6
    beyond = store.list_threads(page=9, per_page=5)
    assert beyond.threads == [] and beyond.total == 6 and not beyond.has_more


@pytest.mark.parametrize("kwargs, error", [
    ({"page": -1}, InvalidArgumentError), ({"per_page": -2}, InvalidArgumentError),
    ({"per_page": False, "page": 1}, InvalidArgumentError),
    ({"order_by": {"field": "title"}}, InvalidArgumentError),
    ({"order_by": {"direction": "up"}}, InvalidArgumentError),
    ({"metadata": [1]}, FilterTypeError), ({"metadata": {"bad key": 1}}, InvalidFilterError),
    ({"metadata": {"k": [1]}}, InvalidFilterError), ({"metadata": {"k": math.nan}}, InvalidFilterError),
])
def test_list_threads_rejects_bad_arguments(store, kwargs, error):
    with pytest.raises(error):
        store.list_threads(**kwargs)


# ----------------------------------------------------------------------------- resources


def test_resources_create_then_merge(store):
    assert store.get_resource("r1") is None
    first = store.update_resource("r1", working_memory="wm", metadata={"a": 1})
    second = store.update_resource("r1", metadata={"b": 2})
    assert second.working_memory == "wm" and second.metadata == {"a": 1, "b": 2}
    assert second.created_at == first.created_at
    assert store.get_resource("r1") == second


# ----------------------------------------------------------------------------- messages


def test_upsert_keeps_created_at_and_order_and_the_last_duplicate_wins(store):
    store.save_thread(Thread("t1", "r1"))
    store.save_messages([msg(1, at=T0), msg(2, at=T0), msg(3, at=T0)])
    stored = store.save_messages([msg(1, at=T0 + timedelta(days=1), text="new"), msg(4, at=T0),
                                  msg(4, at=T0, text="last")])
    assert stored[0].created_at == T0 and stored[0].text == "new"
    assert [m.text for m in store.thread_messages("t1")] == ["new", "text 2", "text 3", "last"]
    rows, total = store.page("t1")
    assert ids(rows) == ["m1", "m2", "m3", "m4"] and total == 4


def test_messages_keep_their_exact_json(store):
    odd = {"nan": math.nan, "big": 1.2345678901234568e18, "huge": 10**30, "z": "a\x00b",
           "order": {"b": 1, "a": 2}, "e": 1e16}
    store.save_thread(Thread("t1", "r1"))
    store.save_messages([msg(1, metadata=odd, text="tab\t nul\x00 é \U0001f600")])
    got = store.get_message("m1")
    assert math.isnan(got.metadata["nan"])
    assert {k: v for k, v in got.metadata.items() if k != "nan"} == {k: v for k, v in odd.items() if k != "nan"}
    assert type(got.metadata["big"]) is float and type(got.metadata["e"]) is float
    assert list(got.metadata["order"]) == ["b", "a"]
    assert got.text == "tab\t nul\x00 é \U0001f600"


def test_get_messages_in_the_order_asked_and_delete_returns_what_existed(store):
    store.save_thread(Thread("t1", "r1"))
    store.save_messages([msg(i) for i in range(1, 5)])
    assert [m.id for m in store.get_messages(["m3", "zz", "m1", "m3"])] == ["m3", "m1", "m3"]
    assert store.delete_messages(["zz", "m2", "m4", "m2"]) == ["m2", "m4"]
    assert store.delete_messages(["m2"]) == []
    assert [m.id for m in store.thread_messages("t1")] == ["m1", "m3"]


def test_writes_touch_the_threads_updated_at(store):
    store.save_thread(Thread("t1", "r1", updated_at=T0, created_at=T0))
    store.save_messages([msg(1)])
    touched = store.get_thread("t1").updated_at
    assert touched > T0
    store.delete_messages(["m1"])
    assert store.get_thread("t1").updated_at >= touched


# ----------------------------------------------------------------------------- recall's reads


def test_page_cursors_bounds_and_errors(store):
    store.save_thread(Thread("t1", "r1"))
    store.save_messages([msg(i, resource="r1" if i % 2 else "r2", metadata={"n": i % 3}) for i in range(10)])
    store.save_messages([msg(20, "t2")])
    assert ids(store.page("t1", descending=True, limit=3)[0]) == ["m9", "m8", "m7"]
    assert ids(store.page("t1", after_id="m6")[0]) == ["m7", "m8", "m9"]
    assert ids(store.page("t1", before_id="m6", limit=2)[0]) == ["m4", "m5"]
    assert ids(store.page("t1", before_id="m6", limit=2, descending=True)[0]) == ["m5", "m4"]
    at = lambda i: int((T0 + timedelta(seconds=i)).timestamp() * 1_000_000)
    rows, total = store.page("t1", start=at(2), start_exclusive=True, end=at(5))
    assert ids(rows) == ["m3", "m4", "m5"] and total == 3
    rows, total = store.page("t1", resource_id="r1", metadata={"n": 1}, offset=1, limit=5)
    assert ids(rows) == ["m7"] and total == 2
    assert store.page("t1", resource_id="nobody") == ([], 0)
    assert store.page("empty") == ([], 0)
    for kwargs in ({"after_id": "m20"}, {"before_id": "nope"}, {"after_id": "m1", "before_id": "m20"}):
        with pytest.raises(InvalidArgumentError, match="no message with id m20|no message with id nope"):
            store.page("t1", **kwargs)
    with pytest.raises(InvalidArgumentError, match="no message with id x in thread empty"):
        store.page("empty", after_id="x")
    with pytest.raises(InvalidArgumentError, match="offset must be >= 0"):
        store.page("t1", offset=-1)
    with pytest.raises(InvalidFilterError):
        store.page("t1", metadata={"n": [1]})


def test_window_brings_neighbours_of_the_same_thread_and_resource(store):
    store.save_threads([Thread("t1", "r1"), Thread("t2", "r1")])
    store.save_messages([msg(i, resource="r1" if i % 2 else "r2") for i in range(10)])
    store.save_messages([msg(i, "t2") for i in range(10, 13)])
    assert ids(store.window([("m5", 2, 1), ("m11", 5, 5), ("nope", 1, 1)])) == \
        ["m3", "m4", "m5", "m6", "m10", "m11", "m12"]
    assert ids(store.window([("m5", 1, 1), ("m6", 0, 0)], "r1")) == ["m3", "m5", "m7"]
    assert store.window([("m5", 1, 1)], "nobody") == []
    with pytest.raises(InvalidArgumentError, match="after must be >= 0"):
        store.window([("m5", 1, -1)])


# ----------------------------------------------------------------------------- transactions


def test_a_transaction_commits_whole_and_nested_calls_join_it(store):
    store.save_thread(Thread("t1", "r1"))
    seen = []
    with store.transaction():
        store.save_messages([msg(1)])
        with store.transaction():
            store.save_messages([msg(2)])
            store.on_commit(lambda: seen.append("committed"))
        assert [m.id for m in store.thread_messages("t1")] == ["m1", "m2"]
        assert seen == []
    assert seen == ["committed"]
    with pytest.raises(RuntimeError), store.transaction():
        store.save_messages([msg(3)])
        store.delete_messages(["m1"])
        store.on_commit(lambda: seen.append("never"))
        raise RuntimeError("abort")
    assert [m.id for m in store.thread_messages("t1")] == ["m1", "m2"] and seen == ["committed"]


def test_a_thread_found_missing_in_a_transaction_is_seen_once_written(store):
    with store.transaction():
        assert store.get_thread("a") is None and store.get_thread("b") is None
        store.save_thread(Thread("a", "r1", title="saved", updated_at=T0))
        assert store.get_thread("a").title == "saved"
        store.create_threads([Thread("b", "r1")])
        assert store.get_threads(["a", "b", "c"]).keys() == {"a", "b"}
        store.save_turn([msg(1, "c")])
        assert store.get_thread("c").resource_id == "r1"
        store.delete_thread("a")
        assert store.get_thread("a") is None
    assert store.get_threads(["a", "b", "c"]).keys() == {"b", "c"}
    with pytest.raises(RuntimeError), store.transaction():
        assert store.get_thread("d") is None
        store.save_thread(Thread("d", "r1"))
        raise RuntimeError("abort")
    assert store.get_thread("d") is None


def test_other_threads_do_not_see_an_open_transaction(store):
    store.save_thread(Thread("t1", "r1"))
    seen = []
    with store.transaction():
        store.save_messages([msg(1)])
        other = threading.Thread(target=lambda: seen.append(store.get_message("m1")))
        other.start()
        other.join()
    assert seen == [None] and store.get_message("m1") is not None


# ----------------------------------------------------------------------------- change feed


def test_the_change_feed_gives_each_ids_last_change(store):
    store.save_threads([Thread("t1", "r1"), Thread("t2", "r1")])
    start = store.changes_since(0).position
    store.save_messages([msg(1), msg(2), msg(3, "t2")])
    middle = store.changes_since(start)
    assert sorted(ids(middle.upserted)) == ["m1", "m2", "m3"] and not middle.deleted
    store.delete_messages(["m1"])
    store.save_messages([replace(msg(2), content=MessageContent(text="changed"))])
    with store.transaction():
        store.save_messages([msg(4, "t2")])
        store.delete_messages(["m4"])
        store.save_messages([msg(5, "t2")])
    store.delete_thread("t1")
    later = store.changes_since(middle.position)
    assert later.deleted == ["m1"] or sorted(later.deleted) == ["m1", "m4"]
    assert "m4" not in ids(later.upserted) and "m2" not in ids(later.upserted)
    assert "m5" in ids(later.upserted) and later.deleted_threads == ["t1"]
    assert later.position > middle.position
    assert not store.changes_since(later.position)


def test_save_turn_creates_threads_fills_resources_and_is_all_or_nothing(storage):
    storage.save_thread(Thread("known", "r-known"))
    before = storage.get_thread("known").updated_at
    turn = [Message(id="a", thread_id="known", resource_id=None, role="user", content=MessageContent(text="a"),
                    created_at=T0),
            Message(id="b", thread_id="fresh", resource_id="r-fresh", role="assistant",
                    content=MessageContent(text="b"), created_at=T0)]
    stored, threads = storage.save_turn(turn)
    assert [(m.id, m.resource_id) for m in stored] == [("a", "r-known"), ("b", "r-fresh")]
    assert {t: (threads[t].resource_id, threads[t].title) for t in threads} == {
        "known": ("r-known", ""), "fresh": ("r-fresh", "")}
    assert storage.get_thread("fresh").resource_id == "r-fresh"
    assert storage.get_thread("known").updated_at > before
    assert [m.resource_id for m in storage.get_messages(["a", "b"])] == ["r-known", "r-fresh"]
    position = storage.changes_since(0).position
    orphan = [Message(id="c", thread_id="known", resource_id=None, role="user", content=MessageContent(text="c"),
                      created_at=T0),
              Message(id="d", thread_id="nowhere", resource_id=None, role="user",
                      content=MessageContent(text="d"), created_at=T0)]
    with pytest.raises(ThreadNotFoundError, match="nowhere"):
        storage.save_turn(orphan)
    assert storage.get_messages(["c", "d"]) == [] and storage.get_thread("nowhere") is None
    assert storage.changes_since(position).position == position
    again, _ = storage.save_turn([replace(turn[0], content=MessageContent(text="a2"),
                                          created_at=T0 + timedelta(hours=1))])
    assert again[0].created_at == T0 and storage.get_message("a").text == "a2"
