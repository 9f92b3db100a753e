"""The core's Timeline against a plain-Python model, on random data (hypothesis, seeded)."""

from __future__ import annotations

from hypothesis import given, seed, settings
from hypothesis import strategies as st

from threadrecall._core import Timeline

from oracles import OracleTimeline

THREADS = ["t1", "t2", "t3"]
RESOURCES = [None, "r1", "r2"]
values = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from([0.0, 1.0, 1.5]),
                   st.sampled_from(["a", "b", "1"]))
metadata = st.dictionaries(st.sampled_from(["k", "j"]), values, max_size=2)
row = st.tuples(st.sampled_from(THREADS), st.sampled_from(RESOURCES), st.integers(0, 20), metadata)


def build(rows, deletions):
    ours, oracle = Timeline(), OracleTimeline()
    columns = (
        [f"m{i}" for i in range(len(rows))],
        [r[0] for r in rows],
        [r[1] for r in rows],
        [r[2] for r in rows],
        list(range(1, len(rows) + 1)),
        [r[3] for r in rows],
        [f'{{"n":{i}}}' for i in range(len(rows))],
    )
    for t in (ours, oracle):
        t.upsert(*columns)
        t.remove([f"m{i}" for i in deletions])
    return ours, oracle


@seed(20240501)
@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(row, max_size=40),
    deletions=st.lists(st.integers(0, 40), max_size=5),
    thread=st.sampled_from(THREADS),
    resource=st.sampled_from(RESOURCES),
    start=st.one_of(st.none(), st.integers(0, 20)),
    end=st.one_of(st.none(), st.integers(0, 20)),
    exclusive=st.tuples(st.booleans(), st.booleans()),
    where=metadata,
    descending=st.booleans(),
    offset=st.integers(0, 10),
    limit=st.one_of(st.none(), st.integers(0, 10)),
)
def test_page_matches_the_model(rows, deletions, thread, resource, start, end, exclusive, where,
                                descending, offset, limit):
    ours, oracle = build(rows, deletions)
    args = dict(resource_id=resource, start=start, start_exclusive=exclusive[0], end=end,
                end_exclusive=exclusive[1], metadata=where or None, descending=descending,
                offset=offset, limit=limit)
    assert ours.page(thread, **args) == oracle.page(thread, **args)


@seed(20240502)
@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(row, max_size=40),
    deletions=st.lists(st.integers(0, 40), max_size=5),
    includes=st.lists(st.tuples(st.integers(0, 45).map(lambda i: f"m{i}"), st.integers(0, 3),
                                st.integers(0, 3)), max_size=4),
    resource=st.sampled_from(RESOURCES),
)
def test_window_matches_the_model(rows, deletions, includes, resource):
    ours, oracle = build(rows, deletions)
    assert ours.window(includes, resource) == oracle.window(includes, resource)
