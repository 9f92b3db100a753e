"""PgVector's filters compiled to SQL pass exactly the records the core's evaluator passes.

Each generated case evaluates one filter over a batch of generated metadata records twice: in
PostgreSQL (the compiled condition over the records as PgVector stores them, JSONB, with the
stored text column of ``resource_id`` beside) and with ``_core.matches_vector_filter``. The two must agree record by record, in both directions.
Hypothesis runs derandomized (a fixed seed derived from the test), so every run checks the
same thousands of cases.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from threadrecall import _core
from threadrecall.errors import InvalidArgumentError, InvalidFilterError

psycopg = pytest.importorskip("psycopg")

from threadrecall.vector.pgvector import TEXT_COLUMNS, _metadata_json
from threadrecall.vector.sql_filter import compile_filter, float_json, text_key

# resource_id is compiled as PgVector compiles it: string equalities on its text column.
KEYS = ["a", "b", "c", "k'\"q", "é", "resource_id"]
# Values chosen to collide across types: 1 / 1.0 / True / "1", 0 / -0.0 / False / None,
# integers and floats around 2^53 and 2^63, strings that order by bytes.
TRICKY = [
    0, 1, -1, 2, True, False, None, 0.0, -0.0, 1.0, 0.5, 0.1, -2.5, 1e300, -1e300, 5e-324,
    2**53, 2**53 + 1, 2.0**53, 2.0**53 + 2, 2**60, 2.0**60, 2**63 - 1, -(2**63), 2.0**63, -(2.0**63),
    9007199254740993, 9.007199254740994e15,
    "", "a", "b", "ab", "A", "1", "1.0", "true", "null", "é", "e\u0301", "\U0001F600", "\uffff", "z",
]
OTHER = [[1], ["a"], [], {}, {"x": 1}, [None]]

stored_scalar = st.one_of(
    st.sampled_from(TRICKY),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet="abAé\U0001F600z", max_size=3),
)
stored_value = st.one_of(stored_scalar, stored_scalar, st.sampled_from(OTHER))
record = st.one_of(st.none(), st.dictionaries(st.sampled_from(KEYS), stored_value, max_size=4))

# Operands may also hold what no stored value can: NUL, lone surrogates, ints beyond 64 bits.
operand_scalar = st.one_of(stored_scalar, st.sampled_from(["a\x00", "a\x00b", "\x00", "a\ud800", 2**64, -(2**70)]))
orderable = operand_scalar.filter(lambda v: v is not None and not isinstance(v, bool))


def operator_map(inner: st.SearchStrategy) -> st.SearchStrategy:
    pair = st.one_of(
        st.tuples(st.sampled_from(["$eq", "$ne"]), operand_scalar),
        st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), orderable),
        st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(operand_scalar, max_size=4)),
        st.tuples(st.just("$exists"), st.booleans()),
        st.tuples(st.just("$not"), inner),
    )
    return st.lists(pair, min_size=1, max_size=3, unique_by=lambda p: p[0]).map(dict)


operators = st.recursive(operator_map(st.nothing()), operator_map, max_leaves=4)
field_condition = st.one_of(operand_scalar, operators)
fields = st.dictionaries(st.sampled_from(KEYS + ["\x00k"]), field_condition, max_size=3)


def documents(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        fields,
        st.builds(lambda xs: {"$and": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs: {"$or": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda x: {"$not": x}, inner),
        st.builds(lambda f, xs: {**f, "$or": xs}, fields, st.lists(inner, min_size=1, max_size=2)),
    )


filters = st.recursive(fields, documents, max_leaves=8)


@pytest.fixture(scope="module")
def conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        yield c


def sql_matches(conn, flt, records) -> list[bool]:
    condition, params = compile_filter(flt, text_columns=TEXT_COLUMNS)
    texts = [_metadata_json(r or {}) for r in records]
    query = psycopg.sql.SQL(
        "SELECT coalesce(array_agg(i ORDER BY i), '{{}}') FROM unnest(%s::text[]::jsonb[]) "
        "WITH ORDINALITY AS r(metadata, i) CROSS JOIN LATERAL (SELECT {key} COLLATE \"C\" AS {column}) k "
        "WHERE {cond}").format(key=text_key("resource_id"), column=psycopg.sql.Identifier(TEXT_COLUMNS["resource_id"]),
                              cond=condition)
    (passed,) = conn.execute(query, [texts, *params]).fetchone()
    chosen = set(passed)
    return [i + 1 in chosen for i in range(len(records))]


@settings(max_examples=2000, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(flt=filters, records=st.lists(record, min_size=1, max_size=12))
def test_compiled_filters_pass_exactly_what_the_core_passes(conn, flt, records):
    expected = _core.matches_vector_filter(flt, records)
    assert sql_matches(conn, flt, records) == expected, (flt, records)


@pytest.mark.parametrize("flt, record, expected", [
    ({"a": 1}, {"a": 1.0}, True),
    ({"a": 1}, {"a": True}, False),
    ({"a": "1"}, {"a": 1}, False),
    ({"a": None}, {}, False),
    ({"a": None}, {"a": None}, True),
    ({"a": {"$ne": 1}}, {}, True),
    ({"a": {"$nin": [1]}}, {}, True),
    ({"a": {"$not": {"$gt": 1}}}, {}, True),
    ({"a": {"$gt": 1}}, {"a": "2"}, False),
    ({"a": {"$gt": "B"}}, {"a": "a"}, True),  # byte order, not a locale's
    ({"a": {"$lt": "é"}}, {"a": "z"}, True),
    ({"a": 2**60}, {"a": 2.0**60}, True),
    ({"a": {"$gt": 2**60}}, {"a": 2.0**60 + 256}, True),
    ({"a": {"$lt": 2**53 + 1}}, {"a": 2.0**53}, True),
    ({"a": {"$in": [1]}}, {"a": [1]}, False),
    ({"a": 1}, {"a": [1]}, False),
    ({"a": {"$exists": True}}, {"a": None}, True),
    ({"a": {"$gte": "a\x00"}}, {"a": "a"}, False),
    ({"a": {"$gt": "a\x00"}}, {"a": "ab"}, True),
    ({"$not": {}}, {}, False),
    ({"$and": [{}, {}]}, {}, True),
    ({"resource_id": "1"}, {"resource_id": 1}, False),
    ({"resource_id": "1"}, {"resource_id": "1"}, True),
    ({"resource_id": {"$ne": "1"}}, {}, True),
    ({"resource_id": {"$ne": "1"}}, {"resource_id": ["1"]}, True),
    ({"resource_id": {"$in": ["a", "b"]}}, {"resource_id": "b"}, True),
    ({"resource_id": {"$in": ["a", 1]}}, {"resource_id": 1}, True),
    ({"resource_id": {"$nin": ["a"]}}, {"resource_id": None}, True),
    ({"resource_id": "a\x00"}, {"resource_id": "a"}, False),
])
def test_edge_cases_agree(conn, flt, record, expected):
    assert _core.matches_vector_filter(flt, [record]) == [expected]
    assert sql_matches(conn, flt, [record]) == [expected]


def test_bad_filters_raise_the_core_errors():
    for flt in ({"a": {"$bogus": 1}}, {"$or": []}, {"a": {"$gt": None}}, {"a": {"$in": 3}}):
        with pytest.raises(InvalidFilterError) as raised:
            compile_filter(flt)
        with pytest.raises(InvalidFilterError) as core:
            _core.validate_vector_filter(flt)
        assert str(raised.value) == str(core.value)


def test_stored_floats_keep_their_value_and_type():
    import json

    for value in (0.1, 2.0**53, 2.0**60, -1e300, 5e-324, 1.0):
        text = _metadata_json({"x": value})
        assert json.loads(text) == {"x": value} and isinstance(json.loads(text)["x"], float)
    assert float_json(2.0**60) == "1152921504606846976.0"


def test_metadata_jsonb_cannot_hold_is_refused():
    for bad in ({"x": float("nan")}, {"x": [float("inf")]}, {"x": "a\x00"}, {"a\x00": 1}):
        with pytest.raises(InvalidArgumentError):
            _metadata_json(bad)
