"""Timeline and filter latency through the binding (pytest-benchmark).

Run: pytest benches/bench_timeline.py --benchmark-only (after `maturin develop --release`).
Data: 200,000 messages over 2,000 threads, seeded.
"""

from __future__ import annotations

import random

import pytest

from threadrecall import _core

THREADS = 2_000
PER_THREAD = 100


@pytest.fixture(scope="module")
def timeline():
    rng = random.Random(7)
    t = _core.Timeline()
    n = THREADS * PER_THREAD
    ids = [f"m{i}" for i in range(n)]
    threads = [f"t{i % THREADS}" for i in range(n)]
    resources = [f"r{i % 50}" for i in range(n)]
    created = [i * 1_000 for i in range(n)]
    metadata = [{"kind": rng.choice(["a", "b", "c"]), "n": i % 7} for i in range(n)]
    payloads = ['{"role":"user","content":"hello"}'] * n
    t.upsert(ids, threads, resources, created, list(range(n)), metadata, payloads)
    return t


def test_last_ten(benchmark, timeline):
    rows, total = benchmark(timeline.page, "t17", descending=True, limit=10)
    assert len(rows) == 10 and total == PER_THREAD


def test_metadata_page(benchmark, timeline):
    rows, _ = benchmark(timeline.page, "t17", metadata={"kind": "a"}, limit=10)
    assert rows


def test_cursor_page(benchmark, timeline):
    rows, _ = benchmark(timeline.page, "t17", before_id="m100017", limit=10)
    assert len(rows) == 10


def test_window_of_four_hits(benchmark, timeline):
    includes = [(f"m{17 + THREADS * k}", 2, 2) for k in (5, 30, 60, 90)]
    rows = benchmark(timeline.window, includes)
    assert len(rows) == 20


def test_save_one_message(benchmark, timeline):
    counter = iter(range(10**9))

    def save():
        i = next(counter)
        timeline.upsert([f"new{i}"], ["t17"], ["r17"], [10**12 + i], [10**9 + i], [{}], ["{}"])

    benchmark(save)


def test_vector_filter_over_1000_records(benchmark):
    records = [{"thread_id": f"t{i % 10}", "n": i} for i in range(1_000)]
    filt = {"thread_id": {"$in": ["t1", "t2"]}, "n": {"$gte": 100}}
    out = benchmark(_core.matches_vector_filter, filt, records)
    assert sum(out) == 180
