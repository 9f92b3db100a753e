"""Summaries and working memory without a model's latency: the thread page walk, prompt
building and answer parsing of ``summarize_thread`` (with ``ScriptedModel``), and atomic
working-memory merges on a DuckDB file.

Run: ``pytest benches/bench_summaries.py --benchmark-only``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from threadrecall import Extractor, Memory, MemoryConfig, WorkingMemoryConfig
from threadrecall.models import ScriptedModel
from threadrecall.storage import DuckDBStorage

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
ANSWER = ("<observations>\nDate: Jan 1, 2026\n"
          + "".join(f"* 🟡 (09:00) note {i} about the work\n" for i in range(200))
          + "</observations>\n<mood>calm</mood>")


@pytest.fixture(scope="module", params=[1_000, 10_000])
def long_thread(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("summaries") / "bench.duckdb"
    memory = Memory(storage=DuckDBStorage(path))
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([
        {"id": f"m{i:06d}", "thread_id": "t1", "role": ("user", "assistant")[i % 2],
         "content": f"message {i} about the deadline and the budget of the project",
         "created_at": T0 + timedelta(seconds=30 * i)} for i in range(request.param)])
    yield memory, request.param
    memory.storage.close()


def test_summarize_thread_overhead(benchmark, long_thread):
    memory, size = long_thread
    mood = Extractor("mood", instructions="The caller's mood.")

    def run():
        return memory.summarize_thread("t1", ScriptedModel([ANSWER]), extract=[mood])

    result = benchmark(run)
    assert result.extracted == {"mood": "calm"}
    benchmark.extra_info["messages"] = size


@pytest.fixture
def schema_memory(tmp_path):
    memory = Memory(storage=DuckDBStorage(tmp_path / "wm.duckdb"),
                    options=MemoryConfig(working_memory=WorkingMemoryConfig(
                        enabled=True, schema={"type": "object"})))
    memory.create_thread("r1", thread_id="t1")
    yield memory
    memory.storage.close()


def test_merge_working_memory(benchmark, schema_memory):
    counter = iter(range(10**9))

    def merge():
        n = next(counter)
        return schema_memory.merge_working_memory(
            "t1", {f"k{n % 50}": n, "profile": {"seen": n}}, resource_id="r1")

    merged = benchmark(merge)
    assert "profile" in merged
