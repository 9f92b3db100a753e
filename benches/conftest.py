"""Shared fixtures for the benchmark suites: stores of a chosen size, built once per session."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

SIZES = {"10k": 10_000, "100k": 100_000, "1m": 1_000_000}
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def pytest_addoption(parser):
    parser.addoption("--bench-size", default="10k", choices=sorted(SIZES),
                     help="messages in the benchmark store (10k threads at 1m)")


@pytest.fixture(scope="session")
def bench_size(request):
    return SIZES[request.config.getoption("--bench-size")]


def conversation(count, *, threads=None, resources=100, seed=7):
    """``count`` messages over ``threads`` threads (count/100 by default), in arrival order.

    Threads take turns, so a thread's messages are spread over the whole table as in a live
    service. Every message has shallow metadata: ``topic`` (5 values) and ``priority`` (1..3).
    """
    import random

    rng = random.Random(seed)
    threads = threads or max(1, count // 100)
    topics = ["billing", "support", "travel", "books", "food"]
    for i in range(count):
        t = i % threads
        yield {
            "id": f"m{i}",
            "thread_id": f"t{t}",
            "resource_id": f"r{t % resources}",
            "role": "user" if (i // threads) % 2 == 0 else "assistant",
            "content": f"message {i} of thread {t} about {rng.choice(topics)} and item {rng.randrange(1000)}",
            "created_at": T0 + timedelta(seconds=i),
            "metadata": {"topic": rng.choice(topics), "priority": rng.randrange(1, 4)},
        }


def cycle(items):
    """A function returning the next of ``items`` on each call, round and round."""
    state = {"i": 0}

    def nxt():
        state["i"] = (state["i"] + 1) % len(items)
        return items[state["i"]]
    return nxt
