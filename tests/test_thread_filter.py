"""list_threads' metadata filter: DuckDB SQL against the plain-Python rule, and its errors."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from threadrecall.errors import FilterTypeError, InvalidFilterError

from oracles import metadata_matches

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([2**60 + 1, 2**60, -(2**63), 2**64 + 5, int(1e300)]),
    st.sampled_from([0.0, 1.0, 1.5, -2.0, 1e300, float(2**60)]), st.sampled_from(["", "a", "1", "true"]),
)
stored_values = st.one_of(scalars, st.just([1]), st.just({"a": 1}))
KEYS = ["a", "b", "_c"]


@seed(20240503)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(threads=st.lists(st.dictionaries(st.sampled_from(KEYS), stored_values, max_size=3), max_size=8),
       where=st.dictionaries(st.sampled_from(KEYS), scalars, max_size=2))
def test_sql_matches_the_python_rule(memory, threads, where):
    for t in memory.list_threads(per_page=False).threads:
        memory.delete_thread(t.id)
    for i, meta in enumerate(threads):
        memory.create_thread("r", thread_id=f"t{i}", metadata=meta)
    got = {t.id for t in memory.list_threads(metadata=where, per_page=False).threads}
    want = {f"t{i}" for i, meta in enumerate(threads) if metadata_matches(meta, where)}
    assert got == want


@pytest.mark.parametrize("where, error, text", [
    ([1], FilterTypeError, "Metadata filter must be an object."),
    ({"__proto__": 1}, InvalidFilterError, 'Invalid metadata key: "__proto__".'),
    ({"a-b": 1}, InvalidFilterError, 'Invalid metadata key: "a-b". Keys must start with a letter or underscore'),
    ({"k" * 129: 1}, InvalidFilterError, "exceeds maximum length of 128 characters."),
    ({"a": [1]}, InvalidFilterError, 'Metadata filter value for key "a" must be a scalar type'),
    ({"a": math.nan}, InvalidFilterError, 'Metadata filter value for key "a" must be a scalar type'),
])
def test_thread_filter_errors(memory, where, error, text):
    with pytest.raises(error) as info:
        memory.list_threads(metadata=where)
    assert text in str(info.value)
