"""PostgreSQL answers recall's reads exactly as the core's Timeline does, and filters threads
exactly as DuckDB does: both checked on generated data, filters and queries."""

from __future__ import annotations

import math
import uuid
from datetime import timedelta

import psycopg
import pytest
from conftest import T0
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from psycopg import sql

from threadrecall import _core
from threadrecall.errors import InvalidArgumentError
from threadrecall.storage import DuckDBStorage, PostgresStorage
from threadrecall.storage.rows import messages_of, to_micros
from threadrecall.types import Message, MessageContent, Thread

KEYS = ["k", "n", "x"]
# Values where exact typed comparison is easy to get wrong: ints against floats (small, past
# 2^53, near and past 2^63), floats whose shortest text is not their value, booleans against
# 0/1, strings that look like other types, NUL, NaN, infinities and nested values.
NUMBERS = [0, 1, -1, 2, 2**53 + 1, 2**60, 2**60 + 1, 2**63 - 1, -(2**63), 2**63, 2**64, 2**64 + 1, 10**20,
           0.0, -0.0, 0.5, 1.0, 2.0, 0.1, 1e16, 1.2345678901234568e18, 2.0**63, 2.0**60,
           9007199254740992.0, 2.0**64, 1e300, 1e-300]
TEXTS = ["", "a", "b", "a\x00", "1", "true", "null", "é"]
filter_scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(NUMBERS), st.sampled_from(TEXTS))
stored_values = st.one_of(filter_scalars, st.sampled_from([math.nan, math.inf, -math.inf]),
                          st.just([1]), st.just({"a": 1}))
metadata = st.dictionaries(st.sampled_from(KEYS + ["bad key"]), stored_values, max_size=3)
filters = st.dictionaries(st.sampled_from(KEYS), filter_scalars, min_size=1, max_size=2)


@pytest.fixture(scope="module")
def pg(pg_dsn):
    schema = f"test_{uuid.uuid4().hex[:16]}"
    store = PostgresStorage(pg_dsn, schema=schema)
    conn = psycopg.connect(pg_dsn, autocommit=True)
    yield store, conn, sql.Identifier(schema)
    store.close()
    conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    conn.close()


specs = st.lists(st.tuples(st.integers(0, 2), st.sampled_from([None, "r0", "r1"]), st.integers(0, 7), metadata),
                 max_size=30)
bounds = st.none() | st.tuples(st.integers(-1, 8), st.booleans())
page_queries = st.lists(st.fixed_dictionaries({
    "thread": st.sampled_from(["t0", "t1", "t2", "t9"]),
    "resource_id": st.sampled_from([None, "r0", "r1", "nobody"]),
    "start": bounds, "end": bounds,
    "descending": st.booleans(),
    "offset": st.integers(0, 5),
    "limit": st.none() | st.integers(0, 6),
    "cursor": st.none() | st.tuples(st.integers(0, 32), st.sampled_from(["after", "before", "both"])),
}), min_size=1, max_size=8)
window_queries = st.lists(st.tuples(
    st.lists(st.tuples(st.integers(0, 32), st.integers(0, 3), st.integers(0, 3)), max_size=4),
    st.sampled_from([None, "r0", "r1", "nobody"])), max_size=3)


def _load(pg, rows):
    store, conn, schema = pg
    conn.execute(sql.SQL("DELETE FROM {}.messages").format(schema))
    messages = [Message(id=f"m{i}", thread_id=f"t{thread}", resource_id=resource, role="user",
                        content=MessageContent(text=f"text {i}"), created_at=T0 + timedelta(seconds=at),
                        metadata=meta)
                for i, (thread, resource, at, meta) in enumerate(rows)]
    store.save_messages(messages)
    stored = [r for batch in store.scan_messages() for r in batch]
    timeline = _core.Timeline()
    by_id = {m.id: m for m in messages}
    timeline.upsert([r[0] for r in stored], [r[1] for r in stored], [r[2] for r in stored],
                    [r[3] for r in stored], [r[4] for r in stored], [by_id[r[0]].metadata for r in stored],
                    [r[5] for r in stored])
    return store, timeline


def _near(value):
    """Values a filter could confuse with a stored ``value``: itself, its other numeric type,
    its neighbours, a boolean for 0 and 1."""
    if value is None or isinstance(value, str):
        return [value, None if value is not None else "", (value or "") + "x"]
    if isinstance(value, bool):
        return [value, int(value), float(value), not value]
    if isinstance(value, int):
        near = [value, value + 1, value - 1]
        if abs(value) < 2**1000:
            near.append(float(value))
        return near + ([bool(value)] if value in (0, 1) else [])
    if isinstance(value, float) and math.isfinite(value):
        near = [value, math.nextafter(value, math.inf), -value]
        return near + ([int(value)] if value.is_integer() else [])
    return []


def _filter_from(data, rows):
    """A filter built from a stored value (when there is one to build on), else any filter."""
    stored = [(k, v) for *_, meta in rows for k, v in meta.items() if k in KEYS and _near(v)]
    if not stored or data.draw(st.booleans()):
        return data.draw(st.none() | filters | st.just({}))
    key, value = data.draw(st.sampled_from(stored))
    wanted = {key: data.draw(st.sampled_from(_near(value)))}
    if data.draw(st.booleans()):
        wanted.update(data.draw(filters))
    return wanted


