"""The compiled core's filters and timeline, through the Python binding.

Filter evaluation is compared with a pure-Python oracle on random filters and records
(hypothesis, fixed seeds); the reference's error texts are checked table by table.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, seed, settings
from hypothesis import strategies as st

from threadrecall import _core
from threadrecall.errors import FilterTypeError, InvalidArgumentError, InvalidFilterError

# ---------------------------------------------------------------- oracle

MISSING = object()


def _kind(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "str"
    return "other"


def oracle_eq(stored, wanted) -> bool:
    """Equality as the filters define it: numbers numerically, other types only with their own."""
    if stored is MISSING or _kind(stored) != _kind(wanted) or _kind(stored) == "other":
        return False
    return stored == wanted


def oracle_order(stored, wanted):
    """-1/0/1 for number-vs-number or str-vs-str, else None."""
    if stored is MISSING or _kind(stored) != _kind(wanted) or _kind(stored) not in ("number", "str"):
        return None
    if isinstance(stored, float) and math.isnan(stored):
        return None
    return (stored > wanted) - (stored < wanted)


def oracle_op(stored, op, operand) -> bool:
    order = oracle_order(stored, operand) if op in ("$gt", "$gte", "$lt", "$lte") else None
    if op == "$eq":
        return oracle_eq(stored, operand)
    if op == "$ne":
        return not oracle_eq(stored, operand)
    if op == "$gt":
        return order == 1
    if op == "$gte":
        return order in (0, 1)
    if op == "$lt":
        return order == -1
    if op == "$lte":
        return order in (-1, 0)
    if op == "$in":
        return any(oracle_eq(stored, v) for v in operand)
    if op == "$nin":
        return not any(oracle_eq(stored, v) for v in operand)
    if op == "$exists":
        return (stored is not MISSING) == operand
    if op == "$not":
        return not all(oracle_op(stored, o, v) for o, v in operand.items())
    raise AssertionError(op)


def oracle_vector(filt: dict, record: dict) -> bool:
    for key, cond in filt.items():
        if key == "$and":
            ok = all(oracle_vector(f, record) for f in cond)
        elif key == "$or":
            ok = any(oracle_vector(f, record) for f in cond)
        elif key == "$not":
            ok = not oracle_vector(cond, record)
        elif isinstance(cond, dict):
            ok = all(oracle_op(record.get(key, MISSING), op, v) for op, v in cond.items())
        else:
            ok = oracle_eq(record.get(key, MISSING), cond)
        if not ok:
            return False
    return True


def oracle_metadata(filt: dict, record: dict | None) -> bool:
    record = record or {}
    return all(oracle_eq(record.get(k, MISSING), v) for k, v in filt.items())


# ---------------------------------------------------------------- strategies

KEYS = ["a", "b", "c"]
SCALARS = [None, True, False, 0, 1, -1, 1.0, 2.5, -0.0, 2**53, 2**53 + 1, float(2**53),
           2**63 - 1, -(2**63), "x", "y", "", "2024-01-01", "2024-01-01T10:00:00Z"]
scalars = st.sampled_from(SCALARS) | st.integers(-3, 3) | st.text(alphabet="xyz", max_size=2)
orderables = scalars.filter(lambda v: _kind(v) in ("number", "str"))
stored_values = scalars | st.just([1]) | st.just({"nested": 1}) | st.just(float("nan"))
records = st.dictionaries(st.sampled_from(KEYS), stored_values, max_size=3)


def operator_maps():
    single = st.one_of(
        st.tuples(st.sampled_from(["$eq", "$ne"]), scalars),
        st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), orderables),
        st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(scalars, max_size=3)),
        st.tuples(st.just("$exists"), st.booleans()),
    )
    plain = st.lists(single, min_size=1, max_size=3).map(dict)
    return plain | plain.map(lambda ops: {"$not": ops})


leaf_filters = st.dictionaries(
    st.sampled_from(KEYS), scalars | operator_maps(), min_size=1, max_size=2
)
vector_filters = st.recursive(
    leaf_filters,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda fs: {"$and": fs}),
        st.lists(inner, min_size=1, max_size=3).map(lambda fs: {"$or": fs}),
        inner.map(lambda f: {"$not": f}),
        st.tuples(inner, leaf_filters).map(lambda p: {**p[1], **p[0]}),
    ),
    max_leaves=8,
)
metadata_filters = st.dictionaries(st.sampled_from(KEYS), scalars, max_size=3)


@seed(20240611)
@settings(max_examples=400, deadline=None)
@given(vector_filters, st.lists(records | st.none(), min_size=1, max_size=6))
@example({"a": {"$gt": float(2**53)}, "b": {"$lte": 2**53}}, [{"a": 2**53 + 1, "b": float(2**53)}])
def test_vector_filter_matches_oracle(filt, recs):
    got = _core.matches_vector_filter(filt, recs)
    assert got == [oracle_vector(filt, r or {}) for r in recs]


@seed(20240612)
@settings(max_examples=300, deadline=None)
@given(metadata_filters, st.lists(records | st.none(), min_size=1, max_size=6))
@example({"a": float(2**53)}, [{"a": 2**53 + 1}, {"a": 2**53}, {"a": True}, {}])
def test_metadata_filter_matches_oracle(filt, recs):
    expected = [oracle_metadata(filt, r) for r in recs]
    assert _core.matches_metadata_filter(filt, recs) == expected

    timeline = _core.Timeline()
    n = len(recs)
    ids = [f"m{i}" for i in range(n)]
    timeline.upsert(ids, ["t"] * n, [None] * n, list(range(n)), list(range(n)), recs, ["{}"] * n)
    rows, total = timeline.page("t", metadata=filt)
    assert [row[0] for row in rows] == [i for i, ok in zip(ids, expected) if ok]
    assert total == sum(expected)


# ---------------------------------------------------------------- reference error texts

BAD_KEY = 'Invalid metadata filter key "{}".'
BAD_VALUE = (
    'Invalid metadata filter value for key "{}". '
    "Values must be string, finite number, boolean, or null."
)


@pytest.mark.parametrize(
    ("filt", "error", "message"),
    [
        ({"1abc": 1}, InvalidFilterError, BAD_KEY.format("1abc")),
        ({"a-b": 1}, InvalidFilterError, BAD_KEY.format("a-b")),
        ({"__proto__": 1}, InvalidFilterError, BAD_KEY.format("__proto__")),
        ({"constructor": 1}, InvalidFilterError, BAD_KEY.format("constructor")),
        ({"prototype": 1}, InvalidFilterError, BAD_KEY.format("prototype")),
        ({"k" * 129: 1}, InvalidFilterError, BAD_KEY.format("k" * 129)),
        ({"": 1}, InvalidFilterError, BAD_KEY.format("")),
        ({"k": float("nan")}, InvalidFilterError, BAD_VALUE.format("k")),
        ({"k": float("inf")}, InvalidFilterError, BAD_VALUE.format("k")),
        ({"k": float("-inf")}, InvalidFilterError, BAD_VALUE.format("k")),
        ({"k": {}}, InvalidFilterError, BAD_VALUE.format("k")),
        ({"k": []}, InvalidFilterError, BAD_VALUE.format("k")),
        ({"k": object()}, InvalidFilterError, BAD_VALUE.format("k")),
        ({"ok": 1, "v": [], "bad-key": 1}, InvalidFilterError, BAD_VALUE.format("v")),
        (None, FilterTypeError, "Metadata filter must be an object."),
        ([], FilterTypeError, "Metadata filter must be an object."),
        ([("a", 1)], FilterTypeError, "Metadata filter must be an object."),
        ("a", FilterTypeError, "Metadata filter must be an object."),
    ],
)
def test_metadata_filter_errors(filt, error, message):
    with pytest.raises(error) as caught:
        _core.validate_metadata_filter(filt)
    assert str(caught.value) == message


def test_metadata_filter_accepts_valid_input():
    for filt in [{}, {"k" * 128: 1}, {"_a1": None, "B": True, "c": "s", "d": 1.5, "e": 10**30}]:
        assert _core.validate_metadata_filter(filt) is None


def test_filter_errors_are_builtin_subclasses():
    with pytest.raises(ValueError):
        _core.validate_metadata_filter({"a-b": 1})
    with pytest.raises(TypeError):
        _core.validate_vector_filter([1])


@pytest.mark.parametrize(
    ("filt", "needle"),
    [
        ({"a": {"$regex": "x"}}, "$regex"),
        ({"$nor": [{"a": 1}]}, "$nor"),
        ({"a": [1, 2]}, '"a"'),
        ({"a": {"b": 1}}, '"a"'),
        ({"a": {}}, '"a"'),
        ({"$and": []}, "$and"),
        ({"$or": {"a": 1}}, "$or"),
        ({"a": {"$in": 1}}, "$in"),
        ({"a": {"$nin": [[1]]}}, "$nin"),
        ({"a": {"$exists": 1}}, "$exists"),
        ({"a": {"$gt": None}}, "$gt"),
        ({"a": {"$lt": float("nan")}}, "$lt"),
        ({"a": float("inf")}, '"a"'),
        ({"a": {"$not": 1}}, "$not"),
        ({1: "a"}, "int"),
    ],
)
def test_vector_filter_errors_name_the_key_or_operator(filt, needle):
    with pytest.raises(InvalidFilterError, match=None) as caught:
        _core.validate_vector_filter(filt)
    assert needle in str(caught.value)


@pytest.mark.parametrize("filt", [None, [], "a", 1])
def test_vector_filter_must_be_a_mapping(filt):
    with pytest.raises(FilterTypeError, match="vector filter must be a mapping"):
        _core.validate_vector_filter(filt)


def test_deeply_nested_vector_filter_is_rejected():
    filt = {"a": 1}
    for _ in range(200):
        filt = {"$not": filt}
    with pytest.raises(InvalidFilterError, match="deep"):
        _core.validate_vector_filter(filt)


# ---------------------------------------------------------------- timeline smoke test


@pytest.fixture
def timeline():
    t = _core.Timeline()
    n = 6
    t.upsert(
        [f"m{i}" for i in range(n)],
        ["t1"] * n,
        ["r1" if i % 2 == 0 else "r2" for i in range(n)],
        [1_000 * i for i in range(n)],
        list(range(n)),
        [{"i": i} for i in range(n)],
        [f'{{"i": {i}}}' for i in range(n)],
    )
    t.upsert(["x"], ["t2"], [None], [500], [99], [None], ["{}"])
    return t


def _ids(rows):
    return [row[0] for row in rows]


def test_timeline_page(timeline):
    assert len(timeline) == 7
    rows, total = timeline.page("t1", descending=True, limit=2)
    assert (_ids(rows), total) == (["m5", "m4"], 6)
    assert rows[0] == ("m5", "t1", "r2", 5_000, 5, '{"i": 5}')
    rows, total = timeline.page("t1", start=1_000, end=3_000, end_exclusive=True)
    assert (_ids(rows), total) == (["m1", "m2"], 2)
    rows, total = timeline.page("t1", resource_id="r1", offset=1)
    assert (_ids(rows), total) == (["m2", "m4"], 3)
    assert timeline.page("t1", metadata={"i": 3})[0][0][0] == "m3"
    assert timeline.page("nope") == ([], 0)


def test_timeline_cursor(timeline):
    rows, total = timeline.page("t1", after_id="m1", limit=2)
    assert (_ids(rows), total) == (["m2", "m3"], 4)
    rows, _ = timeline.page("t1", before_id="m4", limit=2)
    assert _ids(rows) == ["m2", "m3"]
    with pytest.raises(InvalidArgumentError, match="no message with id x in thread t1"):
        timeline.page("t1", before_id="x")


def test_timeline_window_get_and_remove(timeline):
    rows = timeline.window([("m1", 1, 1), ("m2", 0, 1), ("x", 3, 3), ("gone", 1, 1)])
    assert _ids(rows) == ["m0", "x", "m1", "m2", "m3"]
    assert _ids(timeline.window([("m2", 1, 1)], resource_id="r1")) == ["m0", "m2", "m4"]
    assert timeline.get("x") == ("x", "t2", None, 500, 99, "{}")
    assert timeline.get("gone") is None
    assert timeline.remove(["m0", "gone"]) == 1
    assert timeline.remove_thread("t1") == 5
    assert len(timeline) == 1


def test_timeline_bad_arguments(timeline):
    with pytest.raises(InvalidArgumentError):
        timeline.upsert(["a"], [], [None], [1], [1], [None], ["{}"])
    with pytest.raises(InvalidArgumentError):
        timeline.page("t1", offset=-1)
    with pytest.raises(InvalidArgumentError):
        timeline.window([("m1", -1, 0)])
    with pytest.raises(InvalidFilterError):
        timeline.page("t1", metadata={"a-b": 1})
    with pytest.raises(FilterTypeError):
        timeline.page("t1", metadata=[1])