def _answer(read):
    try:
        return read()
    except InvalidArgumentError as exc:
        return ("error", str(exc))


@seed(20240601)
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=specs, queries=page_queries, windows=window_queries, data=st.data())
def test_page_and_window_match_the_timeline(pg, rows, queries, windows, data):
    store, timeline = _load(pg, rows)
    base = to_micros(T0)
    for query in queries:
        kwargs = {"resource_id": query["resource_id"], "metadata": _filter_from(data, rows),
                  "descending": query["descending"], "offset": query["offset"], "limit": query["limit"]}
        for name, bound in (("start", query["start"]), ("end", query["end"])):
            if bound is not None:
                kwargs[name], kwargs[f"{name}_exclusive"] = base + bound[0] * 1_000_000, bound[1]
        if query["cursor"] is not None:
            at, side = query["cursor"]
            if side in ("after", "both"):
                kwargs["after_id"] = f"m{at}"
            if side in ("before", "both"):
                kwargs["before_id"] = f"m{(at + 3) % 33}"
        expected = _answer(lambda: timeline.page(query["thread"], **kwargs))
        got = _answer(lambda: store.page(query["thread"], **kwargs))
        assert got == expected, (query, kwargs)
    for includes, resource in windows:
        request = [(f"m{i}", before, after) for i, before, after in includes]
        assert store.window(request, resource) == timeline.window(request, resource)



@seed(20240602)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=specs, queries=page_queries, data=st.data())
def test_recall_rows_decode_to_the_messages_of_the_page(pg, rows, queries, data):
    """``owned_page`` hands recall the stored columns of each row, ``page`` one JSON body: both
    decode to the same messages (NaN, big integers, NUL and key order included), mixed with
    window rows too, with the same totals."""
    store, _ = _load(pg, rows)
    for query in queries:
        kwargs = {"resource_id": query["resource_id"], "metadata": _filter_from(data, rows),
                  "descending": query["descending"], "offset": query["offset"], "limit": query["limit"]}
        page_rows, total = store.page(query["thread"], **kwargs)
        column_rows, column_total = store.owned_page(query["thread"], None, **kwargs)
        assert column_total == total and [r[:5] for r in column_rows] == [r[:5] for r in page_rows]
        expected = [m.to_dict() for m in messages_of(page_rows)]
        assert [m.to_dict() for m in messages_of(column_rows)] == expected
        assert [m.to_dict() for m in store.get_messages([r[0] for r in page_rows])] == expected
        window = store.window([(r[0], 1, 1) for r in page_rows[:2]])
        mixed = sorted({r[0]: r for r in [*window, *column_rows]}.values(), key=lambda r: (r[3], r[4]))
        assert ([m.to_dict() for m in messages_of(mixed)]
                == [m.to_dict() for m in store.get_messages([r[0] for r in mixed])])

def test_every_stored_value_against_every_filter_value(pg):
    """The typed equality, pair by pair: each tricky value stored once, each filter value asked."""
    pool = [None, True, False, *NUMBERS, *TEXTS, *(f + 1 for f in NUMBERS if isinstance(f, int)),
            *(math.nextafter(f, math.inf) for f in NUMBERS if isinstance(f, float))]
    stored = pool + [math.nan, math.inf, -math.inf, [1], {"a": 1}]
    store, timeline = _load(pg, [(0, None, 0, {"k": value}) for value in stored] + [(0, None, 1, {})])
    checked = 0
    for value in pool:
        wanted = {"k": value}
        got, expected = store.page("t0", metadata=wanted), timeline.page("t0", metadata=wanted)
        assert got == expected, value
        checked += expected[1]
    assert checked > len(pool)  # values matched others, not only themselves


@pytest.fixture(scope="module")
def thread_stores(pg_dsn, tmp_path_factory):
    schema = f"test_{uuid.uuid4().hex[:16]}"
    pg_store = PostgresStorage(pg_dsn, schema=schema)
    duck = DuckDBStorage(tmp_path_factory.mktemp("threads") / "t.duckdb")
    yield pg_store, duck
    pg_store.close()
    duck.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


finite_values = st.one_of(filter_scalars, st.just([1]), st.just({"a": 1}),
                          st.sampled_from([3**40, -(5**30), 10**25 + 1]))


@seed(20240603)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stored=st.lists(st.dictionaries(st.sampled_from(KEYS), finite_values, max_size=3), max_size=8),
       wanted=st.lists(filters | st.dictionaries(st.sampled_from(KEYS), st.sampled_from([3**40, 10**25 + 1]),
                                                 min_size=1), min_size=1, max_size=4))
def test_thread_filters_match_duckdb(thread_stores, stored, wanted):
    pg_store, duck = thread_stores
    for store in (pg_store, duck):
        for thread in store.list_threads(per_page=False).threads:
            store.delete_thread(thread.id)
        store.save_threads([Thread(f"t{i}", "r1", metadata=meta, created_at=T0 + timedelta(seconds=i))
                            for i, meta in enumerate(stored)])
    for condition in wanted:
        got = [t.id for t in pg_store.list_threads(metadata=condition, per_page=False).threads]
        expected = [t.id for t in duck.list_threads(metadata=condition, per_page=False).threads]
        assert got == expected, condition
